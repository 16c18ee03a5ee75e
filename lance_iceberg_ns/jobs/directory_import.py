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

A copy's place is predictable, so the import claims it the way the bridge claims a new table's
place before it writes anything there (its ownership marker, created only if there is none; the
place must hold nothing), copies the files into it, the manifests last, and only then makes the
target table's entry: a reader never sees a table half copied. A failure removes exactly the
files this import wrote, and the claim. A place that another client declared or filled first is a
conflict, and nothing is copied.

A table directory that is a symbolic link, or that lies (once links are resolved) outside the
directory being imported, is skipped: an untrusted directory must not name another table's files.
Inside a table, links are not followed either, not even one swapped in while the copy runs. A table
whose manifest names files under another root (a shallow clone of a dataset) is skipped too, before
anything is claimed or copied: its import would point at files it does not own, and a deep copy
would copy whatever the manifest names, anywhere the import's credentials reach. The reason says
how to make a deep copy first.

Re-running is safe: a table already registered at the same location, or copied before (its copy's
name comes from its source), is skipped; one registered elsewhere under the same name is reported
as a conflict and left alone.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote

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
    TableAlreadyExistsError,
    TableNotFoundError,
)

from lance_iceberg_ns.catalog.companions import stored_properties
from lance_iceberg_ns.data.datasets import dataset_exists
from lance_iceberg_ns.errors.translation import translated_errors
from lance_iceberg_ns.identifiers import TRASH_NAMESPACE, parse_namespace_id, parse_table_id
from lance_iceberg_ns.namespace import IcebergLanceNamespace
from lance_iceberg_ns.storage import files, trees
from lance_iceberg_ns.storage.files import ICEBERG_METADATA_DIRECTORY
from lance_iceberg_ns.storage.locations import (
    TABLE_DIRECTORY_SUFFIX,
    encoded_segment,
    is_local,
    local_path,
    normalize_location,
)
from lance_iceberg_ns.storage.ownership import MARKER
from lance_iceberg_ns.versions.bases import not_self_contained

logger = logging.getLogger(__name__)

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


def _deregistered_v1_tables(root: str, storage_options: Mapping[str, str]) -> list[tuple[list[str], str]]:
    """V1 tables carrying the deregistration marker (the directory namespace hides them): one
    listing of the root, and a look for the marker in each table directory."""
    found = []
    for entry in trees.subdirectories(root, storage_options):
        if entry.endswith(TABLE_DIRECTORY_SUFFIX):
            location = f"{root.rstrip('/')}/{entry if is_local(root) else encoded_segment(entry)}"
            if files.stat_files(location, [DEREGISTERED_MARKER], storage_options)[0] is not None:
                found.append(([entry[: -len(TABLE_DIRECTORY_SUFFIX)]], location))
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
    deregistered = _deregistered_v1_tables(root, options)
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
        outside = _outside_directory(root, location)
        if outside:
            record(ImportedTable(source, target, location, SKIPPED, outside))
            continue
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
    root = ns.settings.root
    if root is None:
        raise InvalidInputError("An import copies tables into the storage root: give root (this bridge has none)")
    *namespace, name = target
    digest = hashlib.sha256(normalize_location(source_location).encode()).hexdigest()[:8]
    segments = [*namespace, f"{name}-{digest}{TABLE_DIRECTORY_SUFFIX}"]
    if not is_local(root):
        segments = [quote(segment, safe="") for segment in segments]
    return ns.placement.locations.confine_requested("/".join([root.rstrip("/"), *segments]))


def _reachable(ns: IcebergLanceNamespace, location: str) -> bool:
    """True when the bridge may touch ``location`` as configured (the root, the allowed locations)."""
    try:
        ns.placement.locations.confine_requested(location)
        return True
    except PermissionDeniedError:
        return False


