"""Lance's manifests under a table's ``_versions/``: the one module that names them, looks for
them, lists, moves and deletes them. The versions of a table whose versions are its own are read
from here and from the dataset itself (the catalog keeps no copy).

Each version is a manifest under ``_versions/``: ``<n>.manifest`` (naming scheme V1) or
``<u64::MAX - n>.manifest`` zero-padded to 20 digits (V2, what pylance writes now, so that an
object store lists the newest first). Listing reads the directory once for paths and sizes and the
dataset once for the commit times and summaries.

pylance's namespace-backed commit stages a manifest under its final name followed by ``-<uuid>``
(``_versions/<n>.manifest-<uuid>``) and leaves it to the namespace to give it its final name once
the catalog has committed it, as the reference does (``finalize``). The final name is taken only
when it is free: a writer by location may have committed the same version number in the moment
between, and its manifest is never replaced.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import unquote

import lance
from lance_namespace import TableVersion
from lance_namespace.errors import (
    ConcurrentModificationError,
    InvalidInputError,
    LanceNamespaceError,
    ServiceUnavailableError,
    TableVersionNotFoundError,
)

from lance_iceberg_ns.data.datasets import check_own_version
from lance_iceberg_ns.paging import page_of
from lance_iceberg_ns.storage import files
from lance_iceberg_ns.storage.files import VERSIONS_DIRECTORY, StoredFile
from lance_iceberg_ns.storage.locations import normalize_location
from lance_iceberg_ns.versions.bases import MAX_MANIFEST_BYTES, refuse_foreign_manifest
from lance_iceberg_ns.versions.refusals import FinalNameTaken, FinalNameUnmoved

_U64_MAX = 2**64 - 1
_MANIFEST = re.compile(r"^(\d+)\.manifest$")  # staging copies (``.manifest-<uuid>``) do not match
# A staged manifest, as pylance names one: its final name, ``-``, a UUID as Rust's ``uuid`` spells it.
_STAGED = re.compile(r"^(?P<final>\d+\.manifest)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
# A copy under way: pylance's (``<n>.manifest#<k>``), or this module's (``files.copy_unless_taken``).
_COPY_IN_PROGRESS = re.compile(r"^\d+\.manifest(#\d+|\.[0-9a-f]{32}\.copying)$")
_VERSION_HINT = "latest_version_hint.json"  # pylance's, beside the manifests
# A staged manifest whose final name holds another manifest is contested for this long after it
# was staged: its writer takes the catalog's commit back, or finds it cannot, within its request.
CONTESTED_FOR_SECONDS = 60.0
MOVE_ATTEMPTS = 3  # a store's passing refusal of a move into place is tried again


# --- names ---------------------------------------------------------------------------------------


def version_of_manifest(name: str) -> int | None:
    """The version a manifest file name stands for, in either naming scheme; None for other files."""
    match = _MANIFEST.match(name)
    if match is None:
        return None
    number = int(match.group(1))
    return _U64_MAX - number if len(match.group(1)) == 20 else number


def manifest_name(version: int, v2: bool = True) -> str:
    """The final manifest file name of a version in naming scheme V2 (or V1)."""
    return f"{_U64_MAX - version:020d}.manifest" if v2 else f"{version}.manifest"


def manifest_directory(location: str) -> str:
    """The table's ``_versions/`` in the form pylance names manifests (the object store's path:
    without the scheme and bucket, or the leading slash of a local path)."""
    path = location.split("://", 1)[1].partition("/")[2] if "://" in location else location
    return f"{unquote(path).strip('/')}/{VERSIONS_DIRECTORY}"


def is_staged(manifest_path: str) -> bool:
    """Whether a manifest path names a staged manifest (``<n>.manifest-<uuid>``)."""
    return _STAGED.match(manifest_path.rsplit("/", 1)[-1]) is not None


def final_manifest_name(manifest_path: str) -> str:
    """The final file name of a (possibly staged) manifest path."""
    name = manifest_path.rsplit("/", 1)[-1]
    match = _STAGED.match(name)
    return match.group("final") if match else name


def names_a_manifest(manifest_path: str) -> bool:
    """Whether a path's file name is a manifest's, final (``….manifest``) or staged."""
    name = manifest_path.rsplit("/", 1)[-1]
    return name.endswith(".manifest") or is_staged(name)


def _in_versions(name: str) -> str:
    """The path of the file ``name`` of ``_versions/``, relative to the table's location."""
    return f"{VERSIONS_DIRECTORY}/{name}"


