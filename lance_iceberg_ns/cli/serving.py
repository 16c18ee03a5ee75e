"""``serve`` for production: its settings from flags, ``LANCE_ICEBERG_NS_*`` variables or a file,
a catalog that must answer before serving, worker processes, logs as JSON and a graceful stop.

Every ``serve`` option has a variable, ``LANCE_ICEBERG_NS_`` and its name (``--data-threads`` is
``LANCE_ICEBERG_NS_DATA_THREADS``; the bearer tokens ``LANCE_ICEBERG_NS_AUTH_TOKEN``); a flag on the
command line wins over the variable, the variable over ``--config-file`` (a file of such
variables, one ``NAME=value`` a line, as docker's ``env_file`` and systemd's ``EnvironmentFile``
read it), the file over the default. ``create_app_from_env`` (``server/factory.py``) reads the same.
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import click

from lance_iceberg_ns.cli.base import EXIT_UNEXPECTED, CliError, CliState

SERVER_VARIABLE_PREFIX = "LANCE_ICEBERG_NS_"
DEFAULT_CATALOG_WAIT = 30.0
DEFAULT_GRACEFUL_TIMEOUT = 30.0
_NO_VARIABLE = frozenset({"auth_tokens"})  # LANCE_ICEBERG_NS_AUTH_TOKEN, read with the token file (serve.py)


def variable_for(option: str) -> str:
    """``--data-threads`` → ``LANCE_ICEBERG_NS_DATA_THREADS``."""
    return SERVER_VARIABLE_PREFIX + option.lstrip("-").upper().replace("-", "_")


CONFIG_FILE_VALUES = "lance_iceberg_ns.config_file"  # ctx.meta key: the file's LANCE_ICEBERG_NS_* values
_VARIABLE_NAME = re.compile(r"LANCE_ICEBERG_[A-Z0-9_]+")


def _load_config_file(ctx: click.Context, param: click.Parameter, path: str | None) -> str | None:
    """Read the file's settings before any other option is read (this option is eager), strictly:
    a line that is not ``NAME=value`` with a known upper-case name is a usage error naming its line
    (never its value). Nothing is written to the environment, so no worker or subprocess inherits
    a secret from it: serve options become click defaults (a flag or a variable still wins), the
    bridge's ``LANCE_ICEBERG_*`` properties join the explicit ones unless a variable sets them."""
    from lance_iceberg_ns.config.sources import CATALOG_VARIABLE

    if not path:
        return path
    state = ctx.ensure_object(CliState)
    serve_values: dict[str, str] = {}
    for line, name, value in _config_lines(ctx, param, path):
        is_property = not name.startswith(SERVER_VARIABLE_PREFIX) and name != CATALOG_VARIABLE
        properties = _bridge_property(ctx, param, path, line, name, value) if is_property else {}
        if name in os.environ:
            continue  # the variable set in the environment wins
        if name.startswith(SERVER_VARIABLE_PREFIX):
            serve_values[name] = value
        elif name == CATALOG_VARIABLE:
            state.catalog = state.catalog or value
        for key, property_value in properties.items():
            if key in ("endpoint", "root"):  # the state's own fields, which the flags set
                setattr(state, key, getattr(state, key) or property_value)
            else:
                state.properties.setdefault(key, property_value)
    by_variable = {param.envvar: param.name for param in ctx.command.params if isinstance(param.envvar, str)}
    defaults = {by_variable[name]: value for name, value in serve_values.items() if name in by_variable}
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    ctx.meta[CONFIG_FILE_VALUES] = serve_values
    return path


