"""The server's settings: one table of what ``serve`` can be told (flag, variable, reader, default,
help), read from ``LANCE_ICEBERG_NS_*`` variables and a config file into one ``ServeSettings``.

Every setting has a variable, ``LANCE_ICEBERG_NS_`` and its flag's name (``--data-threads`` is
``LANCE_ICEBERG_NS_DATA_THREADS``; the bearer tokens ``LANCE_ICEBERG_NS_AUTH_TOKEN``).
``LANCE_ICEBERG_NS_CONFIG_FILE`` names a file of such variables, one ``NAME=value`` a line (as
docker's ``env_file`` and systemd's ``EnvironmentFile`` read it); a variable set in the environment
wins over the file, the file over the default. The command line (``lance-iceberg-ns serve``) builds
its flags from the same table and wins over both. Importing this module loads nothing but the
standard library: the command line reads the table before any command runs.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from lance_iceberg_ns.config.settings import Settings

SERVER_VARIABLE_PREFIX = "LANCE_ICEBERG_NS_"
AUTH_TOKEN_VARIABLE = "LANCE_ICEBERG_NS_AUTH_TOKEN"  # the server's bearer tokens, by commas or newlines
CONFIG_FILE_VARIABLE = "LANCE_ICEBERG_NS_CONFIG_FILE"

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 2333
DEFAULT_CATALOG_WAIT = 30.0
DEFAULT_GRACEFUL_TIMEOUT = 30.0
DEFAULT_MAX_DATA_BODY_MB = 256
DEFAULT_MAX_HELD_MB = 4 * DEFAULT_MAX_DATA_BODY_MB  # request and answer bodies held at once (server.guard)
DEFAULT_MAX_CONNECTIONS = 4096  # connections one server process keeps open at once (``connections``)
DEFAULT_REQUEST_READ_TIMEOUT = 30.0  # seconds a client may take to send a request's head and body
DEFAULT_DATA_THREADS = 8  # data operations running at once (server.capacity)
# data operations running at once at most: each may keep a data worker process (about 35 MB of its own idle)
MAX_DATA_THREADS = 256
DEFAULT_DATA_WORKER_MEMORY_MB = 4096  # the most one data worker may allocate unless told (server.isolation)
SMALLEST_DATA_WORKER_MEMORY_MB = 256  # below it, a worker cannot hold pylance once loaded
DEFAULT_DATA_REQUEST_SECONDS = 900.0  # how long one data request may run in its worker (server.isolation)


class ServeSettingsError(ValueError):
    """A setting the server cannot be started with; the message names the setting, never a secret."""


def variable_for(flag: str) -> str:
    """``--data-threads`` → ``LANCE_ICEBERG_NS_DATA_THREADS``."""
    return SERVER_VARIABLE_PREFIX + flag.lstrip("-").upper().replace("-", "_")


# --- readers: a setting's text to its value, with the command line's own wording on failure ----------


class Reader(Protocol):
    """A setting's text to its value; ``ServeSettingsError`` saying why it is none."""

    @property
    def metavar(self) -> str:
        """What ``--help`` shows for the value."""
        ...

    def __call__(self, text: str) -> Any: ...


@dataclass(frozen=True)
class Number:
    """A whole number (``whole``) or a number of seconds, at least ``minimum`` if given (above it
    when ``above``), at most ``maximum`` if given."""

    whole: bool = True
    minimum: float | None = None
    above: bool = False
    maximum: float | None = None

    @property
    def metavar(self) -> str:
        return "INTEGER" if self.whole else "SECONDS"

    def __call__(self, text: str) -> float:
        try:
            value: float = int(text) if self.whole else float(text)
        except ValueError:
            raise ServeSettingsError(f"The value is not a valid {'integer' if self.whole else 'float'}.") from None
        if not math.isfinite(value):  # a NaN or an infinity never times out, nor compares
            raise ServeSettingsError("The value is not a finite number.")
        below = self.minimum is not None and (value < self.minimum or (self.above and value == self.minimum))
        if below or (self.maximum is not None and value > self.maximum):
            raise ServeSettingsError(f"{value} is not in the range {self._range}.")
        return value

    @property
    def _range(self) -> str:
        """As click says a range: ``x>=1``, ``x>0``, ``0<=x<=65535``."""
        if self.maximum is None:
            return f"x>{self.minimum:g}" if self.above else f"x>={self.minimum:g}"
        low = "" if self.minimum is None else f"{self.minimum:g}{'<' if self.above else '<='}"
        return f"{low}x<={self.maximum:g}"


