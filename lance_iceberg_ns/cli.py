"""The ``lance-iceberg-ns`` command: namespaces, tables, versions, the soft-delete lifecycle,
import from a directory namespace, the REST server and the local catalog.

Connection options (``--catalog``, ``--endpoint``, ``--root``, ``-p key=value``) and output options
(``--json``, ``--debug``, ``--delimiter``) go before or after the command; a command's own win.
Settings also come from ``LANCE_ICEBERG_*`` variables and, with ``--catalog NAME`` (or
``LANCE_ICEBERG_CATALOG``), from a pyiceberg catalog configuration.

Exit codes: 0 success, 1 unexpected failure, 2 invalid input or usage, 3 not found, 4 conflict,
5 unavailable (or throttled), 6 not authenticated or not allowed, 7 unsupported.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import click

# Lance error code → exit code (see the module docstring); every code of lance_namespace's
# ErrorCode has its row (tests/test_cli.py holds it to the enum).
_EXIT_CODES = {
    0: 7,
    1: 3,
    2: 4,
    3: 4,
    4: 3,
    5: 4,
    6: 3,
    7: 4,
    8: 3,
    9: 4,
    10: 3,
    11: 3,
    12: 3,
    13: 2,
    14: 4,
    15: 6,
    16: 6,
    17: 5,
    18: 1,
    19: 4,
    20: 2,
    21: 5,
    22: 3,  # branch not found
    23: 4,  # branch already exists
}
EXIT_UNEXPECTED = 1
EXIT_USAGE = 2


def exit_code_for(error_code: int) -> int:
    """The exit code for a Lance error code."""
    return _EXIT_CODES.get(error_code, EXIT_UNEXPECTED)


@dataclass
class CliState:
    """The options given so far, from the group and then the command."""

    catalog: str | None = None
    endpoint: str | None = None
    root: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    as_json: bool = False
    debug: bool = False
    delimiter: str = "."

    def namespace(self) -> Any:
        from lance_iceberg_ns import IcebergLanceNamespace
        from lance_iceberg_ns.sources import resolve_properties

        explicit = {**self.properties, "endpoint": self.endpoint, "root": self.root}
        properties = resolve_properties({k: v for k, v in explicit.items() if v is not None}, catalog=self.catalog)
        if not properties.get("endpoint"):
            raise click.UsageError(
                "No catalog: give --endpoint URL, --catalog NAME (pyiceberg) or set LANCE_ICEBERG_ENDPOINT"
            )
        return IcebergLanceNamespace(**properties)

    def call(self, operation: str, identifier: str, **fields: Any) -> Any:
        """One namespace operation on the object an identifier names, with its other fields."""
        return getattr(self.namespace(), operation)({"id": self.identifier(identifier), **fields})

    def identifier(self, text: str) -> list[str]:
        return [] if text == "" else text.split(self.delimiter)

    def name(self, parts: Iterable[str]) -> str:
        return self.delimiter.join(parts)


def _state() -> CliState:
    return click.get_current_context().ensure_object(CliState)


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """Store an option in the shared state (a command's value overrides the group's)."""
    state = ctx.ensure_object(CliState)
    if value is None or value == () or value is False:
        return
    if param.name == "properties":
        for item in value:
            key, separator, text = item.partition("=")
            if not separator or not key:
                raise click.BadParameter(f"expected key=value, got {item!r}", ctx=ctx, param=param)
            state.properties[key] = text
    else:
        setattr(state, str(param.name), value)


def common_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """The connection and output options, accepted by the group and by every command."""
    options = [
        click.option("--catalog", help="start from this pyiceberg catalog (~/.pyiceberg.yaml, PYICEBERG_CATALOG__*)"),
        click.option("--endpoint", help="the Iceberg REST catalog URL"),
        click.option("--root", help="storage root for tables declared without a location"),
        click.option(
            "-p", "--property", "properties", multiple=True, metavar="KEY=VALUE", help="a bridge property (repeatable)"
        ),
        click.option("--json", "as_json", is_flag=True, default=None, help="print JSON for scripts"),
        click.option("--debug", is_flag=True, default=None, help="log at DEBUG and show tracebacks"),
        click.option("--delimiter", help="what joins identifier parts (default '.')"),
    ]
    already = len(getattr(function, "__click_params__", []))  # the command's own, decorated first
    for option in reversed(options):
        function = option(function)
    for param in function.__click_params__[already:]:  # type: ignore[attr-defined]
        param.expose_value = False
        param.callback = _remember
        param.is_eager = True
    return function


def _command(group: click.Group, name: str, argument: str) -> Callable[[Callable[..., Any]], click.Command]:
    """A command of ``group`` on one object, named by ARGUMENT (its identifier), that takes the
    common options too; the options and arguments decorated below it follow ARGUMENT."""

    def decorate(function: Callable[..., Any]) -> click.Command:
        command = group.command(name)(click.argument(argument)(common_options(function)))
        command.params.sort(key=lambda param: param.callback is _remember)  # common options last in help
        return command

    return decorate


def _emit(data: Any, human: Callable[[], None]) -> None:
    """JSON with ``--json``, else the human form."""
    if _state().as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        human()


def _table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(*columns, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for row in rows:
        table.add_row(*("" if value is None else str(value) for value in row))
    Console(width=200, soft_wrap=True).print(table)


def _fields(pairs: Iterable[tuple[str, Any]]) -> None:
    _table(("field", "value"), ((key, value) for key, value in pairs if value not in (None, "", {}, [])))


def _value(text: str) -> Any:
    """A parameter given on the command line: a number or a boolean as such, else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _pages(fetch: Callable[[str | None], Any]) -> Iterator[Any]:
    """Every page of a listing, following its page tokens."""
    token = None
    while True:
        page = fetch(token)
        yield page
        token = page.page_token
        if not token:
            return