# --- a new version's manifest ----------------------------------------------------------------------


@dataclass(frozen=True)
class OwnManifest:
    """A new version's manifest, checked to be the table's own."""

    path: str  # what the catalog records: in the table's own ``_versions/``, as pylance names it
    final_exists: bool  # a staged manifest whose final one is already there (the version was committed)


def own_manifest(location: str, storage_options: Mapping[str, str], version: int, manifest_path: str) -> OwnManifest:
    """The manifest a new ``version`` of the table at ``location`` records, from the path a client
    gave: it must name a manifest of that version in the table's own ``_versions/``, staged as
    pylance stages it (read before the commit: it must name only the table's own files, or it is
    discarded), or final (a version written by location, being adopted: it must open and name only
    the table's own files). Anything else is InvalidInputError, so that a version never points at
    another table's manifest or data, or at no manifest at all. One look (both names at once), and
    one read of a staged manifest."""
    directory, _, name = str(manifest_path).rpartition("/")
    staged = _STAGED.match(name)
    final = staged.group("final") if staged else name
    if version_of_manifest(final) != version:
        raise InvalidInputError(
            f"manifest_path must name the staged manifest of version {version} in the table's _versions/, "
            f"not {name[:100]!r}"
        )
    if not is_versions_directory_of(directory, location):
        raise InvalidInputError(f"manifest_path must be in the table's own _versions/ ({manifest_directory(location)})")
    names = [name, final] if staged else [name]
    found = files.stat_files(location, [_in_versions(each) for each in names], storage_options)
    if found[0] is None:
        raise InvalidInputError(f"No manifest {name} in the table's _versions/")
    if not staged:
        check_own_version(location, storage_options, version)
    else:
        _check_staged(location, storage_options, version, name, found[0].size)
    return OwnManifest(f"{manifest_directory(location)}/{name}", bool(staged) and found[1] is not None)


def _check_staged(location: str, storage_options: Mapping[str, str], version: int, name: str, size: int) -> None:
    """Read the staged manifest ``name`` (``size`` bytes) and refuse it, discarding it, unless it
    names only the table's own files (``bases.refuse_foreign_manifest``): one read, none when too big."""
    try:
        if size > MAX_MANIFEST_BYTES:
            raise InvalidInputError(f"The staged manifest of version {version} is over {MAX_MANIFEST_BYTES} bytes")
        try:
            data = files.read_file(location, _in_versions(name), storage_options)
        except (files.NotOpened, IsADirectoryError):  # a link or a directory put in its place meanwhile
            data = None
        if data is None:
            raise InvalidInputError(f"No manifest {name} in the table's _versions/")
        refuse_foreign_manifest(location, storage_options, version, data)
    except InvalidInputError:  # refused for good: it must not pile up
        discard_staged(location, storage_options, name)
        raise


def is_versions_directory_of(directory: str, location: str) -> bool:
    """Whether ``directory`` (as a client spells it: an object store's path, an absolute local
    path or a URI) is the ``_versions/`` of the table at ``location`` (normalized)."""
    own = f"{normalize_location(location)}/{VERSIONS_DIRECTORY}"
    if "://" in directory:
        spelled = directory
    elif "://" in location:
        spelled = f"{location.split('://', 1)[0]}://{location.split('://', 1)[1].partition('/')[0]}/{directory}"
    else:
        spelled = "/" + directory.lstrip("/")
    try:
        candidate = normalize_location(spelled)
    except LanceNamespaceError:
        return False
    return candidate == own or ("://" in own and unquote(candidate) == unquote(own))


# --- looks ------------------------------------------------------------------------------------------