@dataclass(frozen=True)
class OneOf:
    """One of ``choices``, exactly."""

    choices: tuple[str, ...]

    @property
    def metavar(self) -> str:
        return "[" + "|".join(self.choices) + "]"

    def __call__(self, text: str) -> str:
        if text not in self.choices:
            raise ServeSettingsError(f"The value is not one of {', '.join(map(repr, self.choices))}.")
        return text


@dataclass(frozen=True)
class Text:
    """Any text (a host, a path)."""

    metavar: str = "TEXT"

    def __call__(self, text: str) -> str:
        return text


# The words a switch's variable may hold, as the command line reads them (click's own table).
BOOLEAN_WORDS = {
    "1": True,
    "0": False,
    "yes": True,
    "no": False,
    "true": True,
    "false": False,
    "on": True,
    "off": False,
    "t": True,
    "f": False,
    "y": True,
    "n": False,
    "": False,
}


@dataclass(frozen=True)
class Switch:
    """On or off: ``true``/``false``, ``1``/``0``, ``yes``/``no``, ``on``/``off`` (any case)."""

    metavar = "BOOLEAN"

    def __call__(self, text: str) -> bool:
        value = BOOLEAN_WORDS.get(text.strip().lower())
        if value is None:
            raise ServeSettingsError("The value is not a valid boolean: true or false (1 or 0, yes or no, on or off).")
        return value


