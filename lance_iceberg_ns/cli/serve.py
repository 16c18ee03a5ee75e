"""The foreground commands ``serve`` and ``demo`` (``local-catalog``: ``local_catalog``; ``main``: ``running``)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import click

from lance_iceberg_ns.cli.base import EXIT_UNAVAILABLE, CliError, _state, cli, common_options
from lance_iceberg_ns.cli.serving import production_options, serve_setting

DEFAULT_REQUEST_READ_TIMEOUT = 30.0  # as lance_iceberg_ns.server.guard's, without importing the server extra
DEFAULT_DATA_THREADS = 8  # as lance_iceberg_ns.server.capacity's


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
@production_options
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
@click.option(
    "--allow-anonymous",
    is_flag=True,
    help="serve without a bearer token on a --host other machines can reach (anyone reaching the port may "
    "read, write and drop tables); without it such a server refuses to start",
)
@click.option("--access-log", is_flag=True, help="log every request (method, path, status)")
@serve_setting(
    "--max-data-body-mb",
    click.IntRange(min=1),
    256,
    "the largest Arrow IPC body of a data request (create, insert, merge); 413 beyond it",
)
@serve_setting(
    "--request-read-timeout",
    click.FloatRange(min=0, min_open=True),
    DEFAULT_REQUEST_READ_TIMEOUT,
    "seconds a client has to send a whole request (one more per MiB of its body); 408 and cut off beyond",
)
@serve_setting(
    "--data-threads",
    click.IntRange(min=1),
    DEFAULT_DATA_THREADS,
    "requests that read or write data (query, insert, index...) run at once; more wait, and beyond "
    "four times as many waiting are answered 503; catalog requests have threads of their own",
)
@click.option(
    "--share-static-credentials",
    is_flag=True,
    help="also hand clients the secret storage.* options configured here (trusted setups only)",
)
@common_options
def serve_command(**options: Any) -> None:
    """Serve the Lance REST Namespace API over the Iceberg REST catalog.

    Every option can be given as a LANCE_ICEBERG_NS_* variable instead, or in --config-file."""
    from lance_iceberg_ns.cli.serving import CONFIG_FILE_VALUES, environment_kept, run_server, serve_settings

    state = _state()
    from_file = click.get_current_context().meta.get(CONFIG_FILE_VALUES)
    with environment_kept():  # serving sets variables for Lance and its workers: as found once it stops
        settings, shown_endpoint = serve_settings(state, options, from_file)
        run_server(settings, shown_endpoint, state, options)


@cli.command("demo")
@click.option("--data-dir", help="keep the demo's catalog and tables here")
def demo_command(data_dir: str | None) -> None:
    """Run the end-to-end demo on the local catalog."""
    from lance_iceberg_ns.demo import run_demo
    from lance_iceberg_ns.testing import LocalCatalogUnavailable

    try:
        run_demo(data_dir)
    except LocalCatalogUnavailable as exc:  # no JDK (which Spark needs too), or a jar missing
        message = f"The demo cannot run: {exc} (bash scripts/setup.sh demo installs it)"
        raise CliError(message, "Unavailable", EXIT_UNAVAILABLE) from None
