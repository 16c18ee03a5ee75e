"""The namespaces and tables groups' catalog commands: list, create, describe, drop, versions, soft delete.

Each says what happened, not what was asked: a drop of a missing namespace, a create of one that
existed, a purge that skipped tables are said as such (and are not exit 0 unless asked to be)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import click

from lance_iceberg_ns.cli.base import (
    CliState,
    all_pages,
    current_state,
    each_page,
    emit,
    namespaces,
    object_command,
    show_fields,
    show_table,
    tables,
)
from lance_iceberg_ns.cli.feedback import EXIT_SKIPPED, done, hint_if_unprefixed, working

PROG = "lance-iceberg-ns"


def below_warehouse(state: CliState, text: str) -> list[str]:
    """The id of a namespace inside a warehouse; a one-part id is a usage error showing the form."""
    parts = state.identifier(text)
    if len(parts) < 2:
        d = state.delimiter
        example = f"wh{d}{parts[0] if parts else 'sales'}"
        raise click.UsageError(
            f"{text!r} names no namespace inside a warehouse: give WAREHOUSE{d}NAMESPACE (e.g. {example})"
        )
    return parts


def resolve_version(ns: Any, table_id: list[str], text: str | None) -> int | None:
    """A version given as its number or as a tag of the table (``v1-tag``)."""
    if text is None or text.isdigit():
        return None if text is None else int(text)
    return int(ns.get_table_tag_version({"id": table_id, "tag": text}).version)


@object_command(namespaces, "list", "parent")
def namespaces_list(parent: str) -> None:
    """The child namespaces of PARENT (a warehouse or a namespace)."""
    state = current_state()
    ns = state.namespace()
    parent_id = state.identifier(parent)
    names = all_pages(lambda token: ns.list_namespaces({"id": parent_id, "page_token": token}), "namespaces")
    emit({"namespaces": names}, lambda: show_table(("namespace",), ([state.name([*parent_id, n])] for n in names)))
    hint_if_unprefixed(ns, parent_id)


@object_command(namespaces, "create", "namespace_id")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE", help="a namespace property (repeatable)")
@click.option("--exist-ok", is_flag=True, help="succeed, saying it already existed, when it exists")
def namespaces_create(namespace_id: str, settings: tuple[str, ...], exist_ok: bool) -> None:
    """Create a namespace."""
    from lance_namespace.errors import NamespaceAlreadyExistsError

    state = current_state()
    identifier = below_warehouse(state, namespace_id)
    properties = dict(item.partition("=")[::2] for item in settings)
    ns = state.namespace()
    try:
        answer, created = ns.create_namespace({"id": identifier, "properties": properties}).to_dict(), True
    except NamespaceAlreadyExistsError:
        if not exist_ok:
            raise
        answer, created = {}, False
    kept = " (its properties left as they were)" if properties else ""
    emit(
        {**answer, "namespace": namespace_id, "created": created},
        lambda: click.echo(f"created {namespace_id}" if created else f"{namespace_id} already existed{kept}"),
    )
    hint_if_unprefixed(ns, identifier)


@object_command(namespaces, "describe", "namespace_id")
def namespaces_describe(namespace_id: str) -> None:
    """A namespace's properties."""
    state = current_state()
    response = state.call("describe_namespace", namespace_id)
    emit(response.to_dict(), lambda: show_fields(sorted((response.properties or {}).items())))


@object_command(namespaces, "drop", "namespace_id")
@click.option("--if-exists", is_flag=True, help="succeed, saying it was missing, when it does not exist")
def namespaces_drop(namespace_id: str, if_exists: bool) -> None:
    """Drop an empty namespace; a missing one is NamespaceNotFound (exit 3) unless --if-exists."""
    from lance_namespace.errors import NamespaceNotFoundError

    state = current_state()
    identifier = below_warehouse(state, namespace_id)
    ns = state.namespace()
    try:
        ns.drop_namespace({"id": identifier, "mode": "fail"})
        dropped = True
    except NamespaceNotFoundError:
        if not if_exists:
            raise
        dropped = False
    emit(
        {"namespace": namespace_id, "dropped": dropped},
        lambda: click.echo(f"dropped {namespace_id}" if dropped else f"{namespace_id} did not exist: nothing dropped"),
    )
    hint_if_unprefixed(ns, identifier)