def copy_dataset(
    source: str,
    source_options: Mapping[str, str],
    target: str,
    target_options: Mapping[str, str],
    written: list[str] | None = None,
) -> list[str]:
    """Copy the files of the dataset at ``source`` to ``target``, a place that holds nothing but
    what claiming it wrote (an ownership marker, the catalog's metadata); InvalidInputError
    otherwise: nothing is copied over another's files. Not the source's ownership or
    deregistration marker nor catalog metadata, and on a local disk nothing that is a symbolic
    link, lies behind one or resolves outside ``source``. The manifests (``_versions/``) come
    last, so that a copy cut short never reads as a dataset. Each file written is appended to
    ``written`` (its location) as it is, so a caller can take back a copy that failed half way;
    returns it."""
    written = [] if written is None else written
    held = files.list_files(target, "", target_options, recursive=True)
    if any(found.path.split("/")[0] not in (MARKER, ICEBERG_METADATA_DIRECTORY) for found in held):
        raise InvalidInputError(f"{target} already holds files: a copy is made only into an empty place")
    listed = files.list_files(source, "", source_options, recursive=True)
    copied = [found.path for found in listed if found.path.split("/")[0] not in _NOT_COPIED]
    copied.sort(key=lambda path: path.split("/")[0] == files.VERSIONS_DIRECTORY)
    for relative in copied:
        _copy_file(
            source, source_options, relative, target, target_options, f"{target.rstrip('/')}/{relative}", written
        )
    return written


def _copy_file(
    source: str,
    source_options: Mapping[str, str],
    relative: str,
    target: str,
    target_options: Mapping[str, str],
    destination: str,
    written: list[str],
) -> None:
    """Copy ``source``/``relative`` to ``destination`` (the same path under ``target``; appended
    to ``written`` before it is created, so that a copy failing part way through the file is
    taken back too); see ``_copy_local_file`` for what a local copy leaves out."""
    if is_local(source):
        _copy_local_file(local_path(source), relative, target, target_options, destination, written)
        return
    written.append(destination)
    files.copy_file(source, relative, source_options, target, target_options)


def _copy_local_file(
    top: str, relative: str, target: str, target_options: Mapping[str, str], destination: str, written: list[str]
) -> None:
    """Copy a file of a local table, unless it is behind a symbolic link, resolves outside
    ``top`` or is no longer a regular file: checked, then opened one path component at a time
    following no link (and without waiting on a pipe), so that a link, pipe or directory swapped
    in after the check is left out too."""
    if _behind_link(top, relative):
        return
    try:
        source = _open_without_links(top, relative)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a component is a symbolic link now
            return
        raise
    try:
        regular = stat.S_ISREG(os.fstat(source).st_mode)
    except OSError:
        os.close(source)
        raise
    if not regular:  # a pipe or a directory now
        os.close(source)
        return
    os.set_blocking(source, True)
    with os.fdopen(source, "rb") as reading:
        written.append(destination)
        files.write_file(target, relative, reading, target_options)


def _open_without_links(top: str, relative: str) -> int:
    """A file descriptor for reading ``top``/``relative``, each component below ``top`` opened
    relative to its parent's descriptor with O_NOFOLLOW (OSError ELOOP for a link), the last
    without blocking (a pipe put there does not wait for a writer)."""
    *directories, name = relative.split("/")
    parent = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for directory in directories:
            child = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
            os.close(parent)
            parent = child
        return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=parent)
    finally:
        os.close(parent)


_NOT_COPIED = (MARKER, DEREGISTERED_MARKER, ICEBERG_METADATA_DIRECTORY)


def _behind_link(top: str, relative: str) -> bool:
    """Whether ``top``/``relative`` is reached through a symbolic link (``top`` itself included)
    or resolves outside ``top``."""
    parts = relative.split("/")
    if any(os.path.islink(os.path.join(top, *parts[:depth])) for depth in range(len(parts) + 1)):
        return True
    return not _inside(os.path.join(top, relative), top)


def _inside(path: str, top: str) -> bool:
    real_top = os.path.realpath(top)
    return os.path.realpath(path).startswith(real_top.rstrip(os.sep) + os.sep)


