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


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from lance_iceberg_ns.server import create_app

    properties = {"endpoint": args.endpoint, **_properties(args.property)}
    if args.root:
        properties["root"] = args.root
    app = create_app(
        properties=properties, auth_tokens=args.auth_token or (), forward_bearer_token=args.forward_bearer_token
    )
    print(f"Lance REST Namespace on http://{args.host}:{args.port} over the Iceberg catalog at {args.endpoint}")
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", access_log=args.access_log)
    return 0


def _namespace_from(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from lance_iceberg_ns import IcebergLanceNamespace

    return IcebergLanceNamespace(endpoint=args.endpoint, **_properties(args.property))


def _properties(items: list[str] | None) -> dict[str, str]:
    properties = {}
    for item in items or ():
        key, separator, value = item.partition("=")
        if not separator or not key:
            raise SystemExit(f"--property takes key=value, got {item!r}")
        properties[key] = value
    return properties


def _identifier(text: str, delimiter: str) -> list[str]:
    return text.split(delimiter)


def _tables(args: argparse.Namespace) -> int:
    """The soft-delete lifecycle, for people and for a scheduled purge job."""
    from datetime import datetime, timedelta, timezone

    from lance_iceberg_ns.lifecycle import parse_duration

    ns = _namespace_from(args)
    target = _identifier(args.id, args.delimiter)
    if args.action == "status":
        status = ns.table_status(target)
        print(status.state if status.deleted_at is None else f"{status.state} {status.deleted_at.isoformat()}")
    elif args.action == "undrop":
        ns.undrop_table(target)
        print(f"restored {args.delimiter.join(target)}")
    elif args.action == "purgable":
        cutoff = None
        if args.older_than:
            cutoff = datetime.now(timezone.utc) - timedelta(seconds=parse_duration(args.older_than))
        for table in ns.list_purgable_tables(target, deleted_before=cutoff):
            print(f"{args.delimiter.join(table.id)}\t{table.deleted_at.isoformat()}")
    elif args.older_than is not None:  # purge: every expired table of a namespace
        cutoff = datetime.now(timezone.utc) - timedelta(seconds=parse_duration(args.older_than))
        for table_id in ns.purge_tables(namespace_id=target, deleted_before=cutoff):
            print(f"purged {args.delimiter.join(table_id)}")
    else:  # purge: one table
        print(f"purged {ns.purge_table(target)} soft-deleted version(s) of {args.delimiter.join(target)}")
    ns.close()
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

    serve = commands.add_parser("serve", help="serve the Lance REST Namespace API over an Iceberg REST catalog")
    serve.add_argument("--endpoint", required=True, help="the Iceberg REST catalog URL")
    serve.add_argument("--root", default=None, help="storage root for new tables")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=2333)
    serve.add_argument("--property", action="append", help="another bridge property, key=value (repeatable)")
    serve.add_argument("--auth-token", action="append", help="a bearer token clients must present (repeatable)")
    serve.add_argument(
        "--forward-bearer-token", action="store_true", help="send each caller's bearer token to the Iceberg catalog"
    )
    serve.add_argument("--access-log", action="store_true", help="log every request (method, path, status)")
    serve.set_defaults(run=_serve)

    tables = commands.add_parser(
        "tables",
        help="soft-deleted tables: status, undrop, purge, purgable",
        description="status ID | undrop ID | purge ID | purge --older-than 7d NAMESPACE | purgable NAMESPACE",
    )
    tables.add_argument("action", choices=["status", "undrop", "purge", "purgable"])
    tables.add_argument("id", help="a table id (or, for purge --older-than and purgable, a namespace id)")
    tables.add_argument("--endpoint", required=True, help="the Iceberg REST catalog URL")
    tables.add_argument("--older-than", default=None, help="a duration (30s, 15m, 12h, 7d, 2w)")
    tables.add_argument("--delimiter", default=".", help="what joins the identifier's parts (default '.')")
    tables.add_argument("--property", action="append", help="another bridge property, key=value (repeatable)")
    tables.set_defaults(run=_tables)

    demo = commands.add_parser("demo", help="run the end-to-end demo on the local catalog")
    demo.add_argument("--data-dir", default=None, help="keep the demo's catalog and tables here")
    demo.set_defaults(run=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from lance_namespace.errors import LanceNamespaceError

    args = build_parser().parse_args(argv)
    if getattr(args, "data_dir", "unset") is None and args.command == "local-catalog":
        args.data_dir = tempfile.mkdtemp(prefix="lance-iceberg-ns-catalog-")
    try:
        return int(args.run(args))
    except LanceNamespaceError as exc:  # a clear one-line answer, with the error code
        print(f"error {int(exc.code)} ({type(exc).__name__}): {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