def _all_pages(fetch: Callable[[str | None], Any], items: str) -> list[Any]:
    return [item for page in _pages(fetch) for item in getattr(page, items) or []]


# --- the command tree -------------------------------------------------------------------------

SCALAR_INDEX_TYPES = frozenset({"BTREE", "BITMAP", "LABEL_LIST", "INVERTED", "FTS", "NGRAM", "ZONEMAP"})


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@common_options
def cli() -> None:
    """Lance tables in an Apache Iceberg REST catalog."""


@cli.group()
def namespaces() -> None:
    """Namespaces: [warehouse, namespace...]."""


@_command(namespaces, "list", "parent")
def namespaces_list(parent: str) -> None:
    """The child namespaces of PARENT (a warehouse or a namespace)."""
    state = _state()
    ns = state.namespace()
    parent_id = state.identifier(parent)
    names = _all_pages(lambda token: ns.list_namespaces({"id": parent_id, "page_token": token}), "namespaces")
    _emit({"namespaces": names}, lambda: _table(("namespace",), ([state.name([*parent_id, n])] for n in names)))


@_command(namespaces, "create", "namespace_id")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE", help="a namespace property (repeatable)")
@click.option("--exist-ok", is_flag=True, help="succeed when it already exists")
def namespaces_create(namespace_id: str, settings: tuple[str, ...], exist_ok: bool) -> None:
    """Create a namespace."""
    state = _state()
    properties = dict(item.partition("=")[::2] for item in settings)
    request = {"id": state.identifier(namespace_id), "properties": properties, "mode": "exist_ok" if exist_ok else None}
    response = state.namespace().create_namespace(request)
    _emit(response.to_dict(), lambda: click.echo(f"created {namespace_id}"))


@_command(namespaces, "describe", "namespace_id")
def namespaces_describe(namespace_id: str) -> None:
    """A namespace's properties."""
    state = _state()
    response = state.call("describe_namespace", namespace_id)
    _emit(response.to_dict(), lambda: _fields(sorted((response.properties or {}).items())))


@_command(namespaces, "drop", "namespace_id")
def namespaces_drop(namespace_id: str) -> None:
    """Drop an empty namespace."""
    state = _state()
    state.call("drop_namespace", namespace_id)
    _emit({"dropped": namespace_id}, lambda: click.echo(f"dropped {namespace_id}"))