def final_manifests(location: str, storage_options: Mapping[str, str]) -> dict[int, StoredFile]:
    """The final manifests in ``_versions/``, by version (one listing of ``_versions/``)."""
    found = {}
    for manifest in files.list_files(location, VERSIONS_DIRECTORY, storage_options):
        version = version_of_manifest(manifest.name)
        if version is not None:
            found[version] = manifest
    return found


def finalized_names(location: str, storage_options: Mapping[str, str], recorded: Sequence[str]) -> set[str]:
    """Which of the ``recorded`` manifest paths have been finalized (their final names): a look at
    each for a few, one listing of ``_versions/`` for more."""
    names = [final_manifest_name(path) for path in recorded]
    if len(names) <= 4:
        looked = files.stat_files(location, [_in_versions(name) for name in names], storage_options)
        return {name for name, found in zip(names, looked, strict=True) if found is not None}
    return {found.name for found in files.list_files(location, VERSIONS_DIRECTORY, storage_options)}


def version_present(location: str, storage_options: Mapping[str, str], version: int, staged: str = "") -> bool:
    """Whether a final manifest of ``version`` is in ``_versions/``, in either naming scheme (a
    manifest planted under the other scheme's name must not pass for none), or the manifest
    ``staged`` (a path) its writer staged: one look for all."""
    names = [manifest_name(version), manifest_name(version, v2=False)]
    if staged:
        names.append(staged.rsplit("/", 1)[-1])
    looked = files.stat_files(location, [_in_versions(name) for name in names], storage_options)
    return any(found is not None for found in looked)


def leftover_manifests(location: str, storage_options: Mapping[str, str]) -> list[StoredFile]:
    """Manifest copies under ``_versions/`` that nothing reads: staged manifests whose final copy
    exists (pylance keeps them when the catalog manages the versions), and the temporary files of
    interrupted copies (``<name>.manifest#<n>``, ``<name>.manifest.<hex>.copying``); paths relative
    to ``_versions/``. One listing."""
    listed = files.list_files(location, VERSIONS_DIRECTORY, storage_options)
    names = {found.name for found in listed}
    leftovers = []
    for found in listed:
        final = final_manifest_name(found.name)
        if (final != found.name and final in names) or _COPY_IN_PROGRESS.match(found.name):
            leftovers.append(found)
    return leftovers


# --- versions read from the dataset itself -------------------------------------------------------------


def listed_versions(location: str, storage_options: Mapping[str, str], below: int) -> list[TableVersion]:
    """The versions before ``below`` with a final manifest in ``_versions/`` (one listing, keyed
    by the manifests' names; none is read, so a stray file under another version's name does not
    stand in the way), oldest first, each with its file's size and time, as the reference lists the
    versions of a table whose versions are its own."""
    found = final_manifests(location, storage_options)
    return [
        TableVersion(
            version=version,
            manifest_path=f"{manifest_directory(location)}/{manifest.name}",
            manifest_size=manifest.size,
            timestamp_millis=int(manifest.modified * 1000),
            metadata={},
        )
        for version, manifest in sorted(found.items())
        if version < below
    ]


def one_version(found: list[TableVersion], version: int) -> TableVersion:
    """The one of ``found`` that is ``version``; TableVersionNotFoundError when none is."""
    for candidate in found:
        if candidate.version == version:
            return candidate
    raise TableVersionNotFoundError(f"Version {version} not found")


def _millis(timestamp: datetime | int) -> int:
    """pylance gives commit times as naive local datetimes (or, raw, nanoseconds)."""
    return int(timestamp.timestamp() * 1000) if isinstance(timestamp, datetime) else int(timestamp) // 1_000_000


def latest_written_at(dataset: lance.LanceDataset) -> float:
    """When the dataset's latest version was committed, in seconds since the epoch."""
    return _millis(dataset.versions()[-1]["timestamp"]) / 1000


