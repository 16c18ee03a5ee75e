"""The foreground commands (serve, local-catalog, demo) and ``main``, which maps errors to exit codes."""

from __future__ import annotations

import logging
import os
import signal
import sys
import tempfile
import traceback
from collections.abc import Mapping, Sequence

import click

from lance_iceberg_ns.cli.base import EXIT_UNEXPECTED, EXIT_USAGE, CliState, _state, cli, common_options, exit_code_for

DEFAULT_REQUEST_READ_TIMEOUT = 30.0  # as lance_iceberg_ns.server.guard's, without importing the server extra
DEFAULT_DATA_THREADS = 8  # as lance_iceberg_ns.server.capacity's


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


@cli.command("local-catalog")
@click.option("--port", type=int, default=8181, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--data-dir", help="where the catalog keeps its state (default: a temporary directory)")
@click.option(
    "--prefix-style", default="none", show_default=True, type=click.Choice(["none", "defaults", "overrides", "any"])
)
@click.option("--warehouse", "warehouses", multiple=True, help="only serve these warehouses (repeatable)")
def local_catalog_command(
    port: int, host: str, data_dir: str | None, prefix_style: str, warehouses: tuple[str, ...]
) -> None:
    """Run the local Iceberg REST catalog in the foreground."""
    from lance_iceberg_ns.testing import start_local_catalog

    data_dir = data_dir or tempfile.mkdtemp(prefix="lance-iceberg-ns-catalog-")
    server = start_local_catalog(data_dir, prefix_style=prefix_style, port=port, host=host, warehouses=warehouses)
    click.echo(f"Iceberg REST catalog at {server.endpoint} (prefix style {prefix_style}, data in {server.data_dir})")
    click.echo("Press Ctrl-C to stop.")
    sys.stdout.flush()
    signal.signal(signal.SIGTERM, _interrupt)  # stop the server on a plain kill too
    try:
        server._process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


AUTH_TOKEN_VARIABLE = "LANCE_ICEBERG_NS_AUTH_TOKEN"  # the server's bearer tokens, by commas or newlines


def server_tokens(given: Sequence[str], token_file: str | None, environ: Mapping[str, str] | None = None) -> list[str]:
    """The bearer tokens the server requires: ``--auth-token`` (seen by anyone who lists the
    processes), ``LANCE_ICEBERG_NS_AUTH_TOKEN`` (separated by commas or newlines) and
    ``--auth-token-file`` (one a line); blank entries are skipped, but a variable or a file that
    holds no token at all is a usage error rather than a server open to all."""
    environ = os.environ if environ is None else environ
    from_variable = environ.get(AUTH_TOKEN_VARIABLE, "").replace(",", "\n").splitlines()
    if AUTH_TOKEN_VARIABLE in environ and not any(token.strip() for token in from_variable):
        raise click.UsageError(  # whoever set it meant the server to require a token
            f"{AUTH_TOKEN_VARIABLE} is set but holds no token: give one, or unset it to serve without tokens"
        )
    tokens = [*given, *from_variable]
    if token_file:
        try:
            with open(token_file, encoding="utf-8") as lines:
                from_file = [line.strip() for line in lines if line.strip()]
        except (OSError, UnicodeDecodeError) as exc:
            raise click.BadParameter(f"cannot read {token_file}: {exc}", param_hint="--auth-token-file") from None
        if not from_file:
            raise click.BadParameter(f"{token_file} holds no token", param_hint="--auth-token-file")
        tokens += from_file
    return [token.strip() for token in tokens if token.strip()]


@cli.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=2333, show_default=True)
@click.option(
    "--auth-token",
    "auth_tokens",
    multiple=True,
    help=f"a bearer token clients must present (repeatable; visible in the process list: prefer {AUTH_TOKEN_VARIABLE} "
    "or --auth-token-file)",
)
@click.option(
    "--auth-token-file",
    type=click.Path(dir_okay=False),
    help="a file of bearer tokens clients may present, one a line",
)
@click.option("--forward-bearer-token", is_flag=True, help="send each caller's bearer token to the Iceberg catalog")
@click.option("--access-log", is_flag=True, help="log every request (method, path, status)")
@click.option(
    "--max-data-body-mb",
    type=click.IntRange(min=1),
    default=256,
    show_default=True,
    help="the largest Arrow IPC body of a data request (create, insert, merge); 413 beyond it",
)
@click.option(
    "--request-read-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_REQUEST_READ_TIMEOUT,
    show_default=True,
    help="seconds a client has to send a whole request (one more per MiB of its body); 408 and cut off beyond",
)
@click.option(
    "--data-threads",
    type=click.IntRange(min=1),
    default=DEFAULT_DATA_THREADS,
    show_default=True,
    help="requests that read or write data (query, insert, index...) run at once; more wait, and beyond "
    "four times as many waiting are answered 503; catalog requests have threads of their own",
)
@click.option(
    "--share-static-credentials",
    is_flag=True,
    help="also hand clients the secret storage.* options configured here (trusted setups only)",
)
@common_options
def serve_command(
    host: str,
    port: int,
    auth_tokens: tuple[str, ...],
    auth_token_file: str | None,
    forward_bearer_token: bool,
    access_log: bool,
    max_data_body_mb: int,
    request_read_timeout: float,
    data_threads: int,
    share_static_credentials: bool,
) -> None:
    """Serve the Lance REST Namespace API over the Iceberg REST catalog."""
    import uvicorn

    from lance_iceberg_ns.server import create_app
    from lance_iceberg_ns.server.guard import read_deadline_protocol

    state = _state()
    ns = state.namespace()  # validates the settings before the server starts
    properties = dict(ns.properties)
    ns.close()
    app = create_app(
        properties=properties,
        auth_tokens=server_tokens(auth_tokens, auth_token_file),
        forward_bearer_token=forward_bearer_token,
        max_data_body_bytes=max_data_body_mb * 1024 * 1024,
        share_static_credentials=share_static_credentials,
        data_threads=data_threads,
    )
    protocol = read_deadline_protocol(request_read_timeout)
    config = uvicorn.Config(app, host=host, port=port, log_level="info", access_log=access_log, http=protocol)
    listening = config.bind_socket()  # bound here, so that --port 0 prints the port it got
    listening.listen(config.backlog)  # and the address printed takes connections at once
    shown_host = f"[{host}]" if ":" in host else host  # an IPv6 address, as a URL writes it
    uri = f"http://{shown_host}:{listening.getsockname()[1]}"
    click.echo(f"Lance REST Namespace on {uri} over the Iceberg catalog at {ns.settings.redact(ns.settings.endpoint)}")
    sys.stdout.flush()
    uvicorn.Server(config).run(sockets=[listening])