def _config_lines(ctx: click.Context, param: click.Parameter, path: str) -> list[tuple[int, str, str]]:
    """``(line, name, value)`` of every setting in the file, each checked."""
    from dotenv.parser import parse_stream

    try:
        with open(path, encoding="utf-8") as handle:
            bindings = list(parse_stream(handle))
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read {path}: {exc}", ctx=ctx, param=param) from None
    allowed = _serve_variables(ctx) - {variable_for("--config-file")}
    settings: list[tuple[int, str, str]] = []
    for binding in bindings:
        text = binding.original.string
        line = binding.original.line + text[: len(text) - len(text.lstrip())].count("\n")

        def refuse(why: str, at: int = line) -> click.BadParameter:
            return click.BadParameter(f"{path}, line {at}: {why}", ctx=ctx, param=param)

        if binding.error:
            raise refuse("not NAME=value (an unclosed quote, or no '=')")
        if binding.key is None:
            continue  # a comment or a blank line
        if not _VARIABLE_NAME.fullmatch(binding.key):  # named only when it is one in the wrong case: it may be a secret
            shown = f"{binding.key[:64]} is" if _VARIABLE_NAME.fullmatch(binding.key.upper()) else "the name is"
            raise refuse(f"{shown} not a LANCE_ICEBERG_* setting (names are upper case)")
        if binding.key.startswith(SERVER_VARIABLE_PREFIX) and binding.key not in allowed:
            raise refuse(f"{binding.key} is no serve setting")
        if binding.value is None:
            raise refuse(f"{binding.key} has no value (NAME=value)")
        if any(name == binding.key for _, name, _ in settings):
            raise refuse(f"{binding.key} is set twice")  # which one counts would be a guess
        settings.append((line, binding.key, binding.value))
    return settings


def _bridge_property(
    ctx: click.Context, param: click.Parameter, path: str, line: int, name: str, value: str
) -> dict[str, str]:
    """The bridge property a ``LANCE_ICEBERG_*`` line sets; an unknown one is a usage error."""
    from lance_iceberg_ns.cli.feedback import check_property_keys
    from lance_iceberg_ns.config.sources import environment_properties

    found = environment_properties({name: value})
    try:
        check_property_keys(found)
    except click.UsageError:
        raise click.BadParameter(f"{path}, line {line}: {name} is no known setting", ctx=ctx, param=param) from None
    return found


def _serve_variables(ctx: click.Context) -> set[str]:
    from lance_iceberg_ns.cli.serve import AUTH_TOKEN_VARIABLE

    named = {param.envvar for param in ctx.command.params if isinstance(param.envvar, str)}
    return {*named, AUTH_TOKEN_VARIABLE}


def serve_setting(flag: str, kind: Any, default: Any, help: str) -> Callable[..., Any]:
    """A ``serve`` option with a default, shown in ``--help`` beside its variable."""
    return click.option(flag, type=kind, default=default, show_default=True, help=help)


