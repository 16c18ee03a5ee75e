"""The data-side commands: row counts, stats, indices, tags, orphan files and import from a directory namespace."""

from __future__ import annotations

import sys

import click

from lance_iceberg_ns.cli.base import (
    all_pages,
    cli,
    cli_value,
    current_state,
    each_page,
    emit,
    exit_code_for,
    object_command,
    page_fetcher,
    show_fields,
    show_table,
    tables,
)
from lance_iceberg_ns.cli.catalog_commands import resolve_version
from lance_iceberg_ns.cli.feedback import done, working

# pylance's index types by every name the namespace accepts (lance_iceberg_ns.data.indices, not
# imported here: the command line loads pylance only when a command runs).
SCALAR_INDEX_TYPES = frozenset(
    {"SCALAR", "BTREE", "BITMAP", "LABEL_LIST", "LABELLIST", "INVERTED", "FTS", "NGRAM", "ZONEMAP", "ZONE_MAP"}
    | {"BLOOMFILTER", "BLOOM_FILTER", "RTREE", "R_TREE"}
)
_IVF = frozenset({"num_partitions", "sample_rate", "max_iterations", "target_partition_size", "distance_type"})
_HNSW = frozenset({"m", "ef_construction"})
_TOKENIZER = frozenset(
    {"with_position", "base_tokenizer", "language", "max_token_length", "lower_case", "stem", "remove_stop_words"}
    | {"ascii_folding"}
)
# The parameters each index type takes (by the request's field names): any other is refused.
INDEX_PARAMETERS: dict[str, frozenset[str]] = {
    "IVF_PQ": _IVF | {"num_sub_vectors", "num_bits"},
    "IVF_FLAT": _IVF,
    "IVF_SQ": _IVF | {"num_bits"},
    "IVF_RQ": _IVF | {"num_bits"},
    "IVF_HNSW_FLAT": _IVF | _HNSW,
    "IVF_HNSW_SQ": _IVF | _HNSW | {"num_bits"},
    "IVF_HNSW_PQ": _IVF | _HNSW | {"num_sub_vectors", "num_bits"},
    "INVERTED": _TOKENIZER,
}


def index_parameters(index_type: str, settings: tuple[str, ...]) -> dict[str, object]:
    """``--set k=v`` as the index type's parameters; a key it does not take is a one-line usage
    error naming the ones it does (the request would otherwise drop it without a word)."""
    from lance_iceberg_ns.data.indices import SCALAR_TYPES, VECTOR_TYPES

    upper = index_type.strip().upper()
    canonical = SCALAR_TYPES.get(upper) or VECTOR_TYPES.get(upper)
    if canonical is None:
        known = ", ".join(sorted({*SCALAR_TYPES, *VECTOR_TYPES}))
        raise click.UsageError(f"Unknown index type {index_type!r}; one of: {known}")
    valid = INDEX_PARAMETERS.get(canonical, frozenset())
    parameters = {key: cli_value(text) for key, text in (item.partition("=")[::2] for item in settings)}
    unknown = sorted(set(parameters) - valid)
    if unknown:
        takes = f"valid: {', '.join(sorted(valid))}" if valid else "it takes none"
        raise click.UsageError(f"{canonical} index: unknown parameter(s) {', '.join(unknown)}; {takes}")
    return parameters


@object_command(tables, "count", "table_id")
@click.option("--where", "predicate", help="only rows matching this SQL predicate")
@click.option("--version", help="at this version (a number or a tag)")
def tables_count(table_id: str, predicate: str | None, version: str | None) -> None:
    """How many rows a table has."""
    state = current_state()
    ns, identifier = state.namespace(), state.identifier(table_id)
    number = resolve_version(ns, identifier, version)
    count = ns.count_table_rows({"id": identifier, "predicate": predicate, "version": number}).count
    emit({"table": table_id, "rows": count}, lambda: click.echo(count))


@object_command(tables, "stats", "table_id")
def tables_stats(table_id: str) -> None:
    """A table's rows, bytes, indices and fragments."""
    response = current_state().call("get_table_stats", table_id)
    emit(response.to_dict(), lambda: show_fields(response.to_dict().items()))


@tables.group("indices")
def indices() -> None:
    """A table's indices."""


@object_command(indices, "list", "table_id")
def indices_list(table_id: str) -> None:
    """The indices of a table."""
    state = current_state()
    found = all_pages(page_fetcher(state.namespace(), "list_table_indices", id=state.identifier(table_id)), "indexes")
    rows = [(i.index_name, i.index_type, ",".join(i.columns), i.num_indexed_rows, i.num_unindexed_rows) for i in found]
    emit(
        {"indices": [index.to_dict() for index in found]},
        lambda: show_table(("index", "type", "columns", "indexed rows", "unindexed rows"), rows),
    )


@object_command(indices, "create", "table_id")
@click.option("--column", required=True, help="the column to index")
@click.option("--type", "index_type", required=True, help="IVF_PQ, IVF_HNSW_SQ, BTREE, BITMAP, LABEL_LIST, FTS, ...")
@click.option("--name", help="the index name (default: Lance's, from the column)")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE", help="an index parameter (num_partitions=64)")
def indices_create(table_id: str, column: str, index_type: str, name: str | None, settings: tuple[str, ...]) -> None:
    """Build an index on a column (vector types build a vector index, the rest a scalar one);
    --set takes only the parameters of the index type."""
    parameters = index_parameters(index_type, settings)
    state = current_state()
    scalar = index_type.upper() in SCALAR_INDEX_TYPES
    operation = "create_table_scalar_index" if scalar else "create_table_index"
    with working(f"building a {index_type.upper()} index on {column}", state.as_json) as watch:
        state.call(operation, table_id, column=column, index_type=index_type.upper(), name=name, **parameters)
    emit(
        {"table": table_id, "column": column, "index_type": index_type.upper(), "elapsed_seconds": watch.seconds},
        lambda: click.echo(f"created a {index_type.upper()} index on {column} of {table_id}"),
    )
    done(watch, state.as_json)