def table_versions(
    dataset: lance.LanceDataset, location: str, storage_options: Mapping[str, str]
) -> list[TableVersion]:
    """Every version of ``dataset`` (opened at ``location``), oldest first."""
    manifests = final_manifests(location, storage_options)
    versions = []
    for entry in dataset.versions():
        number = int(entry["version"])
        manifest = manifests.get(number)
        versions.append(
            TableVersion(
                version=number,
                manifest_path=_in_versions(manifest.name) if manifest else "",
                manifest_size=manifest.size if manifest else None,
                timestamp_millis=_millis(entry["timestamp"]),
                metadata={str(k): str(v) for k, v in (entry.get("metadata") or {}).items()},
            )
        )
    return versions


def page_of_versions(
    versions: list[TableVersion], descending: bool, page_token: str | None, limit: int | None
) -> tuple[list[TableVersion], str | None]:
    """One page of versions in the wanted order, after ``page_token`` (the last version number of
    the previous page), and the token for the next page (None when nothing is left). ``limit`` is
    bounded by the caller (``limits.check_page_limit``)."""
    last = None
    if page_token:
        try:
            last = int(page_token)
        except ValueError:
            raise InvalidInputError(f"Not a version page token: {page_token!r}") from None
    page, token = page_of(versions, lambda version: version.version, last, limit, descending)
    return page, None if token is None else str(token)


def describe_version(
    dataset: lance.LanceDataset, location: str, storage_options: Mapping[str, str], version: int | None
) -> TableVersion:
    """One version of the dataset (the latest when None); TableVersionNotFoundError when it has no
    such version."""
    found = table_versions(dataset, location, storage_options)
    for candidate in found:
        if candidate.version == version or (version is None and candidate is found[-1]):
            return candidate
    raise TableVersionNotFoundError(f"Version {version} not found for the dataset at {location}")


# --- changes ----------------------------------------------------------------------------------------


def finalize(location: str, storage_options: Mapping[str, str], version: TableVersion) -> TableVersion:
    """After the catalog committed ``version``: its manifest under its final name, the staged copy
    gone, and the answer naming the final path. pylance's namespace-backed commit never copies the
    manifest itself: it expects the namespace to, as the reference does; otherwise a reader by
    location sees the version before. A final name that already holds the same manifest (a reader
    through the namespace moved it into place first, ``settle``) is this version's. Raises, having
    moved nothing: FinalNameTaken when a writer by location committed the version number since the
    check before the commit (its manifest is never replaced); FinalNameUnmoved when the store
    refuses the move, tried ``MOVE_ATTEMPTS`` times (no one may be handed the staged path instead:
    pylance would copy it into place over whatever is there)."""
    name = version.manifest_path.rsplit("/", 1)[-1]
    if not is_staged(name):
        return version
    final = final_manifest_name(name)
    staged, taken = _in_versions(name), _in_versions(final)
    for attempt in range(MOVE_ATTEMPTS):
        try:  # one step: a reader never sees a final manifest half written, a writer's is never replaced
            if not files.move_unless_taken(location, staged, taken, storage_options):
                if not files.same_contents(location, staged, taken, storage_options):
                    raise FinalNameTaken(final)
                files.delete_files(location, [staged], storage_options)
            break
        except OSError as exc:
            if attempt == MOVE_ATTEMPTS - 1:
                raise FinalNameUnmoved(str(exc)[:200]) from None
    final_path = f"{version.manifest_path[: -len(name)]}{final}"
    return version.model_copy(update={"manifest_path": final_path, "e_tag": None})


def final_name_free(location: str, storage_options: Mapping[str, str], version: TableVersion) -> bool:
    """Whether ``finalize`` will find the final name of ``version``'s staged manifest free (or
    holding the same manifest): one look, before an atomic batch moves any table's manifest."""
    name = version.manifest_path.rsplit("/", 1)[-1]
    if not is_staged(name):
        return True
    staged, final = _in_versions(name), _in_versions(final_manifest_name(name))
    try:
        taken = files.stat_files(location, [final], storage_options)[0]
        return taken is None or files.same_contents(location, staged, final, storage_options)
    except OSError:
        return True  # finalize finds out