def _outside_directory(root: str, location: str) -> str:
    """Why a table the directory names must not be imported from a local directory (a symbolic
    link, or a place outside the directory once links are resolved), or "" when it may."""
    top, path = normalize_location(root), normalize_location(location)  # file:// URIs as paths
    if not is_local(top) or not is_local(path):
        return ""
    if os.path.islink(path):
        return "the table directory is a symbolic link: only a directory's own tables are imported"
    if not _inside(path, top):
        return "the table lies outside the directory being imported (once links are resolved)"
    return ""


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
    reason = not_self_contained(location, storage_options)
    if reason:
        return ImportedTable(source, target, location, SKIPPED, reason)
    in_place = _reachable(ns, location)
    copy = "" if in_place else copy_location(ns, target, location)
    try:
        existing = normalize_location(ns.describe_table(DescribeTableRequest(id=target)).location or "")
    except (TableNotFoundError, NamespaceNotFoundError):
        existing = None
    except InvalidInputError as exc:  # a plain Iceberg table holds the name
        return ImportedTable(source, target, location, CONFLICT, str(exc))
    if existing is not None:
        return _already(source, target, location, copy, existing, ns.settings.storage_options)
    if namespaces.dry_run:
        return ImportedTable(source, target, location, WOULD_REGISTER if in_place else WOULD_COPY, copied_to=copy)
    namespaces.ensure(target[:-1])
    if not in_place:
        return _copy_in(ns, source, target, location, copy, storage_options)
    try:
        ns.register_table(RegisterTableRequest(id=target, location=location))
    except (PermissionDeniedError, InvalidInputError, TableAlreadyExistsError) as exc:  # another table's place
        return ImportedTable(source, target, location, CONFLICT, str(exc))
    return ImportedTable(source, target, location, REGISTERED)


def _copy_in(
    ns: IcebergLanceNamespace,
    source: list[str],
    target: list[str],
    location: str,
    copy: str,
    storage_options: Mapping[str, str],
) -> ImportedTable:
    """Claim the copy's place for the target table, copy the files into it, and only then make
    the entry (publish last: no reader ever sees a table half copied). A place another entry
    holds, or that holds anything, is a conflict, with nothing copied. A failure takes back what
    the copy wrote (while the place is still its own), and the claim."""
    table = parse_table_id(target)
    written: list[str] = []
    failed: list[BaseException] = []

    def fill() -> None:
        try:
            copy_dataset(location, storage_options, copy, ns.settings.storage_options, written)
        except BaseException as exc:
            failed.append(exc)
            raise

    try:
        with translated_errors(f"import {table}", ns.settings.redact):
            ns.placement.claim(
                table,
                ns.placement.free_location(copy),
                stored_properties(None),
                fill=fill,
                unfill=lambda: _take_back(copy, written, ns.settings.storage_options),
            )
    except (PermissionDeniedError, InvalidInputError, TableAlreadyExistsError) as exc:
        if failed:
            raise failed[0] from None
        return ImportedTable(source, target, location, CONFLICT, str(exc), copy)
    except BaseException:
        if failed:
            raise failed[0] from None
        raise
    return ImportedTable(source, target, location, COPIED, copied_to=copy)


def _take_back(copy: str, written: list[str], storage_options: Mapping[str, str]) -> None:
    """Undo a copy that failed, its place still claimed for it: the files it wrote, and the
    directories left empty (the claim is taken back by ``claim``). Anything else at the place stays."""
    if not written:
        return
    try:
        files.delete_files(copy, [path[len(copy.rstrip("/")) + 1 :] for path in written], storage_options)
    except OSError:  # the copy's own error is the one to raise
        logger.warning("The failed copy at %s was not all taken back", copy, exc_info=True)
    if is_local(copy):
        for folder, _subfolders, _files in sorted(os.walk(local_path(copy)), reverse=True):
            with contextlib.suppress(OSError):  # only when empty
                os.rmdir(folder)


def _already(
    source: list[str], target: list[str], location: str, copy: str, existing: str, options: Mapping[str, str]
) -> ImportedTable:
    """The outcome for a target name that is taken: by this table (imported before) or another."""
    if existing == normalize_location(copy or location):
        if copy and not dataset_exists(copy, dict(options)):
            why = f"the name is taken by a table declared at {copy}, which holds no copy"
            return ImportedTable(source, target, location, CONFLICT, why, copy)
        return ImportedTable(source, target, location, ALREADY_REGISTERED, copied_to=copy)
    if existing == normalize_location(location):
        return ImportedTable(source, target, location, CONFLICT,
                             "registered at its source, outside the storage root and the allowed locations, by an "
                             "earlier import: add the directory to allowed_locations, or deregister the table and "
                             "import again to copy it into the root", copy)  # fmt: skip
    return ImportedTable(source, target, location, CONFLICT, f"the name is taken by the table at {existing}", copy)