@cli.group()
def tables() -> None:
    """Lance tables: [warehouse, namespace..., table]."""


@_command(tables, "list", "namespace_id")
@click.option("--include-declared/--exclude-declared", default=True, help="list declared tables without data")
@click.option("--recursive", "-r", is_flag=True, help="every table beneath (a warehouse, or a namespace)")
def tables_list(namespace_id: str, include_declared: bool, recursive: bool) -> None:
    """The Lance tables of a namespace (with --recursive, of it and every namespace beneath)."""
    state = _state()
    ns = state.namespace()
    parent = state.identifier(namespace_id)
    request = {"id": parent, "include_declared": include_declared}
    if recursive:
        from lance_iceberg_ns.namespace import ID_DELIMITER

        found = _all_pages(lambda token: ns.list_all_tables({**request, "page_token": token}), "tables")
        ids = [full.split(ID_DELIMITER) for full in found]
    else:
        names = _all_pages(lambda token: ns.list_tables({**request, "page_token": token}), "tables")
        ids = [[*parent, name] for name in names]
    tables = [state.name(table_id) for table_id in ids]
    _emit(
        {"tables": tables if recursive else [table_id[-1] for table_id in ids]},
        lambda: _table(("table",), ([t] for t in tables)),
    )


@_command(tables, "describe", "table_id")
@click.option("--version", type=int, help="at this version")
def tables_describe(table_id: str, version: int | None) -> None:
    """A table's location, version, schema and properties."""
    state = _state()
    response = state.call("describe_table", table_id, version=version, load_detailed_metadata=True)
    data = response.to_dict()
    data.pop("storage_options", None)  # may hold vended keys: not for a terminal

    def human() -> None:
        schema = response.var_schema.fields if response.var_schema else []
        columns = ", ".join(f"{f.name}: {f.type.type}" for f in schema)
        _fields([("location", response.location), ("version", response.version), ("schema", columns)])
        if response.properties:
            _fields(sorted(response.properties.items()))

    _emit(data, human)


@_command(tables, "declare", "table_id")
@click.option("--location", help="where its data will be (default: under the root)")
def tables_declare(table_id: str, location: str | None) -> None:
    """Reserve a table name and location before any data is written."""
    state = _state()
    response = state.call("declare_table", table_id, location=location)
    _emit({"location": response.location}, lambda: click.echo(f"declared {table_id} at {response.location}"))


@_command(tables, "register", "table_id")
@click.argument("location")
def tables_register(table_id: str, location: str) -> None:
    """Register the existing Lance dataset at LOCATION as a table."""
    state = _state()
    response = state.call("register_table", table_id, location=location)
    _emit({"location": response.location}, lambda: click.echo(f"registered {table_id} at {location}"))


@_command(tables, "deregister", "table_id")
def tables_deregister(table_id: str) -> None:
    """Remove a table from the catalog, keeping its data."""
    state = _state()
    response = state.call("deregister_table", table_id)
    _emit(
        {"location": response.location},
        lambda: click.echo(f"deregistered {table_id} (data kept at {response.location})"),
    )


@_command(tables, "drop", "table_id")
def tables_drop(table_id: str) -> None:
    """Drop a table (a soft delete unless the bridge has soft_delete=false)."""
    state = _state()
    response = state.call("drop_table", table_id)
    _emit({"location": response.location}, lambda: click.echo(f"dropped {table_id}"))


@_command(tables, "rename", "table_id")
@click.argument("new_name")
@click.option("--namespace", "new_namespace", help="move it to this namespace of the same warehouse")
def tables_rename(table_id: str, new_name: str, new_namespace: str | None) -> None:
    """Rename a table (its data stays where it is)."""
    state = _state()
    request = {"id": state.identifier(table_id), "new_table_name": new_name}
    if new_namespace:
        request["new_namespace_id"] = state.identifier(new_namespace)
    state.namespace().rename_table(request)
    _emit({"renamed": table_id, "to": new_name}, lambda: click.echo(f"renamed {table_id} to {new_name}"))