@cli.command("demo")
@click.option("--data-dir", help="keep the demo's catalog and tables here")
def demo_command(data_dir: str | None) -> None:
    """Run the end-to-end demo on the local catalog."""
    from lance_iceberg_ns.demo import run_demo

    run_demo(data_dir)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; errors are one line on stderr (a traceback too with ``--debug``)."""
    from lance_namespace.errors import LanceNamespaceError

    state = CliState()
    arguments = list(sys.argv[1:] if argv is None else argv)
    if "--debug" in arguments:
        logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(name)s: %(message)s")
    try:
        cli.main(arguments, prog_name="lance-iceberg-ns", standalone_mode=False, obj=state)
        return 0
    except click.exceptions.Exit as done:
        return int(done.exit_code)
    except click.ClickException as exc:
        exc.show()
        return EXIT_USAGE
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return EXIT_UNEXPECTED
    except LanceNamespaceError as exc:
        if state.debug:
            traceback.print_exc()
        code = int(exc.code)
        click.echo(f"error: {type(exc).__name__.removesuffix('Error')} ({code}): {exc}", err=True)
        return exit_code_for(code)
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_UNEXPECTED
    except Exception as exc:  # one line, whatever broke; the traceback with --debug
        if state.debug:
            traceback.print_exc()
        click.echo(f"error: unexpected {type(exc).__name__}: {exc} (run with --debug for details)", err=True)
        return EXIT_UNEXPECTED