@object_command(indices, "drop", "table_id")
@click.argument("index_name")
def indices_drop(table_id: str, index_name: str) -> None:
    """Drop an index."""
    current_state().call("drop_table_index", table_id, index_name=index_name)
    emit({"table": table_id, "dropped": index_name}, lambda: click.echo(f"dropped {index_name}"))


@tables.group("tags")
def tags() -> None:
    """A table's tags: names for versions."""


@object_command(tags, "list", "table_id")
def tags_list(table_id: str) -> None:
    """The tags of a table."""
    state = current_state()
    pages = each_page(page_fetcher(state.namespace(), "list_table_tags", id=state.identifier(table_id)))
    tags_by_name = {name: contents for page in pages for name, contents in (page.tags or {}).items()}
    rows = [(name, contents.version) for name, contents in sorted(tags_by_name.items())]
    as_json = {"tags": {name: contents.to_dict() for name, contents in tags_by_name.items()}}
    emit(as_json, lambda: show_table(("tag", "version"), rows))


@object_command(tags, "create", "table_id")
@click.argument("tag")
@click.argument("version")
def tags_create(table_id: str, tag: str, version: str) -> None:
    """Name a version (a number, or another tag) of a table."""
    state = current_state()
    ns, identifier = state.namespace(), state.identifier(table_id)
    number = resolve_version(ns, identifier, version)
    ns.create_table_tag({"id": identifier, "tag": tag, "version": number})
    emit({"table": table_id, "tag": tag, "version": number}, lambda: click.echo(f"tagged version {number} {tag}"))


@object_command(tags, "delete", "table_id")
@click.argument("tag")
def tags_delete(table_id: str, tag: str) -> None:
    """Delete a tag (the version stays)."""
    current_state().call("delete_table_tag", table_id, tag=tag)
    emit({"table": table_id, "deleted": tag}, lambda: click.echo(f"deleted tag {tag}"))


@object_command(tables, "remove-orphans", "table_id")
@click.option("--older-than", default="3d", show_default=True, help="only files last written this long ago")
@click.option("--dry-run", is_flag=True, help="list them, delete nothing")
def tables_remove_orphans(table_id: str, older_than: str, dry_run: bool) -> None:
    """Delete data files no version references (left by failed or speculative task attempts).
    Says what it deleted and what it kept as too young (written within --older-than: a write may
    still be running, so keeping them is the purpose of the cut-off, not a failure)."""
    from lance_iceberg_ns.jobs.orphans import remove_orphan_files

    state = current_state()
    with working(f"scanning {table_id} for orphan files", state.as_json) as watch:
        found = remove_orphan_files(state.namespace(), state.identifier(table_id), older_than, dry_run)
    verb = "would delete" if dry_run else "deleted"
    why = f"too young: written within the last {older_than}, maybe by a write still running"
    kept = [{"file": path, "reason": why} for path in found.skipped]

    def human() -> None:
        for path in found.files:
            click.echo(f"{verb} {path}")
        for path in found.skipped:
            click.echo(f"kept {path}: {why}")
        click.echo(f"{verb} {len(found.files)} orphan file(s), {found.bytes} bytes; kept {len(kept)} (too young)")

    answer = {"files": found.files, "bytes": found.bytes, "dry_run": dry_run, "kept": kept}
    emit({**answer, "elapsed_seconds": watch.seconds}, human)
    done(watch, state.as_json)


@object_command(cli, "import-directory", "directory")
@click.option("--into", "into", required=True, help="the target namespace: WAREHOUSE.NAMESPACE")
@click.option("--dry-run", is_flag=True, help="say what would be registered, register nothing")
@click.option("--storage", multiple=True, metavar="KEY=VALUE", help="storage option for the directory (repeatable)")
def import_directory_command(directory: str, into: str, dry_run: bool, storage: tuple[str, ...]) -> None:
    """Register every Lance table of the directory namespace at DIRECTORY (V1 *.lance directories and
    V2 __manifest tables), creating the namespaces: in place under the root or allowed_locations, else
    as a copy in the root (the source is left as it was). Safe to re-run."""
    from rich.progress import Progress

    from lance_iceberg_ns.jobs.directory_import import CONFLICT, import_directory

    state = current_state()
    root = state.root_for("import-directory")  # tables outside it and allowed_locations are copied into it
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
        click.echo(f"storage root: {root}")
        show_table(("directory table", "catalog table", "outcome", "reason"), rows)
        click.echo(", ".join(f"{count} {outcome}" for outcome, count in counts.items()) or "no tables found")

    emit({"tables": [t.__dict__ for t in summary.tables], "summary": counts, "root": root}, human)
    if summary.count(CONFLICT):
        from lance_namespace.errors import ErrorCode

        raise SystemExit(exit_code_for(ErrorCode.TABLE_ALREADY_EXISTS))  # a conflict: the table is there
