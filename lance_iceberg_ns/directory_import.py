"""Bringing the tables of a Lance directory namespace into the catalog.

The directory is read with pylance's own ``DirectoryNamespace`` (V1 ``*.lance`` directories and
the V2 ``__manifest`` table, in its compatibility mode), so both layouts are understood exactly as
Lance writes them. A directory table ``[ns..., t]`` becomes ``[warehouse, target ns..., ns..., t]``,
its namespaces (the target namespace too) created as needed.

Where its data ends up follows the security model: the bridge reads, writes and deletes only under
``root`` and the ``allowed_locations`` of its configuration. A table already there is registered
where it is, nothing copied. A table anywhere else is copied into the root, to
``{root}/{warehouse}/{ns...}/{t}-{8 hex of its source}.lance``, and the copy registered: the
import never widens what the bridge may touch, for this run or later, and every client with the
same root reads the imported tables. (Recording the source as allowed in catalog properties would
let anyone who can set a namespace property point the bridge at any place its credentials reach.)
To import in place, add the directory to ``allowed_locations`` first, in every client's and the
server's configuration.

Re-running is safe: a table already registered at the same location, or copied before (its copy's
name comes from its source), is skipped; one registered elsewhere under the same name is reported
as a conflict and left alone.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote

import pyarrow.fs as pafs
from lance_namespace import (
    CreateNamespaceRequest,
    DescribeTableRequest,
    ListNamespacesRequest,
    ListTablesRequest,
    RegisterTableRequest,
)
from lance_namespace.errors import (
    InvalidInputError,
    NamespaceNotFoundError,
    PermissionDeniedError,
    TableNotFoundError,
)

from lance_iceberg_ns.datasets import dataset_exists, filesystem_for
from lance_iceberg_ns.identifiers import parse_namespace_id, parse_table_id
from lance_iceberg_ns.lifecycle import TRASH_NAMESPACE
from lance_iceberg_ns.locations import TABLE_DIRECTORY_SUFFIX, is_local, normalize_location
from lance_iceberg_ns.namespace import IcebergLanceNamespace
from lance_iceberg_ns.ownership import MARKER

DEREGISTERED_MARKER = ".lance-deregistered"  # a V1 table deregistered from the directory namespace

REGISTERED = "registered"
COPIED = "copied"
WOULD_REGISTER = "would register"
WOULD_COPY = "would copy"
ALREADY_REGISTERED = "already registered"
CONFLICT = "conflict"
SKIPPED = "skipped"


@dataclass(frozen=True)
class ImportedTable:
    """What happened to one table of the directory (``reason`` says why for conflicts and skips);
    ``copied_to`` is where its copy is, for a table outside the places the bridge may touch."""

    source: list[str]
    target: list[str]
    location: str
    outcome: str
    reason: str = ""
    copied_to: str = ""


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
    (``[warehouse, namespace...]``, created if missing), in place or as a copy in the bridge's root
    (see the module docstring). ``storage_options`` reach the directory; ``planned`` hears how many
    tables were found, ``progress`` each outcome."""
    target_namespace = parse_namespace_id(list(into))
    if target_namespace is None or not target_namespace.path:
        raise InvalidInputError("Import into a namespace inside a warehouse: [warehouse, namespace, ...]")
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
    namespaces = _Namespaces(ns, dry_run)
    namespaces.ensure(target_namespace.parts)
    for source in found:
        target = [*target_namespace.parts, *source]
        location = directory.describe_table(DescribeTableRequest(id=source)).location  # type: ignore[attr-defined]
        record(_import_one(ns, source, target, location, options, namespaces))
    return summary


@dataclass
class _Namespaces:
    """Creates the namespaces tables are imported into, each once (none on a dry run)."""

    ns: IcebergLanceNamespace
    dry_run: bool
    made: set[tuple[str, ...]] = field(default_factory=set)

    def ensure(self, namespace: Sequence[str]) -> None:
        for depth in range(2, len(namespace) + 1):  # [warehouse, ns] and each one beneath
            path = tuple(namespace[:depth])
            if not self.dry_run and path not in self.made:
                self.ns.create_namespace(CreateNamespaceRequest(id=list(path), mode="exist_ok"))
            self.made.add(path)


