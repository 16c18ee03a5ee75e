"""The namespaces and tables groups' catalog commands: list, create, describe, drop, versions, soft delete."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import click

from lance_iceberg_ns.cli.base import _all_pages, _command, _emit, _fields, _state, _table, namespaces, tables


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
    rows = [(state.name(t.id), _when(t.deleted_at), t.foreign or "") for t in found]
    _emit(
        [{"id": t.id, "deleted_at": _when(t.deleted_at) or None, "foreign": t.foreign} for t in found],
        lambda: _table(("table", "deleted at", "foreign: never purged nor restored, because"), rows),
    )


def _when(moment: datetime | None) -> str:
    return "" if moment is None else moment.isoformat()


@_command(tables, "unregistered", "warehouse")
def tables_unregistered(warehouse: str) -> None:
    """Table data whose entry is gone from the catalog (dropped by an Iceberg engine): register to adopt."""
    state = _state()
    found = state.namespace().unregistered_locations(warehouse)
    _emit(
        [{"location": u.location, "was": u.was} for u in found],
        lambda: _table(("location", "its entry was"), [(u.location, u.was) for u in found]),
    )