@object_command(tables, "list", "namespace_id")
@click.option("--include-declared/--exclude-declared", default=True, help="list declared tables without data")
@click.option("--recursive", "-r", is_flag=True, help="every table beneath (a warehouse, or a namespace)")
def tables_list(namespace_id: str, include_declared: bool, recursive: bool) -> None:
    """The Lance tables of a namespace (with --recursive, of it and every namespace beneath)."""
    state = current_state()
    parent = state.identifier(namespace_id) if recursive or not namespace_id else below_warehouse(state, namespace_id)
    ns = state.namespace()
    request = {"id": parent, "include_declared": include_declared}
    if recursive:
        from lance_iceberg_ns.namespace import ID_DELIMITER

        found = all_pages(lambda token: ns.list_all_tables({**request, "page_token": token}), "tables")
        ids = [full.split(ID_DELIMITER) for full in found]
    else:
        names = all_pages(lambda token: ns.list_tables({**request, "page_token": token}), "tables")
        ids = [[*parent, name] for name in names]
    tables = [state.name(table_id) for table_id in ids]
    emit(
        {"tables": tables if recursive else [table_id[-1] for table_id in ids]},
        lambda: show_table(("table",), ([t] for t in tables)),
    )
    hint_if_unprefixed(ns, parent)


@object_command(tables, "describe", "table_id")
@click.option("--version", help="at this version (a number or a tag)")
def tables_describe(table_id: str, version: str | None) -> None:
    """A table's location, version, schema and properties."""
    state = current_state()
    ns = state.namespace()
    identifier = state.identifier(table_id)
    number = resolve_version(ns, identifier, version)
    response = ns.describe_table({"id": identifier, "version": number, "load_detailed_metadata": True})
    data = response.to_dict()
    data.pop("storage_options", None)  # may hold vended keys: not for a terminal

    def human() -> None:
        schema = response.var_schema.fields if response.var_schema else []
        columns = ", ".join(f"{f.name}: {f.type.type}" for f in schema)
        show_fields([("location", response.location), ("version", response.version), ("schema", columns)])
        if response.properties:
            show_fields(sorted(response.properties.items()))

    emit(data, human)


@object_command(tables, "declare", "table_id")
@click.option("--location", help="where its data will be (default: under the root)")
def tables_declare(table_id: str, location: str | None) -> None:
    """Reserve a table name and location before any data is written (under the storage root
    unless --location: the root must then be given, it is never the current directory by default)."""
    state = current_state()
    root = None if location else state.root_for("tables declare without --location")
    response = state.call("declare_table", table_id, location=location)
    under = "" if location else f" (under root {root})"
    emit(
        {"location": response.location, "root": root},
        lambda: click.echo(f"declared {table_id} at {response.location}{under}"),
    )


@object_command(tables, "register", "table_id")
@click.argument("location")
def tables_register(table_id: str, location: str) -> None:
    """Register the existing Lance dataset at LOCATION as a table."""
    state = current_state()
    response = state.call("register_table", table_id, location=location)
    emit({"location": response.location}, lambda: click.echo(f"registered {table_id} at {location}"))


@object_command(tables, "deregister", "table_id")
def tables_deregister(table_id: str) -> None:
    """Remove a table from the catalog, keeping its data."""
    state = current_state()
    response = state.call("deregister_table", table_id)
    emit(
        {"location": response.location},
        lambda: click.echo(f"deregistered {table_id} (data kept at {response.location})"),
    )


