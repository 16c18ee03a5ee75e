"""Table versions, read from and restored on the Lance dataset itself (the catalog keeps no copy
unless the table's versions are managed by it).

Each version is a manifest under ``_versions/``: ``<n>.manifest`` (naming scheme V1) or
``<u64::MAX - n>.manifest`` zero-padded to 20 digits (V2, what pylance writes now, so that an
object store lists the newest first). Listing reads the directory once for paths and sizes and the
dataset once for the commit times and summaries.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import unquote

import lance
import pyarrow.fs as pafs
from lance_namespace import TableVersion
from lance_namespace.errors import InvalidInputError, LanceNamespaceError, TableVersionNotFoundError

from lance_iceberg_ns.paging import page_of
from lance_iceberg_ns.storage.datasets import VERSIONS_DIRECTORY, check_own_version, filesystem_for
from lance_iceberg_ns.storage.locations import normalize_location

_U64_MAX = 2**64 - 1
_MANIFEST = re.compile(r"^(\d+)\.manifest$")  # staging copies (``.manifest-<uuid>``) do not match
# pylance stages a version's manifest as its final name followed by ``-<uuid>``
_STAGED = re.compile(r"^(?P<final>\d+\.manifest)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


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


@dataclass(frozen=True)
class OwnManifest:
    """A new version's manifest, checked to be the table's own."""

    path: str  # what the catalog records: in the table's own ``_versions/``, as pylance names it
    final_exists: bool  # a staged manifest whose final one is already there (the version was committed)


def own_manifest(location: str, storage_options: Mapping[str, str], version: int, manifest_path: str) -> OwnManifest:
    """The manifest a new ``version`` of the table at ``location`` records, from the path a client
    gave: it must name a manifest of that version in the table's own ``_versions/``, staged as
    pylance stages it, or final (a version written by location, being adopted: it must open and
    name only the table's own files). Anything else is InvalidInputError, so that a version never
    points at another table's manifest or at no manifest at all. One look (both names at once)."""
    directory, _, name = str(manifest_path).rpartition("/")
    staged = _STAGED.match(name)
    final = staged.group("final") if staged else name
    if version_of_manifest(final) != version:
        raise InvalidInputError(
            f"manifest_path must name the staged manifest of version {version} in the table's _versions/, "
            f"not {name[:100]!r}"
        )
    if not _is_directory_of(directory, location):
        raise InvalidInputError(f"manifest_path must be in the table's own _versions/ ({manifest_directory(location)})")
    filesystem, root = filesystem_for(location, storage_options)
    names = [name, final] if staged else [name]
    found = filesystem.get_file_info([f"{root.rstrip('/')}/{VERSIONS_DIRECTORY}/{each}" for each in names])
    if found[0].type != pafs.FileType.File:
        raise InvalidInputError(f"No manifest {name} in the table's _versions/")
    if not staged:
        check_own_version(location, storage_options, version)
    return OwnManifest(f"{manifest_directory(location)}/{name}", bool(staged) and found[1].type == pafs.FileType.File)


def _is_directory_of(directory: str, location: str) -> bool:
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


def final_manifests(location: str, storage_options: Mapping[str, str]) -> dict[int, pafs.FileInfo]:
    """The final manifests in ``_versions/``, by version (one listing)."""
    filesystem, root = filesystem_for(location, storage_options)
    listed = filesystem.get_file_info(
        pafs.FileSelector(f"{root.rstrip('/')}/{VERSIONS_DIRECTORY}", allow_not_found=True)
    )
    found = {}
    for info in listed:
        version = version_of_manifest(info.base_name)
        if version is not None and info.type == pafs.FileType.File:
            found[version] = info
    return found


def listed_versions(location: str, storage_options: Mapping[str, str], below: int) -> list[TableVersion]:
    """The versions before ``below`` with a final manifest in ``_versions/`` (one listing, keyed
    by the manifests' names; none is read, so a stray file under another version's name does not
    stand in the way), oldest first, each with its file's size and time, as the reference lists the
    versions of a table whose versions are its own."""
    found = final_manifests(location, storage_options)
    return [
        TableVersion(
            version=version,
            manifest_path=f"{manifest_directory(location)}/{info.base_name}",
            manifest_size=info.size,
            timestamp_millis=int(info.mtime.timestamp() * 1000) if info.mtime else None,
            metadata={},
        )
        for version, info in sorted(found.items())
        if version < below
    ]


def one_version(found: list[TableVersion], version: int) -> TableVersion:
    """The one of ``found`` that is ``version``; TableVersionNotFoundError when none is."""
    for candidate in found:
        if candidate.version == version:
            return candidate
    raise TableVersionNotFoundError(f"Version {version} not found")


def delete_manifests(location: str, storage_options: Mapping[str, str], doomed: Sequence[int]) -> None:
    """Delete the final manifests of the ``doomed`` versions (in either naming scheme) from the
    table's own ``_versions/``, its place proved by the caller: they are deleted versions."""
    filesystem, root = filesystem_for(location, storage_options)
    directory = f"{root.rstrip('/')}/{VERSIONS_DIRECTORY}"
    for version in doomed:
        for name in (manifest_name(version), manifest_name(version, v2=False)):
            with contextlib.suppress(FileNotFoundError):
                filesystem.delete_file(f"{directory}/{name}")


def _millis(timestamp: datetime | int) -> int:
    """pylance gives commit times as naive local datetimes (or, raw, nanoseconds)."""
    return int(timestamp.timestamp() * 1000) if isinstance(timestamp, datetime) else int(timestamp) // 1_000_000


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
                manifest_path=f"{VERSIONS_DIRECTORY}/{manifest.base_name}" if manifest else "",
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
