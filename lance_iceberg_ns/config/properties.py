"""The table of namespace properties: one ``Property`` per key, with its parser, default and doc.

``Settings.from_properties`` parses by it, ``KNOWN_KEYS`` is its keys, the secrets it marks are
kept out of ``repr`` and messages, and the table of docs/configuration.md is drawn from it
(``markdown_table``; a test holds the page to it).

Every value arrives as given (Lance passes ``Dict[str, str]``; Python callers may pass other
types); an absent or empty value is replaced by the default, as a user would write it, before
it is parsed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from lance_namespace.errors import InvalidInputError

from lance_iceberg_ns.config.durations import duration_seconds
from lance_iceberg_ns.identifiers import parse_namespace_id

# A parser: (the value, or the default when unset, which may be None; the key; the values of the
# properties before it in the table) → the typed value. Raises InvalidInputError.
Parser = Callable[[Any, str, Mapping[str, Any]], Any]


@dataclass(frozen=True)
class Property:
    """One namespace property: what it is called, how it is read, and what it means."""

    key: str
    parse: Parser
    default: str | None  # the value taken when the property is unset or empty, written as a user would
    maps_to: str  # markdown: where the value goes
    doc: str  # markdown, one line: what the value means
    attribute: str | None = None  # the ``Settings`` field it fills: the key if None, none if ""
    shown_default: str | None = None  # markdown, for a default that is not a value ("current directory")
    secret: bool = False  # its value is never shown

    @property
    def settings_field(self) -> str:
        """The ``Settings`` field this property fills; empty when it fills none."""
        return self.key if self.attribute is None else self.attribute

    def default_text(self) -> str:
        """The default as the documentation shows it."""
        if self.shown_default is not None:
            return self.shown_default
        return "—" if self.default is None else f"`{self.default}`"


@dataclass(frozen=True)
class PropertyPrefix:
    """A family of properties passed on under their own key, with the prefix taken off."""

    prefix: str
    maps_to: str
    doc: str


# --- parsers ---------------------------------------------------------------------------------


def _endpoint(raw: Any, key: str, _: Mapping[str, Any]) -> str:
    endpoint = str(raw or "").strip()
    if not endpoint:
        raise InvalidInputError(f"Property '{key}' is required (the Iceberg REST catalog URL)")
    if not endpoint.startswith(("http://", "https://")):
        raise InvalidInputError(f"Property '{key}' must start with http:// or https://")
    try:
        parsed = urlsplit(endpoint)
        host, _port = parsed.hostname, parsed.port  # .port raises on a port that is not a number
    except ValueError:
        host = None
    if not host:
        raise InvalidInputError(f"Property '{key}' must be a URL with a host (and a numeric port, if any)")
    return endpoint.rstrip("/")


def _root(raw: Any, key: str, _: Mapping[str, Any]) -> str | None:
    if not raw:
        return None  # the catalog places tables (``location_mode``)
    if not isinstance(raw, str | os.PathLike):
        raise InvalidInputError(f"Property '{key}' must be a path or a URI, got a {type(raw).__name__}")
    text = os.fspath(raw)
    if "://" in text:  # an object store URI stays as given
        return text.rstrip("/")
    if text.startswith("file:"):
        text = text[len("file:") :]
    return os.path.abspath(os.path.expanduser(text))


LOCATION_MODES = ("root", "catalog")


def _location_mode(raw: Any, key: str, earlier: Mapping[str, Any]) -> str:
    """Who places a table declared without a location: the bridge under ``root``, or the catalog.
    Unset: ``root`` when a root is given, ``catalog`` otherwise."""
    root = earlier.get("root")
    if raw is None or not str(raw).strip():
        return "root" if root else "catalog"
    mode = str(raw).strip().lower()
    if mode not in LOCATION_MODES:
        raise InvalidInputError(f"Property '{key}' must be root or catalog, got {raw!r}")
    if mode == "root" and not root:
        raise InvalidInputError(f"Property '{key}' is root: give the property 'root', under which tables are placed")
    return mode


def _text(raw: Any, _key: str, _: Mapping[str, Any]) -> Any:
    return raw or None


def integer(minimum: int) -> Parser:
    """A parser of whole numbers, ``minimum`` or more."""

    def parse(raw: Any, key: str, _: Mapping[str, Any]) -> int:
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise InvalidInputError(f"Property '{key}' must be an integer, got {raw!r}") from None
        if value < minimum:
            raise InvalidInputError(f"Property '{key}' must be at least {minimum}, got {value}")
        return value

    return parse


def _boolean(raw: Any, key: str, _: Mapping[str, Any]) -> bool:
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InvalidInputError(f"Property '{key}' must be true or false, got {raw!r}")


def _duration(raw: Any, key: str, _: Mapping[str, Any]) -> float:
    return duration_seconds(raw, f"Property '{key}'")


def _optional_duration(raw: Any, key: str, _: Mapping[str, Any]) -> float | None:
    """A duration, or None when unset (blank counts as unset)."""
    if raw is None or str(raw).strip() == "":
        return None
    return duration_seconds(raw, f"Property '{key}'")


def _names(raw: Any, _key: str, _: Mapping[str, Any]) -> tuple[str, ...]:
    """Comma-separated names (or a list of them, from Python)."""
    if isinstance(raw, list | tuple):
        return tuple(str(item).strip() for item in raw if str(item).strip())
    return tuple(item.strip() for item in str(raw or "").split(",") if item.strip())


def _namespace(raw: Any, key: str, earlier: Mapping[str, Any]) -> tuple[str, ...]:
    """A namespace below a warehouse, its parts joined by the property ``delimiter``."""
    text = str(raw or "").strip()
    if not text:
        return ()
    delimiter = earlier["delimiter"]
    try:
        namespace = parse_namespace_id(text.split(delimiter))
    except InvalidInputError as exc:
        raise InvalidInputError(f"Property '{key}': {exc}") from None
    if namespace is None or not namespace.path:
        raise InvalidInputError(
            f"Property '{key}' must name a namespace inside a warehouse, such as wh{delimiter}sales"
        )
    return tuple(namespace.parts)


def _delimiter(raw: Any, _key: str, _: Mapping[str, Any]) -> str:
    return str(raw)


# --- the table -------------------------------------------------------------------------------

_DURATION_DOC = "a [duration](#durations)"

PROPERTIES: tuple[Property, ...] = (
    Property(
        "endpoint",
        _endpoint,
        None,
        "pyiceberg `uri`",
        "Iceberg REST catalog URL; must start with `http://` or `https://`",
        shown_default="required",
    ),
    Property(
        "auth_token",
        _text,
        None,
        "pyiceberg `token` (`Authorization: Bearer`)",
        "bearer token sent with every request",
        secret=True,
    ),
    Property(
        "credential",
        _text,
        None,
        "pyiceberg `auth` type `oauth2` (`client_id`, `client_secret`)",
        "OAuth2 client credentials `client_id:client_secret`; pyiceberg's OAuth2 manager fetches the token and "
        "refreshes it before expiry, and again on a 401/419",
        secret=True,
    ),
    Property("scope", _text, None, "pyiceberg OAuth2 `scope`", "OAuth2 scope", shown_default="`catalog`"),
    Property(
        "oauth2-server-uri",
        _text,
        None,
        "pyiceberg OAuth2 `token_url`",
        "OAuth2 token endpoint",
        attribute="oauth2_server_uri",
        shown_default="the catalog's `/v1/oauth/tokens`",
    ),
    Property(
        "connect_timeout",
        integer(1),
        "10000",
        "the requests session's connect timeout",
        "connection timeout, milliseconds",
        attribute="connect_timeout_ms",
    ),
    Property(
        "read_timeout",
        integer(1),
        "30000",
        "the requests session's read timeout",
        "read timeout, milliseconds",
        attribute="read_timeout_ms",
    ),
    Property(
        "max_retries",
        integer(0),
        "3",
        "urllib3 `Retry` on the session's adapter",
        "retries of failed connections, and of GET/HEAD answered 429/502/503/504 (with backoff, honouring "
        "`Retry-After`)",
    ),
    Property(
        "root",
        _root,
        None,
        "the location of tables declared without one, with `location_mode=root`: "
        "`{root}/{warehouse}/{namespace...}/{table}-{suffix}.lance`",
        "storage root; a relative path becomes absolute, from the working directory (`serve` warns of it); "
        "object store URIs (`s3://…`) are kept as given. Tables, "
        "wherever the catalog places them, must then lie under it or `allowed_locations`",
        shown_default="none",
    ),
    Property(
        "location_mode",
        _location_mode,
        None,
        "where `declare_table` and `create_table` put a table given no location",
        "`root`: under `root`, at a location the bridge picks; `catalog`: where the catalog places it "
        "(`createTable` with no location: S3 Tables, SeaweedFS table buckets, Lakekeeper, Polaris), confined "
        "to `root` and `allowed_locations` when either is given. See [where tables live](object-stores.md"
        "#where-tables-live-root-or-catalog)",
        shown_default="`root` when `root` is given, else `catalog`",
    ),
    Property(
        "warehouses",
        _names,
        None,
        "comma-separated warehouses: `list_namespaces` at the root answers them, `list_all_tables` walks them "
        "when given no id",
        "Iceberg REST cannot list warehouses. On a catalog without warehouse prefixes, the first is the name of "
        "its one warehouse (see [warehouses and prefixes](warehouses-and-prefixes.md))",
        shown_default="the pyiceberg catalog's `warehouse`, else none",
    ),
    Property(
        "delimiter",
        _delimiter,
        ".",
        "what joins the parts of `default_namespace`",
        "give another (`$`) when the warehouse's name has a dot: `wh.prod$sales`",
        attribute="",
    ),
    Property(
        "default_namespace",
        _namespace,
        None,
        "a table id of one part `[name]` becomes `[*default_namespace, name]` in every operation; `list_tables` "
        "at the root lists this namespace",
        "for clients that name tables alone (lancedb's `open_table(\"orders\")`, DuckDB's Lance extension): "
        "`wh.sales` (parts joined by `delimiter`), a namespace inside a warehouse; no other namespace id is "
        "rewritten, and without it a one-part table id is InvalidInput. See [pointing single-level clients at "
        "one namespace](rest-server.md#single-level-clients-one-namespace)",
        shown_default="none",
    ),
    Property(
        "allowed_locations",
        _names,
        None,
        "comma-separated paths or URIs where tables may also live (declare and register with a location)",
        "anything outside the root and these is PermissionDenied; see the [security model](security-model.md)",
        shown_default="none",
    ),
    Property(
        "share_static_credentials",
        _boolean,
        "true",
        "answer `describe_table` / `declare_table` with the secret static `storage.*` options too",
        "the REST server sets it `false` unless started with `--share-static-credentials`",
    ),
    Property(
        "soft_delete",
        _boolean,
        "true",
        "`drop_table`",
        "soft delete (see [lifecycle.md](lifecycle.md)); `false` deletes at once",
    ),
    Property(
        "soft_delete_ttl",
        _duration,
        "7d",
        "`purge_tables()`",
        f"how long soft-deleted tables wait before they are reclaimed: {_DURATION_DOC}",
        attribute="soft_delete_ttl_seconds",
    ),
    Property(
        "table_version_management",
        _boolean,
        "false",
        "the companion table property `table_version_management`",
        "tables this namespace declares have their Lance versions managed by the catalog (see [managed "
        "versions](managed-versions.md))",
    ),
    Property(
        "commit_cache_seconds",
        _duration,
        "2",
        "managed tables: `describe_table` and the latest-version request",
        "after this process commits a version of a managed table, how long the state it committed answers "
        "pylance's next write without a `loadTable` (a stale answer only makes that write's compare-and-swap "
        f"fail and pylance retry; see [managed versions](managed-versions.md)), {_DURATION_DOC}; `0` always "
        "asks the catalog",
    ),
    Property(
        "read_consistency_interval",
        _optional_duration,
        None,
        "data reads: `query_table`, `count_table_rows`, the query plans, stats, indices, tags and branches",
        "lancedb's name and meaning: how long a read may go without asking the catalog where its table is and "
        f"without looking for a newer version, {_DURATION_DOC}; unset and `0` ask on every read. See [read "
        "consistency](#read-consistency)",
        shown_default="unset (strong)",
    ),
    Property(
        "table_type_cache_seconds",
        _duration,
        "30",
        "`list_tables`",
        f"how long a table's type learnt by one listing is trusted, {_DURATION_DOC} (see "
        "[listing.md](listing.md)); `0` looks every table up on every listing",
    ),
    Property(
        "lookup_threads",
        integer(1),
        "64",
        "`list_tables`",
        "most `loadTable` requests in flight when a listing meets tables it has not seen; sized for a catalog "
        "some milliseconds away (threads start only as needed; the connection pool keeps one connection per "
        "thread)",
    ),
    Property(
        "vend_credentials",
        _boolean,
        "false",
        "`X-Iceberg-Access-Delegation: vended-credentials`",
        "return the catalog's vended storage credentials on every describe and declare, not only when asked "
        "(see [credentials-and-auth.md](credentials-and-auth.md))",
    ),
    Property(
        "oauth2_refresh_margin_seconds",
        _duration,
        "60",
        "the OAuth2 manager's refresh time",
        f"refresh an OAuth2 token this long before it expires, {_DURATION_DOC}",
    ),
)

STORAGE_PREFIX = "storage."
ICEBERG_PREFIX = "iceberg."
PREFIXES: tuple[PropertyPrefix, ...] = (
    PropertyPrefix(
        STORAGE_PREFIX,
        "Lance storage option `<key>`",
        "returned by `declare_table` and `describe_table`, used for the bridge's own dataset checks",
    ),
    PropertyPrefix(
        ICEBERG_PREFIX,
        "pyiceberg REST catalog property `<key>`",
        "`iceberg.header.X-Tenant`, `iceberg.rest.sigv4-enabled`, `iceberg.rest.signing-region`, "
        "`iceberg.audience`, `iceberg.ssl`, `iceberg.rest-page-size` (a positive integer: the catalog's page "
        "size for listings)…",
    ),
)

KNOWN_KEYS = frozenset(entry.key for entry in PROPERTIES)
BY_KEY = {entry.key: entry for entry in PROPERTIES}


def default_of(key: str) -> Any:
    """The value a property takes when it is unset: its default, parsed as a given value would be."""
    entry = BY_KEY[key]
    return entry.parse(entry.default, key, {"delimiter": BY_KEY["delimiter"].default})


def parse_properties(properties: Mapping[str, Any]) -> dict[str, Any]:
    """Every property of the table parsed, by key, in the table's order; an absent or empty value
    is the default. Raises ``InvalidInputError`` for the first bad value."""
    parsed: dict[str, Any] = {}
    for entry in PROPERTIES:
        raw = properties.get(entry.key)
        parsed[entry.key] = entry.parse(entry.default if raw is None or raw == "" else raw, entry.key, parsed)
    return parsed


def markdown_table() -> str:
    """The table of docs/configuration.md: every property, then every prefix."""
    rows = ["| property | default | maps to | meaning |", "|---|---|---|---|"]
    rows += [f"| `{p.key}` | {p.default_text()} | {p.maps_to} | {p.doc} |" for p in PROPERTIES]
    rows += [f"| `{p.prefix}<key>` | — | {p.maps_to} | {p.doc} |" for p in PREFIXES]
    return "\n".join(rows) + "\n"