@object_command(tables, "drop", "table_id")
def tables_drop(table_id: str) -> None:
    """Drop a table: a soft delete (undo with `tables undrop`) until purged, unless the bridge has
    soft_delete=false, when its data is deleted at once."""
    state = current_state()
    ns = state.namespace()
    response = ns.drop_table({"id": state.identifier(table_id)})
    soft = bool(ns.settings.soft_delete)
    undo = f"{PROG} tables undrop {table_id}" if soft else None
    said = (
        f"soft-deleted {table_id}: its data stays at {response.location} until purged "
        f"(`{PROG} tables purge {table_id}`, or by age with --older-than); undo: `{undo}`"
        if soft
        else f"dropped {table_id} and deleted its data (soft_delete=false: no undo)"
    )
    emit({"location": response.location, "soft_deleted": soft, "undo": undo}, lambda: click.echo(said))


@object_command(tables, "rename", "table_id")
@click.argument("new_name")
@click.option("--namespace", "new_namespace", help="move it to this namespace of the same warehouse")
def tables_rename(table_id: str, new_name: str, new_namespace: str | None) -> None:
    """Rename a table (its data stays where it is). NEW_NAME is a table name, or the table's full
    new id WAREHOUSE.NAMESPACE...TABLE in the same warehouse (a different namespace moves it)."""
    state = current_state()
    source = state.identifier(table_id)
    target = _rename_target(state, source, new_name, new_namespace)
    request = {"id": source, "new_table_name": target[-1], "new_namespace_id": target[:-1]}
    state.namespace().rename_table(request)
    to = state.name(target)
    emit({"renamed": table_id, "to": to}, lambda: click.echo(f"renamed {table_id} to {to}"))


def _rename_target(state: CliState, source: list[str], new_name: str, new_namespace: str | None) -> list[str]:
    """The full new id: a bare name stays in the namespace (or --namespace); a dotted one must be a
    full id in the source's warehouse, never a table literally named ``wh.ops.b``."""
    d = state.delimiter
    if d not in new_name:
        namespace = state.identifier(new_namespace) if new_namespace else source[:-1]
        return [*namespace, new_name]
    target = state.identifier(new_name)
    if new_namespace:
        raise click.UsageError("Give the new namespace in NEW_NAME's full id or with --namespace, not both")
    if len(target) < 3 or not all(target):
        raise click.UsageError(
            f"{new_name!r}: a new name with {d!r} must be the full id WAREHOUSE{d}NAMESPACE{d}TABLE; "
            f"a table name cannot contain {d!r}"
        )
    if target[0] != source[0]:
        raise click.UsageError(f"A table stays in its warehouse {source[0]!r}: {new_name!r} names {target[0]!r}")
    return target


@object_command(tables, "versions", "table_id")
@click.option("--limit", type=click.IntRange(min=1), help="at most this many, newest first")
@click.option("--ascending", is_flag=True, help="oldest first")
def tables_versions(table_id: str, limit: int | None, ascending: bool) -> None:
    """A table's versions (newest first), with the tags that name them."""
    state = current_state()
    ns = state.namespace()
    identifier = state.identifier(table_id)
    request = {"id": identifier, "descending": not ascending}
    if limit:
        found = ns.list_table_versions({**request, "limit": limit}).versions
    else:
        found = all_pages(lambda token: ns.list_table_versions({**request, "page_token": token}), "versions")
    tagged = _tags_by_version(ns, identifier)
    rows = [
        (
            v.version,
            datetime.fromtimestamp(v.timestamp_millis / 1000, timezone.utc).isoformat(timespec="seconds"),
            (v.metadata or {}).get("total_rows"),
            ", ".join(tagged.get(v.version, [])),
            v.manifest_path,
        )
        for v in found
    ]
    emit(
        {"versions": [{**v.to_dict(), "tags": tagged.get(v.version, [])} for v in found]},
        lambda: show_table(("version", "committed", "rows", "tags", "manifest"), rows),
    )


