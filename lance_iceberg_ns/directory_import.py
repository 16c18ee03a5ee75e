"""Bringing the tables of a Lance directory namespace into the catalog, where they already are.

The directory is read with pylance's own ``DirectoryNamespace`` (V1 ``*.lance`` directories and
the V2 ``__manifest`` table, in its compatibility mode), so both layouts are understood exactly as
Lance writes them. Each table with data is registered as a companion table at its existing
location; nothing is copied or moved. A directory table ``[ns..., t]`` becomes
``[warehouse, target ns..., ns..., t]``, its namespaces created as needed.

Re-running is safe: a table already registered at the same location is skipped, one registered
elsewhere under the same name is reported as a conflict and left alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from lance_namespace import (
    CreateNamespaceRequest,
    DescribeTableRequest,
    ListNamespacesRequest,
    ListTablesRequest,
    NamespaceExistsRequest,
    RegisterTableRequest,
)
from lance_namespace.errors import InvalidInputError, NamespaceNotFoundError, TableNotFoundError

from lance_iceberg_ns.datasets import dataset_exists
from lance_iceberg_ns.identifiers import parse_namespace_id, parse_table_id
from lance_iceberg_ns.lifecycle import TRASH_NAMESPACE
from lance_iceberg_ns.locations import normalize_location
from lance_iceberg_ns.namespace import IcebergLanceNamespace

DEREGISTERED_MARKER = ".lance-deregistered"  # a V1 table deregistered from the directory namespace

REGISTERED = "registered"
WOULD_REGISTER = "would register"
ALREADY_REGISTERED = "already registered"
CONFLICT = "conflict"
SKIPPED = "skipped"


@dataclass(frozen=True)
class ImportedTable:
    """What happened to one table of the directory (``reason`` says why for conflicts and skips)."""

    source: list[str]
    target: list[str]
    location: str
    outcome: str
    reason: str = ""


@dataclass
class ImportSummary:
    tables: list[ImportedTable] = field(default_factory=list)

    def count(self, outcome: str) -> int:
        return sum(1 for table in self.tables if table.outcome == outcome)

    @property
    def ok(self) -> bool:
        """True when nothing conflicted."""
        return self.count(CONFLICT) == 0


def _open_directory(root: str, storage_options: Mapping[str, str]) -> object:
    from lance.namespace import DirectoryNamespace

    properties = {"root": root, **{f"storage.{key}": value for key, value in storage_options.items()}}
    return DirectoryNamespace(**properties)


def _walk(directory: object, namespace: list[str]) -> Iterator[list[str]]:
    """Every table id of the directory namespace, depth first (all pages)."""
    token = None
    while True:
        page = directory.list_tables(ListTablesRequest(id=namespace, page_token=token))  # type: ignore[attr-defined]
        yield from ([*namespace, name] for name in page.tables)
        token = page.page_token
        if not token:
            break
    token = None
    while True:
        children = directory.list_namespaces(ListNamespacesRequest(id=namespace, page_token=token))  # type: ignore[attr-defined]
        for child in children.namespaces:
            yield from _walk(directory, [*namespace, child])
        token = children.page_token
        if not token:
            break


def _deregistered_v1_tables(root: str) -> list[tuple[list[str], str]]:
    """V1 tables carrying the deregistration marker (local roots; the directory namespace hides them)."""
    if "://" in root and not root.startswith("file://"):
        return []
    path = root[len("file://") :] if root.startswith("file://") else root
    found = []
    for entry in sorted(os.listdir(path)) if os.path.isdir(path) else []:
        if entry.endswith(".lance") and os.path.exists(os.path.join(path, entry, DEREGISTERED_MARKER)):
            found.append(([entry[: -len(".lance")]], os.path.join(path, entry)))
    return found


def _reserved_reason(source: list[str], target: list[str]) -> str:
    """Why a name cannot be registered in the catalog, or "" when it can."""
    if TRASH_NAMESPACE in source:
        return f"{TRASH_NAMESPACE} is reserved for soft-deleted tables"
    try:
        parse_table_id(target)
    except InvalidInputError as exc:
        return f"not a valid catalog identifier: {exc}"
    return ""


def import_directory(
    ns: IcebergLanceNamespace,
    root: str,
    into: Sequence[str],
    *,
    storage_options: Mapping[str, str] | None = None,
    dry_run: bool = False,
    progress: Callable[[ImportedTable], None] | None = None,
    planned: Callable[[int], None] | None = None,
) -> ImportSummary:
    """Register every Lance table of the directory namespace at ``root`` under ``into``
    (``[warehouse, namespace...]``). ``planned`` hears how many tables were found, ``progress``
    each outcome. Raises NamespaceNotFoundError when ``into`` does not exist."""
    target_namespace = parse_namespace_id(list(into))
    if target_namespace is None or not target_namespace.path:
        raise InvalidInputError("Import into a namespace inside a warehouse: [warehouse, namespace, ...]")
    ns.namespace_exists(NamespaceExistsRequest(id=target_namespace.parts))
    local = root[len("file://") :] if root.startswith("file://") else root
    if "://" not in local and not os.path.isdir(local):
        raise InvalidInputError(f"No directory at {root}")
    options = dict(storage_options or {})
    directory = _open_directory(root, options)
    found = list(_walk(directory, []))
    deregistered = _deregistered_v1_tables(root)
    if planned:
        planned(len(found) + len(deregistered))
    summary = ImportSummary()

    def record(table: ImportedTable) -> None:
        summary.tables.append(table)
        if progress:
            progress(table)

    for source, location in deregistered:
        target = [*target_namespace.parts, *source]
        record(ImportedTable(source, target, location, SKIPPED, "deregistered in the directory namespace"))
    created_namespaces: set[tuple[str, ...]] = set()
    with ns.allowing(root) as importing:  # the source directory is an allowed location for this run
        for source in found:
            target = [*target_namespace.parts, *source]
            location = directory.describe_table(DescribeTableRequest(id=source)).location  # type: ignore[attr-defined]
            record(_import_one(importing, source, target, location, options, dry_run, created_namespaces))
    return summary


def _import_one(
    ns: IcebergLanceNamespace,
    source: list[str],
    target: list[str],
    location: str,
    storage_options: Mapping[str, str],
    dry_run: bool,
    created_namespaces: set[tuple[str, ...]],
) -> ImportedTable:
    reason = _reserved_reason(source, target)
    if reason:
        return ImportedTable(source, target, location, SKIPPED, reason)
    if not dataset_exists(location, dict(storage_options)):
        return ImportedTable(source, target, location, SKIPPED, "declared only: no Lance data yet")
    try:
        existing = ns.describe_table(DescribeTableRequest(id=target)).location or ""
    except (TableNotFoundError, NamespaceNotFoundError):
        existing = None
    except InvalidInputError as exc:  # a plain Iceberg table holds the name
        return ImportedTable(source, target, location, CONFLICT, str(exc))
    if existing is not None:
        if normalize_location(existing) == normalize_location(location):
            return ImportedTable(source, target, location, ALREADY_REGISTERED)
        return ImportedTable(source, target, location, CONFLICT, f"the name is taken by the table at {existing}")
    if dry_run:
        return ImportedTable(source, target, location, WOULD_REGISTER)
    for depth in range(3, len(target)):  # the namespaces between the target namespace and the table
        namespace = tuple(target[:depth])
        if namespace not in created_namespaces:
            ns.create_namespace(CreateNamespaceRequest(id=list(namespace), mode="exist_ok"))
            created_namespaces.add(namespace)
    ns.register_table(RegisterTableRequest(id=target, location=location))
    return ImportedTable(source, target, location, REGISTERED)
