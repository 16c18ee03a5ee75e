"""The ``lance-iceberg-ns`` command."""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from collections.abc import Sequence


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def _local_catalog(args: argparse.Namespace) -> int:
    from lance_iceberg_ns.testing import start_local_catalog

    server = start_local_catalog(
        args.data_dir, prefix_style=args.prefix_style, port=args.port, host=args.host, warehouses=args.warehouse or ()
    )
    print(f"Iceberg REST catalog at {server.endpoint} (prefix style {args.prefix_style}, data in {server.data_dir})")
    print("Press Ctrl-C to stop.", flush=True)
    signal.signal(signal.SIGTERM, _interrupt)  # stop the server on a plain kill too
    try:
        server._process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def _demo(args: argparse.Namespace) -> int:
    from lance_iceberg_ns.demo import run_demo

    run_demo(args.data_dir)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lance-iceberg-ns", description="Lance tables in an Iceberg REST catalog")
    commands = parser.add_subparsers(dest="command", required=True)

    local = commands.add_parser("local-catalog", help="run the local Iceberg REST catalog in the foreground")
    local.add_argument("--port", type=int, default=8181)
    local.add_argument("--host", default="127.0.0.1")
    local.add_argument("--data-dir", default=None, help="where the catalog keeps its state (default: a temporary dir)")
    local.add_argument("--prefix-style", default="none", choices=["none", "defaults", "overrides", "any"])
    local.add_argument("--warehouse", action="append", help="only serve these warehouses (repeatable)")
    local.set_defaults(run=_local_catalog)

    demo = commands.add_parser("demo", help="run the end-to-end demo on the local catalog")
    demo.add_argument("--data-dir", default=None, help="keep the demo's catalog and tables here")
    demo.set_defaults(run=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "data_dir", "unset") is None and args.command == "local-catalog":
        args.data_dir = tempfile.mkdtemp(prefix="lance-iceberg-ns-catalog-")
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
