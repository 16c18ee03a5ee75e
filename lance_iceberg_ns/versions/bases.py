"""What a table's manifest may name of other places: nothing. Lance lets a manifest register base
paths, other roots its data files, deletion files and indices may live under (a shallow clone
registers its source; a multi-base write, the bases it wrote to). A table whose manifest names
another root reads, and later may write or delete, files that are not its own: another table's, say.

So a managed table's new version is read before the catalog commits it, and refused when its
manifest registers any base path but the table's own root; an import refuses a dataset that does.
Every file a manifest names under a base refers to it by the base's id, which the manifest must
register, so the registered base paths cover data files, deletion files and indices alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lance_namespace.errors import InvalidInputError, LanceNamespaceError

from lance_iceberg_ns.data.datasets import dataset_exists, dataset_of_manifest, lance_dataset
from lance_iceberg_ns.storage.locations import normalize_location

# Lance's framing of a manifest file: the manifest's protobuf message, preceded by its length (a
# little-endian u32), at a position the footer gives; the footer is that position (u64), the
# format's major and minor version (u16 each) and the magic.
_MAGIC = b"LANC"
_FOOTER_BYTES = 8 + 2 + 2 + len(_MAGIC)
_LENGTH_BYTES = 4
# A staged manifest read whole to check it. pylance itself reads every manifest whole; a manifest
# this big (millions of fragments) is far past any table a commit through a namespace writes.
MAX_MANIFEST_BYTES = 256 * 1024 * 1024

# pylance 14's deep_clone of a shallow clone on an object store fails on the source's URI: the
# rows written anew are the way out there.
DEEP_COPY_HINT = (
    "make a deep copy first (pylance: LanceDataset.deep_clone, or lance.write_dataset of its rows to a new place) "
    "and use that"
)


class NotAManifest(InvalidInputError):
    """Bytes that are not a Lance manifest file."""


def manifest_message(data: bytes) -> bytes:
    """The protobuf message of the Lance manifest file ``data``, as pylance reads it; NotAManifest
    (InvalidInputError) when ``data`` is not framed as one."""
    if len(data) < _FOOTER_BYTES + _LENGTH_BYTES or not data.endswith(_MAGIC):
        raise NotAManifest("not a Lance manifest (no manifest footer)")
    end = len(data) - _FOOTER_BYTES
    position = int.from_bytes(data[end : end + 8], "little")
    if position > end - _LENGTH_BYTES:
        raise NotAManifest("not a Lance manifest (its footer points past the file)")
    length = int.from_bytes(data[position : position + _LENGTH_BYTES], "little")
    if length > end - position - _LENGTH_BYTES:
        raise NotAManifest("not a Lance manifest (its message runs past the file)")
    return data[position + _LENGTH_BYTES : position + _LENGTH_BYTES + length]


def foreign_bases(bases: Iterable[Any], location: str) -> list[Any]:
    """The base paths (pylance's ``DatasetBasePath``) that are not the root of the dataset at
    ``location``: a base that is the dataset's own root names only its files."""
    own = normalize_location(location)
    return [base for base in bases if _normalized(str(base.path)) != own]


def _normalized(path: str) -> str | None:
    try:
        return normalize_location(path)
    except LanceNamespaceError:  # not a location at all: not the table's own root either
        return None


def foreign_base_count(bases: Mapping[int, Any], location: str) -> int:
    """How many of a dataset's registered ``bases`` (``LanceDataset.base_paths()``) are not its own root."""
    return len(foreign_bases(bases.values(), location))


def refuse_foreign_manifest(location: str, storage_options: Mapping[str, str], version: int, data: bytes) -> None:
    """Refuse the staged manifest ``data`` of a new ``version`` of the table at ``location``, before
    any commit names it, unless it is a Lance manifest that registers no base path but the table's
    own root: InvalidInputError (NotAManifest for what pylance cannot read as one), naming how many
    foreign base paths it registers, never which (a base path may carry what reaches a store)."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise InvalidInputError(f"The staged manifest of version {version} is over {MAX_MANIFEST_BYTES} bytes")
    try:
        bases = dataset_of_manifest(location, storage_options, manifest_message(data)).base_paths()
    except NotAManifest as exc:
        raise NotAManifest(f"The staged manifest of version {version} is {exc}") from None
    except (ValueError, OSError, RuntimeError):
        raise NotAManifest(f"The staged manifest of version {version} is not a Lance manifest pylance reads") from None
    count = foreign_base_count(bases, location)
    if count:
        raise InvalidInputError(
            f"The manifest of version {version} names {count} base path{'s' if count > 1 else ''} outside the "
            "table's location (a shallow clone's source, or other bases data was written to): a managed table's "
            "version names only the table's own files. To take another dataset's data into the table, write "
            f"it through the namespace, or {DEEP_COPY_HINT}"
        )


def not_self_contained(location: str, storage_options: Mapping[str, str]) -> str:
    """Why the dataset at ``location`` must not become a table as it is, because it names files
    outside itself (a shallow clone names its source's; a multi-base write, its other bases), or
    "" when it names only its own. Its latest manifest tells, as Lance carries a dataset's base
    paths on to every later version. A table registered or imported from it would read, and its
    writes could reach, another table's files."""
    try:
        bases = lance_dataset(location, storage_options).base_paths()
    except (ValueError, OSError, RuntimeError):
        return "its latest manifest cannot be read"
    count = foreign_base_count(bases, location)
    if not count:
        return ""
    return (
        f"a shallow clone: its manifest names {count} base path{'s' if count > 1 else ''} outside the table, "
        f"whose files a table must not point at: {DEEP_COPY_HINT}"
    )


def refuse_unregistrable(location: str, storage_options: Mapping[str, str]) -> None:
    """InvalidInputError unless ``location`` holds a Lance dataset that names only its own files."""
    if not dataset_exists(location, storage_options):
        raise InvalidInputError(f"No Lance dataset at {location}")
    if reason := not_self_contained(location, storage_options):
        raise InvalidInputError(f"The dataset at {location} cannot be registered: {reason}")
