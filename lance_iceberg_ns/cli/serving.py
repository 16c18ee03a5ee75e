"""``serve`` for production: its settings from flags, ``LANCE_ICEBERG_NS_*`` variables or a file,
a catalog that must answer before serving, worker processes, logs as JSON and a graceful stop.

Every ``serve`` option has a variable, ``LANCE_ICEBERG_NS_`` and its name (``--data-threads`` is
``LANCE_ICEBERG_NS_DATA_THREADS``; the bearer tokens ``LANCE_ICEBERG_NS_AUTH_TOKEN``); a flag on the
command line wins over the variable, the variable over ``--config-file`` (a file of such
variables, one ``NAME=value`` a line, as docker's ``env_file`` and systemd's ``EnvironmentFile``
read it), the file over the default. ``create_app_from_env`` (``server/factory.py``) reads the same.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import click

from lance_iceberg_ns.cli.base import CliState

SERVER_VARIABLE_PREFIX = "LANCE_ICEBERG_NS_"
DEFAULT_CATALOG_WAIT = 30.0
DEFAULT_GRACEFUL_TIMEOUT = 30.0
_NO_VARIABLE = frozenset({"auth_tokens"})  # LANCE_ICEBERG_NS_AUTH_TOKEN, read with the token file (serve.py)


def variable_for(option: str) -> str:
    """``--data-threads`` → ``LANCE_ICEBERG_NS_DATA_THREADS``."""
    return SERVER_VARIABLE_PREFIX + option.lstrip("-").upper().replace("-", "_")


def _load_config_file(ctx: click.Context, param: click.Parameter, path: str | None) -> str | None:
    """Set the file's ``LANCE_ICEBERG_*`` variables that are not set already, before any other
    option reads its variable (this option is eager)."""
    if not path:
        return path
    from dotenv import dotenv_values

    try:
        values = dotenv_values(path, interpolate=False)
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read {path}: {exc}", ctx=ctx, param=param) from None
    for name, value in values.items():
        if not name.upper().startswith("LANCE_ICEBERG_"):
            raise click.BadParameter(f"{path}: {name} is not a LANCE_ICEBERG_* setting", ctx=ctx, param=param)
        if name.upper().startswith(SERVER_VARIABLE_PREFIX) and name.upper() not in _serve_variables(ctx):
            raise click.BadParameter(f"{path}: {name} is no serve setting", ctx=ctx, param=param)
        if value is not None:
            os.environ.setdefault(name, value)
    return path


def _serve_variables(ctx: click.Context) -> set[str]:
    from lance_iceberg_ns.cli.serve import AUTH_TOKEN_VARIABLE

    named = {param.envvar for param in ctx.command.params if isinstance(param.envvar, str)}
    return {*named, AUTH_TOKEN_VARIABLE}


def production_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """The options for running in production, and a ``LANCE_ICEBERG_NS_*`` variable for every
    option ``serve`` has (applied last, so it sees them all)."""
    options = [
        click.option(
            "--workers",
            type=click.IntRange(min=1),
            default=1,
            show_default=True,
            help="server processes sharing the port (each with its own catalog connections and data threads)",
        ),
        click.option(
            "--graceful-timeout",
            type=click.FloatRange(min=0),
            default=DEFAULT_GRACEFUL_TIMEOUT,
            show_default=True,
            help="on SIGTERM or Ctrl-C, seconds requests in flight have to finish before they are cut off",
        ),
        click.option(
            "--log-format",
            type=click.Choice(["text", "json"]),
            default="text",
            show_default=True,
            help="log lines as text or as one JSON object each (every line carries its request's ID)",
        ),
        click.option(
            "--catalog-wait",
            type=click.FloatRange(min=0),
            default=DEFAULT_CATALOG_WAIT,
            show_default=True,
            help="seconds to wait at start for the Iceberg catalog to answer before giving up (exit code 5); "
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


def serve_settings(state: CliState, options: dict[str, Any]) -> tuple[Any, str]:
    """The app's settings from the parsed options, and the catalog's URL as it may be shown."""
    from lance_iceberg_ns.cli.serve import server_tokens
    from lance_iceberg_ns.server.factory import ServeSettings

    tokens = tuple(server_tokens(options["auth_tokens"], options["auth_token_file"]))
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


def settings_from_environment() -> tuple[Any, str]:
    """What ``serve`` would serve given no arguments: the settings and the log format, from the
    environment (and ``LANCE_ICEBERG_NS_CONFIG_FILE``)."""
    from lance_iceberg_ns.cli.serve import serve_command

    state = CliState()
    context = serve_command.make_context("serve", [], obj=state)
    settings, _ = serve_settings(state, context.params)
    return settings, context.params["log_format"]


def wait_for_catalog(settings: Any, shown_endpoint: str, seconds: float) -> None:
    """Return once the catalog answers ``/v1/config``; ServiceUnavailable after ``seconds``."""
    from lance_namespace.errors import ServiceUnavailableError

    from lance_iceberg_ns.config import Settings
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


def run_server(settings: Any, shown_endpoint: str, state: CliState, options: dict[str, Any]) -> None:
    """Bind, say where, and serve until SIGTERM or Ctrl-C (then let requests in flight finish for
    ``--graceful-timeout`` seconds)."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    from lance_iceberg_ns.server.factory import AppFactory, DeadlineProtocolFactory
    from lance_iceberg_ns.server.logs import log_config

    wait_for_catalog(settings, shown_endpoint, options["catalog_wait"])
    workers = options["workers"]
    metrics_directory = _metrics_directory(workers)
    config = uvicorn.Config(
        AppFactory(settings) if workers > 1 else AppFactory(settings)(),  # one process: errors surface here
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
    try:
        if workers > 1:
            Multiprocess(config, sockets=[listening]).run()
        else:
            uvicorn.Server(config).run(sockets=[listening])
    finally:
        if metrics_directory:
            shutil.rmtree(metrics_directory, ignore_errors=True)


def _shown_root(settings: Any) -> str:
    from lance_iceberg_ns.config import Settings

    bridge = Settings.from_properties(settings.properties)
    return bridge.redact(bridge.root)


def _uri(host: str, listening: socket.socket) -> str:
    shown_host = f"[{host}]" if ":" in host else host  # an IPv6 address, as a URL writes it
    return f"http://{shown_host}:{listening.getsockname()[1]}"


def _metrics_directory(workers: int) -> str | None:
    """With several workers, a fresh directory for prometheus-client's multiprocess mode (unless
    the operator gave one in PROMETHEUS_MULTIPROC_DIR); the workers inherit it."""
    if workers < 2 or os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return None
    directory = tempfile.mkdtemp(prefix="lance-iceberg-ns-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    return directory