@_command(tables, "versions", "table_id")
@click.option("--limit", type=click.IntRange(min=1), help="at most this many, newest first")
@click.option("--ascending", is_flag=True, help="oldest first")
def tables_versions(table_id: str, limit: int | None, ascending: bool) -> None:
    """A table's versions (newest first)."""
    state = _state()
    ns = state.namespace()
    request = {"id": state.identifier(table_id), "descending": not ascending}
    if limit:
        found = ns.list_table_versions({**request, "limit": limit}).versions
    else:
        found = _all_pages(lambda token: ns.list_table_versions({**request, "page_token": token}), "versions")
    rows = [
        (
            v.version,
            datetime.fromtimestamp(v.timestamp_millis / 1000, timezone.utc).isoformat(timespec="seconds"),
            (v.metadata or {}).get("total_rows"),
            v.manifest_path,
        )
        for v in found
    ]
    _emit(
        {"versions": [v.to_dict() for v in found]}, lambda: _table(("version", "committed", "rows", "manifest"), rows)
    )


@_command(tables, "restore", "table_id")
@click.argument("version", type=int)
def tables_restore(table_id: str, version: int) -> None:
    """Make VERSION the latest again, as a new version."""
    state = _state()
    ns = state.namespace()
    ns.restore_table({"id": state.identifier(table_id), "version": version})
    latest = ns.describe_table_version({"id": state.identifier(table_id)}).version.version
    _emit(
        {"restored": version, "version": latest},
        lambda: click.echo(f"restored {table_id} to version {version} as version {latest}"),
    )


@_command(tables, "status", "table_id")
def tables_status(table_id: str) -> None:
    """exists, soft_deleted (since when) or not_found."""
    state = _state()
    status = state.namespace().table_status(state.identifier(table_id))
    deleted_at = status.deleted_at.isoformat() if status.deleted_at else None
    _emit(
        {"state": status.state, "deleted_at": deleted_at},
        lambda: click.echo(status.state if deleted_at is None else f"{status.state} {deleted_at}"),
    )


@_command(tables, "undrop", "table_id")
def tables_undrop(table_id: str) -> None:
    """Bring back a soft-deleted table."""
    state = _state()
    state.namespace().undrop_table(state.identifier(table_id))
    _emit({"restored": table_id}, lambda: click.echo(f"restored {table_id}"))


def _cutoff(older_than: str | None) -> datetime | None:
    from lance_iceberg_ns.lifecycle import parse_duration

    if older_than is None:
        return None
    return datetime.now(timezone.utc) - timedelta(seconds=parse_duration(older_than))


@_command(tables, "purge", "target")
@click.option("--older-than", help="purge every table of the namespace TARGET soft-deleted this long ago (7d, 12h)")
def tables_purge(target: str, older_than: str | None) -> None:
    """Reclaim a soft-deleted table's storage, or every expired one of a namespace."""
    state = _state()
    ns = state.namespace()
    if older_than is not None:
        purged = [
            state.name(t)
            for t in ns.purge_tables(namespace_id=state.identifier(target), deleted_before=_cutoff(older_than))
        ]
        _emit({"purged": purged}, lambda: click.echo("".join(f"purged {name}\n" for name in purged), nl=False))
    else:
        count = ns.purge_table(state.identifier(target))
        _emit(
            {"purged": target, "soft_deleted_versions": count},
            lambda: click.echo(f"purged {count} soft-deleted version(s) of {target}"),
        )


@_command(tables, "purgable", "namespace_id")
@click.option("--older-than", help="only tables soft-deleted this long ago")
def tables_purgable(namespace_id: str, older_than: str | None) -> None:
    """The soft-deleted tables of a namespace."""
    state = _state()
    found = state.namespace().list_purgable_tables(state.identifier(namespace_id), deleted_before=_cutoff(older_than))
    rows = [(state.name(t.id), t.deleted_at.isoformat()) for t in found]
    _emit(
        [{"id": t.id, "deleted_at": t.deleted_at.isoformat()} for t in found],
        lambda: _table(("table", "deleted at"), rows),
    )