def _tags_by_version(ns: Any, table_id: list[str]) -> dict[int, list[str]]:
    tagged: dict[int, list[str]] = {}
    for page in each_page(lambda token: ns.list_table_tags({"id": table_id, "page_token": token})):
        for name, contents in sorted((page.tags or {}).items()):
            tagged.setdefault(contents.version, []).append(name)
    return tagged


@object_command(tables, "restore", "table_id")
@click.argument("version")
@click.option("--dry-run", is_flag=True, help="say what it would do and which indices it would drop; change nothing")
def tables_restore(table_id: str, version: str, dry_run: bool) -> None:
    """Make VERSION (a number or a tag) the latest again, as a new version. Indices built after
    VERSION are not in it: they are named before anything is done."""
    state = current_state()
    ns = state.namespace()
    identifier = state.identifier(table_id)
    number = resolve_version(ns, identifier, version)
    dropped = sorted(_index_names(ns, identifier, None) - _index_names(ns, identifier, number))
    if not state.as_json:
        verb = "would drop" if dry_run else "drops"
        click.echo(
            f"restoring {table_id} to version {number} {verb} the indices built since: {', '.join(dropped)}"
            if dropped
            else f"restoring {table_id} to version {number} drops no index"
        )
    if dry_run:
        emit({"restored": None, "would_restore": number, "dropped_indices": dropped, "dry_run": True}, lambda: None)
        return
    with working(f"restoring {table_id} to version {number}", state.as_json) as watch:
        ns.restore_table({"id": identifier, "version": number})
        latest = ns.describe_table_version({"id": identifier}).version.version
    emit(
        {"restored": number, "version": latest, "dropped_indices": dropped, "elapsed_seconds": watch.seconds},
        lambda: click.echo(f"restored {table_id} to version {number} as version {latest}"),
    )
    done(watch, state.as_json)


def _index_names(ns: Any, identifier: list[str], version: int | None) -> set[str]:
    return {index.name for index in ns.dataset(identifier, version).describe_indices()}


@object_command(tables, "status", "table_id")
def tables_status(table_id: str) -> None:
    """exists, soft_deleted (since when) or not_found."""
    state = current_state()
    status = state.namespace().table_status(state.identifier(table_id))
    deleted_at = status.deleted_at.isoformat() if status.deleted_at else None
    emit(
        {"state": status.state, "deleted_at": deleted_at},
        lambda: click.echo(status.state if deleted_at is None else f"{status.state} {deleted_at}"),
    )


@object_command(tables, "undrop", "table_id")
def tables_undrop(table_id: str) -> None:
    """Bring back a soft-deleted table."""
    state = current_state()
    state.namespace().undrop_table(state.identifier(table_id))
    emit({"restored": table_id}, lambda: click.echo(f"restored {table_id}"))


def _cutoff(older_than: str | None) -> datetime | None:
    from lance_iceberg_ns.config.durations import duration_seconds

    if older_than is None:
        return None
    return datetime.now(timezone.utc) - timedelta(seconds=duration_seconds(older_than, "--older-than"))