def copy_location(ns: IcebergLanceNamespace, target: Sequence[str], source_location: str) -> str:
    """Where the copy of the table at ``source_location`` imported as ``target`` lives: in the root,
    named after its source, so that a re-run finds it."""
    settings = ns.settings
    *namespace, name = target
    digest = hashlib.sha256(normalize_location(source_location).encode()).hexdigest()[:8]
    segments = [*namespace, f"{name}-{digest}{TABLE_DIRECTORY_SUFFIX}"]
    if not is_local(settings.root):
        segments = [quote(segment, safe="") for segment in segments]
    return ns.placement.locations.confine_requested("/".join([settings.root.rstrip("/"), *segments]))


def _reachable(ns: IcebergLanceNamespace, location: str) -> bool:
    """True when the bridge may touch ``location`` as configured (the root, the allowed locations)."""
    try:
        ns.placement.locations.confine_requested(location)
        return True
    except PermissionDeniedError:
        return False


def copy_dataset(
    source: str, source_options: Mapping[str, str], target: str, target_options: Mapping[str, str]
) -> None:
    """Copy the files of the dataset at ``source`` to ``target``: not its ownership or
    deregistration marker, and on a local disk not a symbolic link (nor what lies behind one)."""
    source_fs, source_path = filesystem_for(source, source_options)
    target_fs, target_path = filesystem_for(target, target_options)
    source_path = source_path.rstrip("/")
    for info in source_fs.get_file_info(pafs.FileSelector(source_path, recursive=True)):
        relative = info.path[len(source_path) + 1 :]
        if info.type != pafs.FileType.File or relative in (MARKER, DEREGISTERED_MARKER):
            continue
        if is_local(source) and _behind_link(source_path, relative):
            continue
        destination = f"{target_path.rstrip('/')}/{relative}"
        target_fs.create_dir(destination.rsplit("/", 1)[0], recursive=True)
        pafs.copy_files(info.path, destination, source_filesystem=source_fs, destination_filesystem=target_fs)


def _behind_link(top: str, relative: str) -> bool:
    parts = relative.split("/")
    return any(os.path.islink(os.path.join(top, *parts[: depth + 1])) for depth in range(len(parts)))


def _import_one(
    ns: IcebergLanceNamespace,
    source: list[str],
    target: list[str],
    location: str,
    storage_options: Mapping[str, str],
    namespaces: _Namespaces,
) -> ImportedTable:
    reason = _reserved_reason(source, target)
    if reason:
        return ImportedTable(source, target, location, SKIPPED, reason)
    if not dataset_exists(location, dict(storage_options)):
        return ImportedTable(source, target, location, SKIPPED, "declared only: no Lance data yet")
    in_place = _reachable(ns, location)
    copy = "" if in_place else copy_location(ns, target, location)
    try:
        existing = normalize_location(ns.describe_table(DescribeTableRequest(id=target)).location or "")
    except (TableNotFoundError, NamespaceNotFoundError):
        existing = None
    except InvalidInputError as exc:  # a plain Iceberg table holds the name
        return ImportedTable(source, target, location, CONFLICT, str(exc))
    if existing is not None:
        return _already(source, target, location, copy, existing)
    if namespaces.dry_run:
        return ImportedTable(source, target, location, WOULD_REGISTER if in_place else WOULD_COPY, copied_to=copy)
    namespaces.ensure(target[:-1])
    if not in_place:
        copy_dataset(location, storage_options, copy, ns.settings.storage_options)
    try:
        ns.register_table(RegisterTableRequest(id=target, location=copy or location))
    except (PermissionDeniedError, InvalidInputError) as exc:  # the place is another table's, say
        return ImportedTable(source, target, location, CONFLICT, str(exc), copy)
    return ImportedTable(source, target, location, REGISTERED if in_place else COPIED, copied_to=copy)


def _already(source: list[str], target: list[str], location: str, copy: str, existing: str) -> ImportedTable:
    """The outcome for a target name that is taken: by this table (imported before) or another."""
    if existing == normalize_location(copy or location):
        return ImportedTable(source, target, location, ALREADY_REGISTERED, copied_to=copy)
    if existing == normalize_location(location):
        return ImportedTable(source, target, location, CONFLICT,
                             "registered at its source, outside the storage root and the allowed locations, by an "
                             "earlier import: add the directory to allowed_locations, or deregister the table and "
                             "import again to copy it into the root", copy)  # fmt: skip
    return ImportedTable(source, target, location, CONFLICT, f"the name is taken by the table at {existing}", copy)