def settle(
    location: str, storage_options: Mapping[str, str], recorded: str, latest: bool = False, young: bool = True
) -> str | None:
    """Before a reader is told of the version the catalog recorded at ``recorded`` (a staged
    manifest path, as a rule): its manifest under its final name, copied there now, only where the
    name is free, when its writer has not moved it yet. A reader is never handed a staged path that
    could be moved: pylance copies a staged manifest it is handed into place over whatever holds the
    final name, which may be the version a writer by location committed in the moment after the
    catalog's commit. The file name to answer: the final one once it holds the version; None when
    neither is there (its commit was taken back, or a writer by location removed it); the staged one
    while the store refuses the copy, for an earlier version, whose number no writer can take any
    more; for the ``latest``, ServiceUnavailableError then.

    ConcurrentModificationError, with nothing changed, while the final name holds another manifest
    and the staged one is still there: a writer by location committed the version number after the
    catalog did, and the catalog's commit is being taken back (``Versions._taken_back``); a minute
    on, the writer has taken it back or found it cannot, and the final manifest answers. A version
    recorded longer ago than that (not ``young``) costs only the look at its final name."""
    name = recorded.rsplit("/", 1)[-1]
    final_name = final_manifest_name(name)
    if not is_staged(name):
        return name if files.stat_files(location, [_in_versions(name)], storage_options)[0] else None
    staged, final = _in_versions(name), _in_versions(final_name)
    if not young and files.stat_files(location, [final], storage_options)[0] is not None:
        return final_name
    for _ in range(MOVE_ATTEMPTS):  # another look when the writer moved it, or a writer took the name, meanwhile
        found_staged, found_final = files.stat_files(location, [staged, final], storage_options)
        if found_final is not None:
            if found_staged is not None and _contested(location, storage_options, found_staged, found_final):
                raise ConcurrentModificationError(
                    f"Version {version_of_manifest(final_name)} is being committed by a writer by location and "
                    "through the catalog at once: retry"
                )
            return final_name
        if found_staged is None:
            return None
        try:
            if files.copy_unless_taken(location, staged, final, storage_options):
                return final_name
        except OSError:  # the store refused the copy, or the staged manifest went meanwhile
            pass
    if latest:
        raise ServiceUnavailableError(
            f"The manifest of version {version_of_manifest(final_name)} could not be moved into place: retry"
        )
    return name


def _contested(location: str, storage_options: Mapping[str, str], staged: StoredFile, final: StoredFile) -> bool:
    """Whether a final manifest holds another manifest than the ``staged`` one, staged under a
    minute ago (a staged one its writer deleted as it was read, once moved into place, is not)."""
    if time.time() - staged.modified >= CONTESTED_FOR_SECONDS:
        return False
    if staged.size == final.size and files.same_contents(location, staged.path, final.path, storage_options):
        return False
    return files.stat_files(location, [staged.path], storage_options)[0] is not None


def discard_staged(location: str, storage_options: Mapping[str, str], manifest_path: str) -> None:
    """Delete the staged manifest of a version that was refused, so refused attempts leave nothing
    behind. Only a staged name, and only in the table's own ``_versions/``: the path is the caller's."""
    name = manifest_path.rsplit("/", 1)[-1]
    if not is_staged(name):
        return
    with contextlib.suppress(OSError):
        files.delete_files(location, [_in_versions(name)], storage_options)


def delete_manifests(location: str, storage_options: Mapping[str, str], doomed: Sequence[int]) -> None:
    """Delete the final manifests of the ``doomed`` versions (in either naming scheme) from the
    table's own ``_versions/``, its place proved by the caller: they are deleted versions. On an
    object store, in bulk requests."""
    names = [name for version in doomed for name in (manifest_name(version), manifest_name(version, v2=False))]
    files.delete_files(location, [_in_versions(name) for name in names], storage_options)


def forget_version_hint(location: str, storage_options: Mapping[str, str]) -> None:
    """Delete pylance's hint at the latest version (``latest_version_hint.json``) when it is alone
    in ``_versions/``: no manifest is beside it, and the place reads as never written."""
    if files.entries_at(f"{location.rstrip('/')}/{VERSIONS_DIRECTORY}", storage_options) == {_VERSION_HINT}:
        with contextlib.suppress(OSError):
            files.delete_files(location, [_in_versions(_VERSION_HINT)], storage_options)