def production_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """The options for running in production, and a ``LANCE_ICEBERG_NS_*`` variable for every
    option ``serve`` has (applied last, so it sees them all)."""
    options = [
        serve_setting(
            "--workers",
            click.IntRange(min=1),
            1,
            "server processes sharing the port (each with its own catalog connections and data threads)",
        ),
        serve_setting(
            "--graceful-timeout",
            click.FloatRange(min=0),
            DEFAULT_GRACEFUL_TIMEOUT,
            "on SIGTERM or Ctrl-C, seconds requests in flight have to finish before they are cut off",
        ),
        serve_setting(
            "--log-format",
            click.Choice(["text", "json"]),
            "text",
            "log lines as text or as one JSON object each (every line carries its request's ID)",
        ),
        serve_setting(
            "--catalog-wait",
            click.FloatRange(min=0),
            DEFAULT_CATALOG_WAIT,
            "seconds to wait at start for the Iceberg catalog to answer before giving up (exit code 5); "
            "0 starts at once, reported not ready on /readyz until the catalog answers",
        ),
        click.option(
            "--config-file",
            type=click.Path(exists=True, dir_okay=False),
            is_eager=True,
            expose_value=False,
            callback=_load_config_file,
            help="a file of LANCE_ICEBERG_NS_* (and LANCE_ICEBERG_*) settings, NAME=value a line; "
            "the variables set in the environment win over it",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    for param in function.__click_params__:  # type: ignore[attr-defined]
        is_common = getattr(param, "is_eager", False) and param.name != "config_file"
        if isinstance(param, click.Option) and not is_common and param.name not in _NO_VARIABLE:
            param.envvar = variable_for(param.opts[0])
            param.show_envvar = True
    return function


def serve_settings(
    state: CliState, options: dict[str, Any], from_file: Mapping[str, str] | None = None
) -> tuple[Any, str]:
    """The app's settings from the parsed options (and ``from_file``, the ``--config-file``'s
    server variables), and the catalog's URL as it may be shown."""
    _quiet_lance_rust_logs(options["log_format"])  # before the server's imports bring lance
    _refuse_a_missing_metrics_directory()  # before they make the metrics
    from lance_iceberg_ns.cli.serve import server_tokens
    from lance_iceberg_ns.server.factory import ServeSettings

    environ = {**(from_file or {}), **os.environ}
    tokens = tuple(server_tokens(options["auth_tokens"], options["auth_token_file"], environ))
    _refuse_anonymous_beyond_loopback(options, tokens)
    state.root_for("serve")  # clients create tables under it: never the current directory by default
    ns = state.namespace()  # validates the settings before the server starts
    properties = dict(ns.properties)
    shown_endpoint = ns.settings.redact(ns.settings.endpoint)
    ns.close()
    settings = ServeSettings(
        properties,
        auth_tokens=tokens,
        forward_bearer_token=options["forward_bearer_token"],
        max_data_body_bytes=options["max_data_body_mb"] * 1024 * 1024,
        share_static_credentials=options["share_static_credentials"],
        data_threads=options["data_threads"],
    )
    return settings, shown_endpoint


def _quiet_lance_rust_logs(log_format: str) -> None:
    """With JSON logs, Lance's own (Rust) log lines, which are plain text and see no redaction,
    print only for errors, unless the operator set ``LANCE_LOG``. Set before ``lance`` is first
    imported (the server's import does it), in the environment the workers inherit."""
    if log_format == "json" and "lance" not in sys.modules:
        os.environ.setdefault("LANCE_LOG", "error")


MAX_LANCE_WORKERS = 1024


def _leave_a_core_to_python() -> None:
    """Lance's async runtime (tokio) runs one worker thread per core unless told otherwise; in a
    server, each of them competes for the cores with the one Python thread that every request
    needs (its HTTP, validation and catalog check: one at a time, under the GIL). One worker fewer
    than the cores (at least one) took a sixth off a query's latency on two cores; the operator's
    own ``TOKIO_WORKER_THREADS`` wins, if it is a whole number from 1 to ``MAX_LANCE_WORKERS``
    (tokio panics on anything else at its first use, and the server then hangs). Set before the
    runtime starts (on first use), in the environment the workers inherit."""
    given = os.environ.get("TOKIO_WORKER_THREADS")
    if given is None:
        os.environ["TOKIO_WORKER_THREADS"] = str(max(1, available_cores() - 1))
    elif not (given.isascii() and given.isdigit() and 1 <= int(given) <= MAX_LANCE_WORKERS):
        raise click.UsageError(
            f"TOKIO_WORKER_THREADS must be a whole number from 1 to {MAX_LANCE_WORKERS}, got {given[:40]!r}"
        )


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity, capped by the container's CPU quota
    (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``), as tokio counts them for its default."""
    cores = len(os.sched_getaffinity(0))
    quota = _cpu_quota()
    return max(1, min(cores, math.ceil(quota))) if quota else cores


def _cpu_quota() -> float | None:
    """The tightest cgroup CPU quota, in cores, over the process's own cgroup and its parents
    (a systemd ``CPUQuota``, a container's limit), v2 and v1; None when there is none ("max",
    -1) or none to read."""
    quotas = [quota for directory in _cgroup_directories() if (quota := _quota_in(*directory)) is not None]
    return min(quotas) if quotas else None


def _cgroup_directories() -> list[tuple[str, bool]]:
    """The directories of the process's cgroups and their parents (v2 or v1: ``True`` for v2),
    from ``/proc/self/cgroup``; the roots alone when it cannot be read."""
    paths = {(True, "/"), (False, "/")}
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        number, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if number == "0" and not controllers:
            paths.add((True, path))
        elif "cpu" in controllers.split(","):
            paths.add((False, path))
    found = []
    for v2, path in paths:
        parts = [part for part in path.split("/") if part and part not in (".", "..")]
        for depth in range(len(parts) + 1):
            found.append(("/".join(["/sys/fs/cgroup" if v2 else "/sys/fs/cgroup/cpu", *parts[:depth]]), v2))
    return sorted(set(found))


def _quota_in(directory: str, v2: bool) -> float | None:
    if v2:  # "200000 100000", or "max 100000"
        quota, _, period = (_read(f"{directory}/cpu.max") or "").partition(" ")
    else:  # -1 for none
        quota = _read(f"{directory}/cpu.cfs_quota_us") or ""
        period = _read(f"{directory}/cpu.cfs_period_us") or ""
    whole = [number.isascii() and number.isdigit() and len(number) <= 18 for number in (quota, period)]
    if not all(whole) or int(period) == 0:
        return None
    return int(quota) / int(period)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _refuse_anonymous_beyond_loopback(options: dict[str, Any], tokens: tuple[str, ...]) -> None:
    """A server others can reach, with no token and no forwarding, is open to anyone who reaches
    it: only when the operator says so (``--allow-anonymous``)."""
    host = options["host"]
    if tokens or options["forward_bearer_token"] or options["allow_anonymous"] or _is_loopback(host):
        return
    raise click.UsageError(
        f"--host {host} is reachable from other machines and no bearer token is set: give one "
        f"(--auth-token-file, LANCE_ICEBERG_NS_AUTH_TOKEN), --forward-bearer-token, or --allow-anonymous "
        f"to serve anyone who can reach the port"
    )


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost, or all addresses ("")


def settings_from_environment() -> tuple[Any, str]:
    """What ``serve`` would serve given no arguments: the settings and the log format, from the
    environment (and ``LANCE_ICEBERG_NS_CONFIG_FILE``)."""
    from lance_iceberg_ns.cli.serve import serve_command

    state = CliState()
    context = serve_command.make_context("serve", [], obj=state)
    settings, _ = serve_settings(state, context.params, context.meta.get(CONFIG_FILE_VALUES))
    return settings, context.params["log_format"]


def wait_for_catalog(settings: Any, shown_endpoint: str, seconds: float) -> None:
    """Return once the catalog answers ``/v1/config``; ServiceUnavailable after ``seconds``."""
    from lance_namespace.errors import ServiceUnavailableError

    from lance_iceberg_ns.config.settings import Settings
    from lance_iceberg_ns.server.health import CatalogProbe

    if seconds <= 0:
        return
    bridge = Settings.from_properties(settings.properties)
    probe = CatalogProbe(bridge.endpoint, None if settings.forward_bearer_token else bridge.auth_token)
    deadline = time.monotonic() + seconds
    while True:
        readiness = probe.ask()
        if readiness.ready:
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise ServiceUnavailableError(
                f"{readiness.reason} at {shown_endpoint}, after waiting {seconds:g} s (--catalog-wait): not serving"
            )
        time.sleep(min(1.0, left))


# What serving sets in its own environment for Lance and the workers; put back once it has stopped
# (the command may run in a process that goes on: a test, a notebook).
SERVING_VARIABLES = ("TOKIO_WORKER_THREADS", "PROMETHEUS_MULTIPROC_DIR", "LANCE_LOG")


@contextlib.contextmanager
def environment_kept(names: tuple[str, ...] = SERVING_VARIABLES) -> Iterator[None]:
    """The variables ``names`` as they were before, whatever the block sets."""
    before = {name: os.environ.get(name) for name in names}
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_server(settings: Any, shown_endpoint: str, state: CliState, options: dict[str, Any]) -> None:
    """Bind, say where, and serve until SIGTERM or Ctrl-C (then let requests in flight finish for
    ``--graceful-timeout`` seconds)."""
    import uvicorn

    from lance_iceberg_ns.server.factory import AppFactory, DeadlineProtocolFactory, Supervisor, WorkerFailedToStart
    from lance_iceberg_ns.server.logs import log_config

    _leave_a_core_to_python()
    wait_for_catalog(settings, shown_endpoint, options["catalog_wait"])
    workers = options["workers"]
    config = uvicorn.Config(
        AppFactory(settings) if workers > 1 else AppFactory(settings).build(),  # one process: errors surface here
        factory=workers > 1,
        host=options["host"],
        port=options["port"],
        workers=workers,
        access_log=options["access_log"],
        http=DeadlineProtocolFactory(options["request_read_timeout"]),  # type: ignore[arg-type]
        log_config=log_config(options["log_format"], debug=state.debug),
        timeout_graceful_shutdown=options["graceful_timeout"],  # type: ignore[arg-type]
    )
    listening = config.bind_socket()  # bound here, so that --port 0 prints the port it got
    listening.listen(config.backlog)  # and the address printed takes connections at once
    click.echo(
        f"Lance REST Namespace on {_uri(options['host'], listening)} over the Iceberg catalog at {shown_endpoint}"
        f", tables under {_shown_root(settings)}"
    )
    sys.stdout.flush()
    supervisor = Supervisor(config, sockets=[listening]) if workers > 1 else None
    metrics_directory = _metrics_directory(workers)  # once bound: a port taken leaves none behind
    try:
        if supervisor is not None:
            supervisor.run()
        else:
            try:
                uvicorn.Server(config).run(sockets=[listening])
            finally:  # stopped (after Ctrl-C, uvicorn raises it again): requests it cut off may still run
                state.abandoned_threads = True
    finally:
        if metrics_directory:
            shutil.rmtree(metrics_directory, ignore_errors=True)
    if supervisor is not None:
        try:
            supervisor.end_as_stopped()
        except WorkerFailedToStart as failed:  # one line, as one process that cannot start fails
            raise CliError(str(failed), "WorkerFailedToStart", EXIT_UNEXPECTED) from None


def _shown_root(settings: Any) -> str:
    from lance_iceberg_ns.config.settings import Settings

    bridge = Settings.from_properties(settings.properties)
    return bridge.redact(bridge.root)


def _uri(host: str, listening: socket.socket) -> str:
    shown_host = f"[{host}]" if ":" in host else host  # an IPv6 address, as a URL writes it
    return f"http://{shown_host}:{listening.getsockname()[1]}"


def _refuse_a_missing_metrics_directory() -> None:
    """prometheus-client's multiprocess mode, on whenever ``PROMETHEUS_MULTIPROC_DIR`` (or its
    older lowercase name) is set, keeps each process's metrics in files there: it must be a
    directory already, and writable. Anything else failed at the first metric, as an unexpected
    error; an empty value wrote the files into the working directory."""
    for name in ("PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir"):
        given = os.environ.get(name)
        if given is None:
            continue
        if not (given and os.path.isdir(given) and os.access(given, os.W_OK | os.X_OK)):
            raise click.UsageError(
                f"{name}={given} is not a directory this server can write: make it (empty), or unset the variable"
            )
        return


def _metrics_directory(workers: int) -> str | None:
    """With several workers, a fresh directory for prometheus-client's multiprocess mode (unless
    the operator gave one in PROMETHEUS_MULTIPROC_DIR); the workers inherit it."""
    if workers < 2 or os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return None
    directory = tempfile.mkdtemp(prefix="lance-iceberg-ns-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    return directory