@dataclass(frozen=True)
class ServeOption:
    """One setting of the server: its flag, how its text is read, its default and what it does.
    Its variable is the flag's (``variable_for``); ``field`` names it in ``ServeSettings.from_options``."""

    flag: str
    read: Reader
    default: Any
    help: str

    @property
    def field(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def variable(self) -> str:
        return variable_for(self.flag)

    @property
    def is_switch(self) -> bool:
        return isinstance(self.read, Switch)

    def value_in(self, environ: Mapping[str, str], from_file: Mapping[str, str]) -> Any:
        """The value a variable of ``environ`` sets (an empty one counts as unset, and hides the
        file's), else the file's, else the default. Raises ``ServeSettingsError`` naming the variable."""
        name = self.variable
        text = (environ[name] or None) if name in environ else from_file.get(name)
        if text is None:
            return self.default
        try:
            return self.read(text)
        except ServeSettingsError as exc:
            raise ServeSettingsError(f"Invalid value for {name}: {exc}") from None


# Every setting the server reads, in the order ``serve --help`` lists them. The bearer tokens
# (AUTH_TOKEN_VARIABLE) and the config file (CONFIG_FILE_VARIABLE) are read on their own.
SERVE_OPTIONS: tuple[ServeOption, ...] = (
    ServeOption(
        "--workers",
        Number(minimum=1),
        1,
        "server processes sharing the port (each with its own catalog connections and data threads)",
    ),
    ServeOption(
        "--graceful-timeout",
        Number(whole=False, minimum=0),
        DEFAULT_GRACEFUL_TIMEOUT,
        "on SIGTERM or Ctrl-C, seconds requests in flight have to finish before they are cut off",
    ),
    ServeOption(
        "--log-format",
        OneOf(("text", "json")),
        "text",
        "log lines as text or as one JSON object each (every line carries its request's ID)",
    ),
    ServeOption(
        "--catalog-wait",
        Number(whole=False, minimum=0),
        DEFAULT_CATALOG_WAIT,
        "seconds to wait at start for the Iceberg catalog to answer before giving up (exit code 5); "
        "0 starts at once, reported not ready on /readyz until the catalog answers",
    ),
    ServeOption("--host", Text(), DEFAULT_HOST, "the address to listen on"),
    ServeOption(
        "--port",
        Number(minimum=0, maximum=65535),
        DEFAULT_PORT,
        "the port to listen on (0: any free one, printed at start)",
    ),
    ServeOption(
        "--auth-token-file",
        Text("FILE"),
        None,
        "a file of bearer tokens clients may present, one a line",
    ),
    ServeOption("--forward-bearer-token", Switch(), False, "send each caller's bearer token to the Iceberg catalog"),
    ServeOption(
        "--allow-anonymous",
        Switch(),
        False,
        "serve without a bearer token on a --host other machines can reach (anyone reaching the port may "
        "read, write and drop tables); without it such a server refuses to start",
    ),
    ServeOption("--access-log", Switch(), False, "log every request (method, path, status)"),
    ServeOption(
        "--max-data-body-mb",
        Number(minimum=1),
        DEFAULT_MAX_DATA_BODY_MB,
        "the largest Arrow IPC body of a data request (create, insert, merge); 413 beyond it",
    ),
    ServeOption(
        "--max-held-mb",
        Number(minimum=1),
        DEFAULT_MAX_HELD_MB,
        "the request and answer bodies the server holds at once, all clients together (at least one largest "
        "body); a request or an answer that would pass it is answered 503",
    ),
    ServeOption(
        "--request-read-timeout",
        Number(whole=False, minimum=0, above=True),
        DEFAULT_REQUEST_READ_TIMEOUT,
        "seconds a client has to send a whole request (one more per MiB of its body); 408 and cut off beyond",
    ),
    ServeOption(
        "--max-connections",
        Number(minimum=1),
        DEFAULT_MAX_CONNECTIONS,
        "connections kept open at once (and at most the process's file limit less 512); past it the oldest "
        "one with no request under way is closed to make room",
    ),
    ServeOption(
        "--data-threads",
        Number(minimum=1, maximum=MAX_DATA_THREADS),
        DEFAULT_DATA_THREADS,
        "requests that read or write data (query, insert, index...) run at once, each in a worker process; "
        "more wait, and beyond four times as many waiting are answered 503; catalog requests are the server's own",
    ),
    ServeOption(
        "--data-worker-memory-mb",
        Number(minimum=SMALLEST_DATA_WORKER_MEMORY_MB),
        None,
        "the memory one data worker process may allocate (default: 4096, or less so that one per data thread "
        "of every --workers process fits in three quarters of the machine's memory); a request that needs more "
        "is answered 400 and its worker replaced, and no other request is affected",
    ),
    ServeOption(
        "--data-request-timeout",
        Number(whole=False, minimum=0, above=True),
        DEFAULT_DATA_REQUEST_SECONDS,
        "seconds one data request may run in its worker; beyond it the worker is ended, the request answered "
        "503 and the worker replaced",
    ),
    ServeOption(
        "--share-static-credentials",
        Switch(),
        False,
        "also hand clients the secret storage.* options configured here (trusted setups only)",
    ),
)
SERVE_VARIABLES = frozenset({*(option.variable for option in SERVE_OPTIONS), AUTH_TOKEN_VARIABLE})


# --- the config file ------------------------------------------------------------------------------

_VARIABLE_NAME = re.compile(r"LANCE_ICEBERG_[A-Z0-9_]+")


def read_config_file(path: str) -> dict[str, str]:
    """The settings of a config file, ``NAME: value`` in its order, read strictly: a line that is
    not ``NAME=value`` with an upper-case name that is a server setting (``SERVE_VARIABLES``) or a
    bridge property (``LANCE_ICEBERG_*``, ``LANCE_ICEBERG_CATALOG``) raises ``ServeSettingsError``
    naming the file and its line, never its value. Nothing is written to the environment, so no
    worker or subprocess inherits a secret from it."""
    from dotenv.parser import parse_stream

    from lance_iceberg_ns.config.sources import CATALOG_VARIABLE, environment_properties

    try:
        with open(path, encoding="utf-8") as handle:
            bindings = list(parse_stream(handle))
    except (OSError, UnicodeDecodeError) as exc:
        raise ServeSettingsError(f"cannot read {path}: {exc}") from None
    settings: dict[str, str] = {}
    for binding in bindings:
        text = binding.original.string
        line = binding.original.line + text[: len(text) - len(text.lstrip())].count("\n")

        def refuse(why: str, at: int = line) -> ServeSettingsError:
            return ServeSettingsError(f"{path}, line {at}: {why}")

        if binding.error:
            raise refuse("not NAME=value (an unclosed quote, or no '=')")
        name = binding.key
        if name is None:
            continue  # a comment or a blank line
        if not _VARIABLE_NAME.fullmatch(name):  # named only when it is one in the wrong case: it may be a secret
            shown = f"{name[:64]} is" if _VARIABLE_NAME.fullmatch(name.upper()) else "the name is"
            raise refuse(f"{shown} not a LANCE_ICEBERG_* setting (names are upper case)")
        if name.startswith(SERVER_VARIABLE_PREFIX) and name not in SERVE_VARIABLES:
            raise refuse(f"{name} is no serve setting")
        if binding.value is None:
            raise refuse(f"{name} has no value (NAME=value)")
        if name in settings:
            raise refuse(f"{name} is set twice")  # which one counts would be a guess
        is_property = not name.startswith(SERVER_VARIABLE_PREFIX) and name != CATALOG_VARIABLE
        if is_property and unknown_property_keys(environment_properties({name: binding.value})):
            raise refuse(f"{name} is no known setting")
        settings[name] = binding.value
    return settings


def unknown_property_keys(properties: Mapping[str, Any]) -> list[str]:
    """The keys of ``properties`` that are no bridge property (which the bridge would only warn
    about and ignore: a typo must not pass for a setting)."""
    from lance_iceberg_ns.config.settings import ICEBERG_PREFIX, KNOWN_KEYS, STORAGE_PREFIX

    def known(key: str) -> bool:
        prefixed = any(key.startswith(prefix) and len(key) > len(prefix) for prefix in (STORAGE_PREFIX, ICEBERG_PREFIX))
        return key in KNOWN_KEYS or prefixed

    return [key for key in properties if not known(key)]


# --- what the settings must pass before anything is served -----------------------------------------


def bearer_tokens(given: Sequence[str], token_file: str | None, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The bearer tokens the server requires: ``given`` (``--auth-token``, seen by anyone who lists
    the processes), ``LANCE_ICEBERG_NS_AUTH_TOKEN`` (separated by commas or newlines) and
    ``token_file`` (one a line); blank entries are skipped, but a variable or a file that holds no
    token at all raises ``ServeSettingsError`` rather than leave the server open to all."""
    from_variable = environ.get(AUTH_TOKEN_VARIABLE, "").replace(",", "\n").splitlines()
    if AUTH_TOKEN_VARIABLE in environ and not any(token.strip() for token in from_variable):
        raise ServeSettingsError(  # whoever set it meant the server to require a token
            f"{AUTH_TOKEN_VARIABLE} is set but holds no token: give one, or unset it to serve without tokens"
        )
    tokens = [*given, *from_variable]
    if token_file:
        try:
            with open(token_file, encoding="utf-8") as lines:
                from_file = [line.strip() for line in lines if line.strip()]
        except (OSError, UnicodeDecodeError) as exc:
            raise ServeSettingsError(f"Invalid value for --auth-token-file: cannot read {token_file}: {exc}") from None
        if not from_file:
            raise ServeSettingsError(f"Invalid value for --auth-token-file: {token_file} holds no token")
        tokens += from_file
    return tuple(token.strip() for token in tokens if token.strip())


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach ``host`` (``localhost``, ``127.*``, ``::1``)."""
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost, or all addresses ("")


def quiet_lance_rust_logs(log_format: str) -> None:
    """With JSON logs, Lance's own (Rust) log lines, which are plain text and see no redaction,
    print only for errors, unless the operator set ``LANCE_LOG``. Set before ``lance`` is first
    imported, in this process's environment (the workers inherit it)."""
    if log_format == "json" and "lance" not in sys.modules:
        os.environ.setdefault("LANCE_LOG", "error")


def refuse_a_missing_metrics_directory() -> None:
    """prometheus-client's multiprocess mode, on whenever ``PROMETHEUS_MULTIPROC_DIR`` (or its
    older lowercase name) is set in this process's environment, keeps each process's metrics in
    files there: it must be a directory already, and writable. Anything else failed at the first
    metric, as an unexpected error; an empty value wrote the files into the working directory."""
    for name in ("PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir"):
        given = os.environ.get(name)
        if given is None:
            continue
        if not (given and os.path.isdir(given) and os.access(given, os.W_OK | os.X_OK)):
            raise ServeSettingsError(
                f"{name}={given} is not a directory this server can write: make it (empty), or unset the variable"
            )
        return


# --- the settings ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServeSettings:
    """Everything the server is built and run from, secrets included (kept out of ``repr``):
    ``create_app``'s arguments (``app_options``) and how to listen, log and stop."""

    properties: Mapping[str, str] = field(repr=False)
    auth_tokens: tuple[str, ...] = field(default=(), repr=False)
    forward_bearer_token: bool = False
    max_data_body_bytes: int | None = None
    max_held_bytes: int | None = None
    share_static_credentials: bool = False
    data_threads: int | None = None
    data_worker_memory_mb: int | None = None  # None: default_worker_memory_mb
    data_request_timeout: float = DEFAULT_DATA_REQUEST_SECONDS
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    workers: int = 1
    graceful_timeout: float = DEFAULT_GRACEFUL_TIMEOUT
    log_format: str = "text"
    catalog_wait: float = DEFAULT_CATALOG_WAIT
    access_log: bool = False
    request_read_timeout: float = DEFAULT_REQUEST_READ_TIMEOUT
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    allow_anonymous: bool = False

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> ServeSettings:
        """What ``lance-iceberg-ns serve`` would serve given no arguments: the server's settings
        from ``LANCE_ICEBERG_NS_*`` and the config file ``LANCE_ICEBERG_NS_CONFIG_FILE`` names, the
        bridge's properties from ``LANCE_ICEBERG_*`` (and a pyiceberg catalog) and that file,
        checked as ``from_options`` checks them; ``environ`` is this process's environment unless
        given. Raises ``ServeSettingsError`` for a setting the server cannot start with,
        ``LanceNamespaceError`` for properties the bridge refuses."""
        import difflib

        from lance_iceberg_ns.config.sources import resolve_properties

        environ = os.environ if environ is None else environ
        config_file = environ.get(CONFIG_FILE_VARIABLE)
        from_file = read_config_file(config_file) if config_file else {}
        options = {option.field: option.value_in(environ, from_file) for option in SERVE_OPTIONS}
        merged = {**from_file, **environ}  # a variable set in the environment wins, even empty
        properties = resolve_properties({}, environ=merged)
        unknown = unknown_property_keys(properties)
        if unknown:
            from lance_iceberg_ns.config.settings import KNOWN_KEYS

            close = difflib.get_close_matches(unknown[0], sorted(KNOWN_KEYS), n=1)
            hint = f": did you mean {close[0]!r}?" if close else " (see docs/configuration.md)"
            raise ServeSettingsError(f"Unknown property {unknown[0]!r} (from LANCE_ICEBERG_{unknown[0].upper()}){hint}")
        return cls.from_options(options, properties, merged)

    @classmethod
    def from_options(
        cls,
        options: Mapping[str, Any],
        properties: Mapping[str, str],
        environ: Mapping[str, str],
        auth_tokens: Sequence[str] = (),
    ) -> ServeSettings:
        """The settings from the values of ``SERVE_OPTIONS`` (by ``field``, read already), the
        bridge's resolved ``properties``, ``auth_tokens`` given besides those of ``environ``
        (``LANCE_ICEBERG_NS_AUTH_TOKEN``) and of the token file. Checks, in this order: a usable
        metrics directory, the tokens, no anonymous server beyond loopback, a storage root and a
        catalog, then the bridge built from the properties once (closed at once). With JSON logs,
        quiets Lance's own first (``quiet_lance_rust_logs``). Raises ``ServeSettingsError``, or the
        bridge's ``LanceNamespaceError``."""
        quiet_lance_rust_logs(options["log_format"])  # before the bridge brings lance
        refuse_a_missing_metrics_directory()  # before the app makes the metrics
        tokens = bearer_tokens(auth_tokens, options["auth_token_file"], environ)
        host = options["host"]
        if not (tokens or options["forward_bearer_token"] or options["allow_anonymous"] or is_loopback(host)):
            raise ServeSettingsError(
                f"--host {host} is reachable from other machines and no bearer token is set: give one "
                f"(--auth-token-file, {AUTH_TOKEN_VARIABLE}), --forward-bearer-token, or --allow-anonymous "
                f"to serve anyone who can reach the port"
            )
        if not properties.get("root") and properties.get("location_mode") != "catalog":  # never the current directory
            raise ServeSettingsError(
                "serve places data under the storage root: give --root DIR (or -p root=DIR, LANCE_ICEBERG_ROOT), "
                "or -p location_mode=catalog where the catalog assigns each table's location"
            )
        if not properties.get("endpoint"):
            raise ServeSettingsError(
                "No catalog: give --endpoint URL, --catalog NAME (pyiceberg) or set LANCE_ICEBERG_ENDPOINT"
            )
        from lance_iceberg_ns import IcebergLanceNamespace

        IcebergLanceNamespace(**properties).close()  # validates the properties before the server starts
        return cls(
            dict(properties),
            auth_tokens=tokens,
            forward_bearer_token=options["forward_bearer_token"],
            max_data_body_bytes=options["max_data_body_mb"] * 1024 * 1024,
            max_held_bytes=options["max_held_mb"] * 1024 * 1024,
            share_static_credentials=options["share_static_credentials"],
            data_threads=options["data_threads"],
            data_worker_memory_mb=options["data_worker_memory_mb"],
            data_request_timeout=options["data_request_timeout"],
            host=host,
            port=options["port"],
            workers=options["workers"],
            graceful_timeout=options["graceful_timeout"],
            log_format=options["log_format"],
            catalog_wait=options["catalog_wait"],
            access_log=options["access_log"],
            request_read_timeout=options["request_read_timeout"],
            max_connections=options["max_connections"],
            allow_anonymous=options["allow_anonymous"],
        )

    def app_options(self) -> dict[str, Any]:
        """``create_app``'s keyword arguments."""
        options: dict[str, Any] = {
            "properties": dict(self.properties),
            "auth_tokens": list(self.auth_tokens),
            "forward_bearer_token": self.forward_bearer_token,
            "share_static_credentials": self.share_static_credentials,
            "data_worker_memory_mb": self.data_worker_memory_mb,  # None: capacity.default_worker_memory_mb
            "data_request_timeout": self.data_request_timeout,
            "server_processes": self.workers,
        }
        if self.max_data_body_bytes is not None:
            options["max_data_body_bytes"] = self.max_data_body_bytes
        if self.max_held_bytes is not None:
            options["max_held_bytes"] = self.max_held_bytes
        if self.data_threads is not None:
            options["data_threads"] = self.data_threads
        return options

    def shown_endpoint(self) -> str:
        """The catalog's URL as it may be shown (what it carries before an ``@`` redacted)."""
        bridge = self.bridge_settings()
        return bridge.redact(bridge.endpoint)

    def shown_root(self) -> str:
        """The storage root as it may be shown."""
        bridge = self.bridge_settings()
        return bridge.redact(bridge.root or "")

    def bridge_settings(self) -> Settings:
        """The bridge's ``Settings`` from ``properties``."""
        from lance_iceberg_ns.config.settings import Settings

        return Settings.from_properties(self.properties)