@_command(tables, "count", "table_id")
@click.option("--where", "predicate", help="only rows matching this SQL predicate")
@click.option("--version", type=int, help="at this version")
def tables_count(table_id: str, predicate: str | None, version: int | None) -> None:
    """How many rows a table has."""
    count = _state().call("count_table_rows", table_id, predicate=predicate, version=version).count
    _emit({"table": table_id, "rows": count}, lambda: click.echo(count))


@_command(tables, "stats", "table_id")
def tables_stats(table_id: str) -> None:
    """A table's rows, bytes, indices and fragments."""
    response = _state().call("get_table_stats", table_id)
    _emit(response.to_dict(), lambda: _fields(response.to_dict().items()))


@tables.group("indices")
def indices() -> None:
    """A table's indices."""


@_command(indices, "list", "table_id")
def indices_list(table_id: str) -> None:
    """The indices of a table."""
    state = _state()
    ns = state.namespace()
    request = {"id": state.identifier(table_id)}
    found = _all_pages(lambda token: ns.list_table_indices({**request, "page_token": token}), "indexes")
    rows = [(i.index_name, i.index_type, ",".join(i.columns), i.num_indexed_rows, i.num_unindexed_rows) for i in found]
    _emit(
        {"indices": [index.to_dict() for index in found]},
        lambda: _table(("index", "type", "columns", "indexed rows", "unindexed rows"), rows),
    )


@_command(indices, "create", "table_id")
@click.option("--column", required=True, help="the column to index")
@click.option("--type", "index_type", required=True, help="IVF_PQ, IVF_HNSW_SQ, BTREE, BITMAP, LABEL_LIST, FTS, ...")
@click.option("--name", help="the index name (default: Lance's, from the column)")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE", help="an index parameter (num_partitions=64)")
def indices_create(table_id: str, column: str, index_type: str, name: str | None, settings: tuple[str, ...]) -> None:
    """Build an index on a column (vector types build a vector index, the rest a scalar one)."""
    parameters = {key: _value(text) for key, text in (item.partition("=")[::2] for item in settings)}
    scalar = index_type.upper() in SCALAR_INDEX_TYPES
    operation = "create_table_scalar_index" if scalar else "create_table_index"
    _state().call(operation, table_id, column=column, index_type=index_type.upper(), name=name, **parameters)
    _emit({"table": table_id, "column": column, "index_type": index_type.upper()}, lambda: click.echo("created"))


@_command(indices, "drop", "table_id")
@click.argument("index_name")
def indices_drop(table_id: str, index_name: str) -> None:
    """Drop an index."""
    _state().call("drop_table_index", table_id, index_name=index_name)
    _emit({"table": table_id, "dropped": index_name}, lambda: click.echo(f"dropped {index_name}"))


@tables.group("tags")
def tags() -> None:
    """A table's tags: names for versions."""


@_command(tags, "list", "table_id")
def tags_list(table_id: str) -> None:
    """The tags of a table."""
    state = _state()
    ns = state.namespace()
    request = {"id": state.identifier(table_id)}
    pages = _pages(lambda token: ns.list_table_tags({**request, "page_token": token}))
    tags_by_name = {name: contents for page in pages for name, contents in (page.tags or {}).items()}
    rows = [(name, contents.version) for name, contents in sorted(tags_by_name.items())]
    as_json = {"tags": {name: contents.to_dict() for name, contents in tags_by_name.items()}}
    _emit(as_json, lambda: _table(("tag", "version"), rows))


@_command(tags, "create", "table_id")
@click.argument("tag")
@click.argument("version", type=int)
def tags_create(table_id: str, tag: str, version: int) -> None:
    """Name a version of a table."""
    _state().call("create_table_tag", table_id, tag=tag, version=version)
    _emit({"table": table_id, "tag": tag, "version": version}, lambda: click.echo(f"tagged version {version} {tag}"))


@_command(tags, "delete", "table_id")
@click.argument("tag")
def tags_delete(table_id: str, tag: str) -> None:
    """Delete a tag (the version stays)."""
    _state().call("delete_table_tag", table_id, tag=tag)
    _emit({"table": table_id, "deleted": tag}, lambda: click.echo(f"deleted tag {tag}"))


