"""Namespace properties, parsed once into typed settings.

Every property is a string (Lance passes properties as ``Dict[str, str]``). Keys:

``endpoint``            Iceberg REST catalog URL (required, ``http://`` or ``https://``).
``auth_token``          Bearer token sent with every request.
``credential``          OAuth2 client credentials ``client_id:client_secret``; pyiceberg obtains
                        and refreshes the token.
``scope``               OAuth2 scope (default ``catalog``).
``oauth2-server-uri``   OAuth2 token endpoint (default: the catalog's ``/v1/oauth/tokens``).
``connect_timeout``     Connection timeout in milliseconds (default 10000).
``read_timeout``        Read timeout in milliseconds (default 30000).
``max_retries``         Retries for failed connections and 429/502/503/504 answers (default 3).
``root``                Storage root for tables declared without a location (default: the current
                        working directory; a relative path is made absolute).
``storage.<key>``       Handed to Lance as storage option ``<key>``.
``iceberg.<key>``       Handed to pyiceberg's REST catalog as property ``<key>``, e.g.
                        ``iceberg.header.X-Tenant``, ``iceberg.rest.sigv4-enabled``, ``iceberg.audience``.
``vend_credentials``    Ask the catalog for vended storage credentials on every describe and
                        declare, not only when the request says ``vend_credentials=true``
                        (default false).
``oauth2_refresh_margin_seconds``  Refresh an OAuth2 token this long before it expires (default 60).
``soft_delete``         ``drop_table`` keeps the data and can be undone until purged (default true;
                        false deletes at once). See ``lance_iceberg_ns.tables.tombstones``.
``soft_delete_ttl``     How long a soft-deleted table waits before ``purge_tables()`` reclaims it
                        (default ``7d``; ``30s``, ``15m``, ``12h``, ``2w`` or seconds).
``table_version_management``  Tables declared by this namespace have their Lance versions
                        managed by the catalog (default false; see ``lance_iceberg_ns.versions.managed``).
``commit_cache_seconds``  After this process commits a version of a managed table, how long the
                        state it committed answers ``describe_table`` and the latest-version request
                        without asking the catalog (default 2; 0 always asks).
``read_consistency_interval``  Seconds a data read may go without asking the catalog where its
                        table is, and without looking for a newer version, since the last read that
                        asked (lancedb's name and meaning; default unset: every read asks, strong
                        consistency; 0 asks every time too). See ``lance_iceberg_ns.data.opening``.
``table_type_cache_seconds``  How long a table's type (Lance or not) learnt by one listing is
                        trusted by the next (default 30; 0 looks every table up on every listing).
``lookup_threads``      Most ``loadTable`` requests in flight when a listing meets unknown tables
                        (default 64: each mostly waits for the network, so a catalog some
                        milliseconds away needs many in flight; threads start only as needed, and
                        the connection pool keeps one connection per thread).
``warehouses``          Comma-separated warehouse names: what ``list_namespaces`` answers at the
                        root and ``list_all_tables`` walks when given no warehouse (default: the
                        ``warehouse`` of a pyiceberg catalog configuration, else none).
``allowed_locations``   Comma-separated locations (paths or URIs) where tables may live besides
                        ``root``: declare and register refuse anything outside them with
                        PermissionDenied, and the bridge reads, writes and deletes nothing outside
                        them (see ``lance_iceberg_ns.storage.locations``).
``default_namespace``   The namespace a table id of one part (a bare table name, as lancedb's
                        ``open_table("orders")`` and DuckDB's Lance extension send it) belongs to,
                        its parts joined by ``delimiter`` (``wh.sales``); ``list_tables`` at the root
                        lists it (default: none, a one-part table id is InvalidInput).
``delimiter``           What joins the parts of an identifier given as a property (default ``.``;
                        give another when the warehouse's name has a dot).
``share_static_credentials``  Answer ``describe_table`` and ``declare_table`` with the secret
                        static ``storage.*`` options too (default true in process; the REST server
                        sets it false unless its operator opts in, so clients only ever get the
                        catalog's vended credentials).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

from lance_namespace.errors import InvalidInputError

from lance_iceberg_ns.identifiers import parse_namespace_id
from lance_iceberg_ns.storage.options import shown_to_callers, url_user_info
from lance_iceberg_ns.tables.tombstones import parse_duration

logger = logging.getLogger(__name__)

STORAGE_PREFIX = "storage."
ICEBERG_PREFIX = "iceberg."
KNOWN_KEYS = {
    "endpoint",
    "auth_token",
    "credential",
    "scope",
    "oauth2-server-uri",
    "connect_timeout",
    "read_timeout",
    "max_retries",
    "root",
    "table_type_cache_seconds",
    "lookup_threads",
    "vend_credentials",
    "oauth2_refresh_margin_seconds",
    "soft_delete",
    "soft_delete_ttl",
    "table_version_management",
    "commit_cache_seconds",
    "read_consistency_interval",
    "allowed_locations",
    "share_static_credentials",
    "warehouses",
    "default_namespace",
    "delimiter",
}
# Keys whose values are never shown: in repr, logs or error messages.
_SECRET_KEY_WORDS = (
    "token",
    "secret",
    "credential",
    "password",
    "passwd",
    "access_key",
    "access-key",
    "accesskey",
    "account_key",
    "private_key",
    "api_key",
    "api-key",
    "apikey",
    "sas",
    "signature",
    "master_key",
    "assertion",
    "connection_string",
    "private",
)


def looks_secret(key: str, value: object = None) -> bool:
    """True for a property or option that holds a secret: by its name, or (given its value) a URL
    with a user or password in it."""
    lowered = key.lower()
    return any(word in lowered for word in _SECRET_KEY_WORDS) or (isinstance(value, str) and bool(url_user_info(value)))


def _plain(value: str) -> bool:
    """A boolean or a number: no secret, and replacing it would garble every message."""
    text = value.strip().lower()
    return text in ("", "true", "false", "yes", "no") or text.lstrip("+-").replace(".", "", 1).isdigit()


def _int_setting(properties: Mapping[str, Any], key: str, default: int, minimum: int) -> int:
    raw = properties.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidInputError(f"Property '{key}' must be an integer, got {raw!r}") from None
    if value < minimum:
        raise InvalidInputError(f"Property '{key}' must be at least {minimum}, got {value}")
    return value


def _bool_setting(properties: Mapping[str, Any], key: str, default: bool) -> bool:
    raw = properties.get(key)
    if raw is None or raw == "":
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InvalidInputError(f"Property '{key}' must be true or false, got {raw!r}")


def _seconds_setting(properties: Mapping[str, Any], key: str) -> float | None:
    """A number of seconds, 0 or more, or None when unset."""
    raw = properties.get(key)
    if raw is None or str(raw).strip() == "":
        return None
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise InvalidInputError(f"Property '{key}' must be a number of seconds, got {raw!r}") from None
    if not math.isfinite(value) or value < 0:
        raise InvalidInputError(f"Property '{key}' must be a finite number of seconds, 0 or more, got {raw!r}")
    return value


def _list_setting(properties: Mapping[str, Any], key: str) -> tuple[str, ...]:
    raw = properties.get(key)
    if isinstance(raw, list | tuple):
        return tuple(str(item).strip() for item in raw if str(item).strip())
    return tuple(item.strip() for item in str(raw or "").split(",") if item.strip())


def _namespace_setting(properties: Mapping[str, Any], key: str) -> tuple[str, ...]:
    """A namespace below a warehouse, its parts joined by the property ``delimiter`` (``.``)."""
    raw = str(properties.get(key) or "").strip()
    if not raw:
        return ()
    delimiter = str(properties.get("delimiter") or ".")
    try:
        namespace = parse_namespace_id(raw.split(delimiter))
    except InvalidInputError as exc:
        raise InvalidInputError(f"Property '{key}': {exc}") from None
    if namespace is None or not namespace.path:
        raise InvalidInputError(
            f"Property '{key}' must name a namespace inside a warehouse, such as wh{delimiter}sales"
        )
    return tuple(namespace.parts)


def _absolute_root(raw: str | None) -> str:
    if not raw:
        return os.getcwd()
    if "://" in raw:  # an object store URI stays as given
        return raw.rstrip("/")
    if raw.startswith("file:"):
        raw = raw[len("file:") :]
    return os.path.abspath(os.path.expanduser(raw))


@dataclass(frozen=True)
class Settings:
    """The namespace's configuration; secrets are kept out of ``repr``."""

    endpoint: str
    root: str
    auth_token: str | None = field(default=None, repr=False)
    credential: str | None = field(default=None, repr=False)
    scope: str | None = None
    oauth2_server_uri: str | None = None
    connect_timeout_ms: int = 10_000
    read_timeout_ms: int = 30_000
    max_retries: int = 3
    table_type_cache_seconds: int = 30
    lookup_threads: int = 64
    vend_credentials: bool = False
    oauth2_refresh_margin_seconds: int = 60
    soft_delete: bool = True
    soft_delete_ttl_seconds: float = 7 * 86400
    table_version_management: bool = False
    commit_cache_seconds: int = 2
    read_consistency_interval: float | None = None  # None: every data read asks the catalog
    allowed_locations: tuple[str, ...] = ()
    warehouses: tuple[str, ...] = ()
    default_namespace: tuple[str, ...] = ()
    share_static_credentials: bool = True
    storage_options: dict[str, str] = field(default_factory=dict, repr=False)
    catalog_properties: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> Settings:
        """Parse and validate namespace properties; raises ``InvalidInputError`` on bad values."""
        endpoint = str(properties.get("endpoint") or "").strip()
        if not endpoint:
            raise InvalidInputError("Property 'endpoint' is required (the Iceberg REST catalog URL)")
        if not endpoint.startswith(("http://", "https://")):
            raise InvalidInputError("Property 'endpoint' must start with http:// or https://")
        try:
            parsed = urlsplit(endpoint)
            host, _port = parsed.hostname, parsed.port  # .port raises on a port that is not a number
        except ValueError:
            host = None
        if not host:
            raise InvalidInputError("Property 'endpoint' must be a URL with a host (and a numeric port, if any)")
        storage_options: dict[str, str] = {}
        catalog_properties: dict[str, str] = {}
        for key, value in properties.items():
            if key.startswith(STORAGE_PREFIX) and len(key) > len(STORAGE_PREFIX):
                storage_options[key[len(STORAGE_PREFIX) :]] = str(value)
            elif key.startswith(ICEBERG_PREFIX) and len(key) > len(ICEBERG_PREFIX):
                catalog_properties[key[len(ICEBERG_PREFIX) :]] = str(value)
            elif key not in KNOWN_KEYS:
                logger.warning("Ignoring unknown namespace property %r", key)
        _int_setting(properties, f"{ICEBERG_PREFIX}rest-page-size", 1, minimum=1)  # a page of 0 never ends
        return cls(
            endpoint=endpoint.rstrip("/"),
            root=_absolute_root(properties.get("root")),
            auth_token=properties.get("auth_token") or None,
            credential=properties.get("credential") or None,
            scope=properties.get("scope") or None,
            oauth2_server_uri=properties.get("oauth2-server-uri") or None,
            connect_timeout_ms=_int_setting(properties, "connect_timeout", 10_000, 1),
            read_timeout_ms=_int_setting(properties, "read_timeout", 30_000, 1),
            max_retries=_int_setting(properties, "max_retries", 3, 0),
            table_type_cache_seconds=_int_setting(properties, "table_type_cache_seconds", 30, 0),
            lookup_threads=_int_setting(properties, "lookup_threads", 64, 1),
            vend_credentials=_bool_setting(properties, "vend_credentials", False),
            oauth2_refresh_margin_seconds=_int_setting(properties, "oauth2_refresh_margin_seconds", 60, 0),
            soft_delete=_bool_setting(properties, "soft_delete", True),
            soft_delete_ttl_seconds=parse_duration(str(properties.get("soft_delete_ttl") or "7d")),
            table_version_management=_bool_setting(properties, "table_version_management", False),
            commit_cache_seconds=_int_setting(properties, "commit_cache_seconds", 2, 0),
            read_consistency_interval=_seconds_setting(properties, "read_consistency_interval"),
            allowed_locations=_list_setting(properties, "allowed_locations"),
            warehouses=_list_setting(properties, "warehouses"),
            default_namespace=_namespace_setting(properties, "default_namespace"),
            share_static_credentials=_bool_setting(properties, "share_static_credentials", True),
            storage_options=storage_options,
            catalog_properties=catalog_properties,
        )

    def secrets(self) -> list[str]:
        """Every configured value that must never be shown: the tokens, the client secret, what
        any URL carries before its ``@``, ``iceberg.*`` values that look secret, and every
        ``storage.*`` value but those callers may see (``storage_options.shown_to_callers``: a
        list of safe names, not a guess at secret ones) and plain booleans and numbers."""
        values = [self.auth_token, self.credential, *url_user_info(self.endpoint)]
        if self.credential and ":" in self.credential:
            values.append(self.credential.split(":", 1)[1])
        values += [v for k, v in self.storage_options.items() if not shown_to_callers(k, v) and not _plain(v)]
        values += [v for k, v in self.catalog_properties.items() if looks_secret(k)]
        for value in (*self.storage_options.values(), *self.catalog_properties.values()):
            values += url_user_info(value)
        return [v for v in values if v]

    def __repr__(self) -> str:
        shown = ", ".join(f"{each.name}={getattr(self, each.name)!r}" for each in fields(self) if each.repr)
        return self.redact(f"Settings({shown})")

    def redact(self, text: str) -> str:
        """Replace every configured secret in ``text`` with ``***``."""
        for secret in sorted(self.secrets(), key=len, reverse=True):
            text = text.replace(secret, "***")
        return text

    def connection_key(self) -> str:
        """A digest of everything that shapes the catalog connections (secrets included, never
        shown): namespaces with equal keys can share them."""
        import hashlib
        import json

        shaping = [
            self.endpoint,
            self.auth_token,
            self.credential,
            self.scope,
            self.oauth2_server_uri,
            self.connect_timeout_ms,
            self.read_timeout_ms,
            self.max_retries,
            self.lookup_threads,
            self.oauth2_refresh_margin_seconds,
            sorted(self.catalog_properties.items()),
        ]
        return hashlib.sha256(json.dumps(shaping).encode()).hexdigest()

    def principal(self) -> str:
        """Who this namespace acts as, without revealing a secret: the OAuth2 client id, or a
        fingerprint of the bearer token."""
        if self.credential:
            return "client:" + self.credential.split(":", 1)[0]
        if self.auth_token:
            import hashlib

            return "token:" + hashlib.sha256(self.auth_token.encode()).hexdigest()[:12]
        return "anonymous"