@object_command(tables, "purge", "target")
@click.option("--older-than", help="purge every table of the namespace TARGET soft-deleted this long ago (7d, 12h)")
def tables_purge(target: str, older_than: str | None) -> None:
    """Reclaim a soft-deleted table's storage, or every expired one of a namespace (first moving what
    earlier versions left in each namespace's __lance_trash__ into the warehouse's trash). Says what
    it purged, what it kept as not yet due, and what it skipped and why; exit 1 when it skipped any."""
    state = current_state()
    ns = state.namespace()
    identifier = state.identifier(target)
    with working(f"purging {target}", state.as_json) as watch:
        if older_than is not None:
            report = ns.purge_tables(namespace_id=identifier, deleted_before=_cutoff(older_than))
            purged, versions = [state.name(t) for t in report], None
            left = [(state.name(s.id), s.reason, s.due) for s in getattr(report, "skipped", [])]
            kept = [(name, why) for name, why, due in left if not due]
            skipped = [(name, why) for name, why, due in left if due]
        else:
            versions = ns.purge_table(identifier)
            purged, kept = ([target] if versions else []), []
            skipped = _left_in_trash(state, ns, identifier)
    answer: dict[str, Any] = {"purged": purged}
    answer["kept"] = [{"table": t, "reason": why} for t, why in kept]
    answer["skipped"] = [{"table": t, "reason": why} for t, why in skipped]
    if versions is not None:
        answer["soft_deleted_versions"] = versions
    emit({**answer, "elapsed_seconds": watch.seconds}, lambda: _say_purged(target, purged, kept, skipped, versions))
    done(watch, state.as_json)
    if skipped:
        raise SystemExit(EXIT_SKIPPED)  # click's ctx.exit is not an exit under standalone_mode=False


def _left_in_trash(state: CliState, ns: Any, table_id: list[str]) -> list[tuple[str, str]]:
    """A purge of one table leaves its foreign tombstones: each, with why (none, when its namespace
    was dropped and the purge took the last table soft-deleted from it)."""
    from lance_namespace.errors import NamespaceNotFoundError

    try:
        left = ns.list_purgable_tables(table_id[:-1])
    except NamespaceNotFoundError:
        return []
    return [(state.name(t.id), f"foreign tombstone: {t.foreign}") for t in left if t.id == table_id and t.foreign]


def _say_purged(
    target: str, purged: list[str], kept: list[tuple[str, str]], skipped: list[tuple[str, str]], versions: int | None
) -> None:
    for name in purged:
        click.echo(f"purged {name}" + ("" if versions is None else f" ({versions} soft-deleted version(s))"))
    for name, why in kept:
        click.echo(f"kept {name}: {why}")
    for name, why in skipped:
        click.echo(f"skipped {name}: {why}")
    counts = f"{len(purged)} purged, {len(kept)} kept (not due), {len(skipped)} skipped"
    click.echo(counts if purged or kept or skipped else f"nothing to purge in {target}")


@object_command(tables, "purgable", "namespace_id")
@click.option("--older-than", help="only tables soft-deleted this long ago")
def tables_purgable(namespace_id: str, older_than: str | None) -> None:
    """The soft-deleted tables of a namespace."""
    state = current_state()
    found = state.namespace().list_purgable_tables(state.identifier(namespace_id), deleted_before=_cutoff(older_than))
    rows = [(state.name(t.id), _when(t.deleted_at), _left_alone(t)) for t in found]
    emit(
        [
            {"id": t.id, "deleted_at": _when(t.deleted_at) or None, "foreign": t.foreign, "unreadable": t.unreadable}
            for t in found
        ],
        lambda: show_table(("table", "deleted at", "not purged, because"), rows),
    )


def _left_alone(table: Any) -> str:
    """Why a purge leaves a soft-deleted table alone, if it does: foreign (never purged nor brought
    back), or its location unreadable for this client now."""
    if table.foreign:
        return f"foreign, never purged nor restored: {table.foreign}"
    return f"location unreadable now: {table.unreadable}" if table.unreadable else ""


def _when(moment: datetime | None) -> str:
    return "" if moment is None else moment.isoformat()


@object_command(tables, "unregistered", "warehouse")
def tables_unregistered(warehouse: str) -> None:
    """Table data whose entry is gone from the catalog (dropped by an Iceberg engine): register to adopt."""
    state = current_state()
    found = state.namespace().unregistered_locations(warehouse)
    emit(
        [{"location": u.location, "was": u.was} for u in found],
        lambda: show_table(("location", "its entry was"), [(u.location, u.was) for u in found]),
    )