@_command(tables, "remove-orphans", "table_id")
@click.option("--older-than", default="3d", show_default=True, help="only files last written this long ago")
@click.option("--dry-run", is_flag=True, help="list them, delete nothing")
def tables_remove_orphans(table_id: str, older_than: str, dry_run: bool) -> None:
    """Delete data files no version references (left by failed or speculative task attempts)."""
    from lance_iceberg_ns.orphans import remove_orphan_files

    state = _state()
    found = remove_orphan_files(state.namespace(), state.identifier(table_id), older_than, dry_run)
    verb = "would delete" if dry_run else "deleted"
    _emit(
        {"files": found.files, "bytes": found.bytes, "dry_run": dry_run},
        lambda: click.echo(f"{verb} {len(found.files)} orphan file(s), {found.bytes} bytes"),
    )


@_command(cli, "import-directory", "directory")
@click.option("--into", "into", required=True, help="the target namespace: WAREHOUSE.NAMESPACE")
@click.option("--dry-run", is_flag=True, help="say what would be registered, register nothing")
@click.option("--storage", multiple=True, metavar="KEY=VALUE", help="storage option for the directory (repeatable)")
def import_directory_command(directory: str, into: str, dry_run: bool, storage: tuple[str, ...]) -> None:
    """Register every Lance table of the directory namespace at DIRECTORY (V1 *.lance directories and
    V2 __manifest tables) at its existing location. Safe to re-run."""
    from rich.progress import Progress

    from lance_iceberg_ns.directory_import import CONFLICT, import_directory

    state = _state()
    progress = Progress(transient=True, disable=state.as_json or not sys.stderr.isatty())
    task = progress.add_task("importing", total=None)
    with progress:
        summary = import_directory(
            state.namespace(),
            directory,
            state.identifier(into),
            storage_options=dict(item.partition("=")[::2] for item in storage),
            dry_run=dry_run,
            planned=lambda total: progress.update(task, total=total),
            progress=lambda _table: progress.advance(task),
        )
    rows = [(state.name(t.source), state.name(t.target), t.outcome, t.reason) for t in summary.tables]
    counts = {outcome: summary.count(outcome) for outcome in sorted({t.outcome for t in summary.tables})}

    def human() -> None:
        _table(("directory table", "catalog table", "outcome", "reason"), rows)
        click.echo(", ".join(f"{count} {outcome}" for outcome, count in counts.items()) or "no tables found")

    _emit({"tables": [t.__dict__ for t in summary.tables], "summary": counts}, human)
    if summary.count(CONFLICT):
        raise SystemExit(exit_code_for(5))  # a conflict, as for TableAlreadyExists


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


@cli.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=2333, show_default=True)
@click.option("--auth-token", "auth_tokens", multiple=True, help="a bearer token clients must present (repeatable)")
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
    "--share-static-credentials",
    is_flag=True,
    help="also hand clients the secret storage.* options configured here (trusted setups only)",
)
@common_options
def serve_command(
    host: str,
    port: int,
    auth_tokens: tuple[str, ...],
    forward_bearer_token: bool,
    access_log: bool,
    max_data_body_mb: int,
    share_static_credentials: bool,
) -> None:
    """Serve the Lance REST Namespace API over the Iceberg REST catalog."""
    import uvicorn

    from lance_iceberg_ns.server import create_app

    state = _state()
    ns = state.namespace()  # validates the settings before the server starts
    properties = dict(ns.properties)
    ns.close()
    app = create_app(
        properties=properties,
        auth_tokens=auth_tokens,
        forward_bearer_token=forward_bearer_token,
        max_data_body_bytes=max_data_body_mb * 1024 * 1024,
        share_static_credentials=share_static_credentials,
    )
    endpoint = ns.settings.redact(ns.settings.endpoint)
    click.echo(f"Lance REST Namespace on http://{host}:{port} over the Iceberg catalog at {endpoint}")
    uvicorn.run(app, host=host, port=port, log_level="info", access_log=access_log)


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


if __name__ == "__main__":
    sys.exit(main())
