"""``local-catalog``: the local Iceberg REST catalog (``lance_iceberg_ns.testing``) in the foreground."""

from __future__ import annotations

import errno
import signal
import socket
import sys
import tempfile

import click

from lance_iceberg_ns.cli.base import cli, listening_error


def _terminate(*_: object) -> None:
    raise SystemExit(128 + signal.SIGTERM)  # the server is stopped on the way out, as for Ctrl-C


def check_port_free(host: str, port: int) -> None:
    """Fail in one line when something already listens on the port (Java would say so in a stack trace)."""
    if port == 0:
        return
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as exc:
        raise listening_error(host, port, exc) from None


@cli.command("local-catalog")
@click.option("--port", type=click.IntRange(0, 65535), default=8181, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--data-dir", help="where the catalog keeps its state (default: a temporary directory)")
@click.option(
    "--prefix-style", default="none", show_default=True, type=click.Choice(["none", "defaults", "overrides", "any"])
)
@click.option("--warehouse", "warehouses", multiple=True, help="only serve these warehouses (repeatable)")
def local_catalog_command(
    port: int, host: str, data_dir: str | None, prefix_style: str, warehouses: tuple[str, ...]
) -> None:
    """Run the local Iceberg REST catalog in the foreground (Ctrl-C stops it)."""
    from lance_iceberg_ns.testing import start_local_catalog

    check_port_free(host, port)
    data_dir = data_dir or tempfile.mkdtemp(prefix="lance-iceberg-ns-catalog-")
    try:
        server = start_local_catalog(data_dir, prefix_style=prefix_style, port=port, host=host, warehouses=warehouses)
    except RuntimeError as exc:
        if "BindException" in str(exc):  # taken between the check and the start
            raise listening_error(host, port, OSError(errno.EADDRINUSE, "in use")) from None
        raise
    click.echo(f"Iceberg REST catalog at {server.endpoint} (prefix style {prefix_style}, data in {server.data_dir})")
    click.echo("Press Ctrl-C to stop.")
    sys.stdout.flush()
    signal.signal(signal.SIGTERM, _terminate)
    try:
        server._process.wait()
    finally:
        server.stop()
