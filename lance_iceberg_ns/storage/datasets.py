"""The Lance side of a table: opening (the one place that does), checking and deleting the
dataset at a table's location."""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from urllib.parse import unquote

import lance
import pyarrow as pa
import pyarrow.fs as pafs
from lance_namespace import LanceNamespace
from lance_namespace.errors import (
    InvalidInputError,
    InvalidTableStateError,
    LanceNamespaceError,
    TableNotFoundError,
    TableVersionNotFoundError,
)
from lance_namespace_urllib3_client.models.json_arrow_schema import JsonArrowSchema

from lance_iceberg_ns.limits import MAX_VERSION

ICEBERG_METADATA_DIRECTORY = "metadata"  # where the catalog writes the companion table's metadata
VERSIONS_DIRECTORY = "_versions"  # Lance's manifests: a dataset exists while they do
# Lance's writer counts a slice of a larger batch as the whole buffer it shares, and starts a page
# for each: 10,000-row slices of a table cost it 2.3x the CPU and 100x the pages of the same rows
# joined (bench/write_batches.py). Batches of their own (Spark's, an IPC body's) cost it as much or
# up to a fifth more unjoined; every write joins what it hands over, so no caller's slices reach Lance.
WRITE_BATCH_BYTES = 4 * 1024 * 1024

# Lance (object_store) storage option → pyarrow S3FileSystem argument.
_S3_ARGUMENTS = {
    "aws_access_key_id": "access_key",
    "aws_secret_access_key": "secret_key",
    "aws_session_token": "session_token",
    "aws_region": "region",
    "aws_endpoint": "endpoint_override",
}


def is_local(location: str) -> bool:
    return "://" not in location or location.startswith("file://")


def local_path(location: str) -> str:
    return location[len("file://") :] if location.startswith("file://") else location


def filesystem_for(location: str, storage_options: Mapping[str, str]) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and the path of ``location`` on it, for listing a dataset's files
    (local paths, S3 with the Lance storage options, other stores through pyarrow)."""
    if is_local(location):
        return pafs.LocalFileSystem(), local_path(location)
    scheme, path = location.split("://", 1)
    if scheme in ("s3", "s3a"):
        arguments = {
            argument: storage_options[option] for option, argument in _S3_ARGUMENTS.items() if option in storage_options
        }
        if str(storage_options.get("allow_http", "")).lower() == "true":
            arguments["scheme"] = "http"
        return pafs.S3FileSystem(**arguments), unquote(path)  # keys as Lance decodes the URI
    filesystem, path = pafs.FileSystem.from_uri(location)
    return filesystem, path


def move_unless_taken(filesystem: pafs.FileSystem, source: str, target: str) -> bool:
    """Move ``source`` to ``target`` unless ``target`` exists (False: nothing moved). On a local
    disk the check and the move are one step (a hard link, as Lance commits there); elsewhere a
    look just before the move (a store without conditional writes leaves that moment open)."""
    if filesystem.type_name == "local":
        try:
            os.link(source, target)
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links: a look, then the move
            pass
        else:
            os.unlink(source)
            return True
    if filesystem.get_file_info(target).type != pafs.FileType.NotFound:
        return False
    filesystem.move(source, target)
    return True


def same_contents(filesystem: pafs.FileSystem, first: str, second: str) -> bool:
    """Whether two small files (manifests) hold the same bytes."""
    sizes = [info.size for info in filesystem.get_file_info([first, second])]
    if sizes[0] is None or sizes[0] != sizes[1]:
        return False
    with filesystem.open_input_stream(first) as one, filesystem.open_input_stream(second) as other:
        return bool(one.read() == other.read())


def copy_unless_taken(filesystem: pafs.FileSystem, source: str, target: str) -> bool:
    """Copy ``source`` to ``target`` unless ``target`` exists (False: nothing copied), as
    ``move_unless_taken`` moves: through a copy under a name of its own, moved into place."""
    interim = f"{target}.{uuid.uuid4().hex}.copying"
    filesystem.copy_file(source, interim)
    try:
        return move_unless_taken(filesystem, interim, target)
    finally:
        with contextlib.suppress(OSError):
            if filesystem.get_file_info(interim).type != pafs.FileType.NotFound:
                filesystem.delete_file(interim)


def lance_dataset(
    location: str, storage_options: Mapping[str, str], version: int | str | None = None
) -> lance.LanceDataset:
    """The one call that opens a dataset by its location (at ``version``: a number or a tag), with
    pylance's own errors; ``open_dataset`` types them."""
    return lance.dataset(location, version=version, storage_options=dict(storage_options) or None)


def in_write_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The same rows in the same order, for Lance's writer: small batches joined into batches of
    ``WRITE_BATCH_BYTES`` to twice that (the last may be smaller). A batch that big passes as it
    is, never joined, so that no joined column outgrows its offsets."""
    held: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        if batch.nbytes >= WRITE_BATCH_BYTES:
            if held:
                yield from _joined(held)
                held, size = [], 0
            yield batch
            continue
        held.append(batch)
        size += batch.nbytes
        if size >= WRITE_BATCH_BYTES:
            yield from _joined(held)
            held, size = [], 0
    if held:
        yield from _joined(held)


def write_reader(data: pa.Table) -> pa.RecordBatchReader:
    """``data`` as Lance's writer takes it best: a reader of ``in_write_batches``."""
    return pa.RecordBatchReader.from_batches(data.schema, in_write_batches(data.to_batches()))


def _joined(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """``batches`` as one, or as they are when Arrow cannot join them (dictionaries that together
    outgrow their index type): Lance takes them as it would have."""
    if len(batches) == 1:
        return batches
    try:
        return [pa.concat_batches(batches)]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return batches


def open_dataset(
    location: str, storage_options: Mapping[str, str], version: int | str | None = None
) -> lance.LanceDataset:
    """Open the dataset at ``location`` (at ``version``: a number or a tag).

    Raises ``TableVersionNotFoundError`` for a version or tag the dataset does not have, and
    ``InvalidInputError`` when no dataset is there.
    """
    try:
        dataset = lance_dataset(location, storage_options)
    except (ValueError, OSError) as exc:
        raise InvalidInputError(f"No Lance dataset at {location}: {exc}") from exc
    return checkout(dataset, version, f"the dataset at {location}")


def open_through_namespace(
    namespace: LanceNamespace, table_id: Sequence[str], version: int | str | None = None
) -> lance.LanceDataset:
    """A table's dataset opened through ``namespace``, so that for a table whose versions the
    catalog manages, the catalog names the latest version and takes every commit."""
    dataset = lance.dataset(namespace_client=namespace, table_id=list(table_id))
    return checkout(dataset, version, f"table {'.'.join(table_id)}")


def checkout(dataset: lance.LanceDataset, version: int | str | None, what: str) -> lance.LanceDataset:
    """``dataset`` at ``version`` (a number or a tag; ``None`` is as it is). Raises
    ``TableVersionNotFoundError`` naming ``what`` for a version or tag it does not have."""
    if version is None:
        return dataset
    if isinstance(version, int) and not 0 <= version <= MAX_VERSION:
        raise InvalidInputError(f"A version is a number between 0 and {MAX_VERSION}, got {version}")
    try:
        return dataset.checkout_version(version)
    except (ValueError, OSError, KeyError, OverflowError) as exc:
        raise TableVersionNotFoundError(f"Version {version!r} not found for {what}") from exc


def check_own_version(location: str, storage_options: Mapping[str, str], version: int) -> None:
    """InvalidTableStateError unless ``version`` of the dataset at ``location`` opens and names only
    files of its own that are there: a manifest planted in ``_versions/`` (not a manifest, or one
    copied from another dataset, or one naming files by absolute path or in other bases) must not
    become a version of the table."""
    what = f"Version {version} of the dataset at {location}"
    try:
        dataset = lance_dataset(location, storage_options, version)
        files: list[tuple[str, int | None]] = []
        for fragment in dataset.get_fragments():
            files += [(data_file.path, data_file.base_id) for data_file in fragment.data_files()]
            deletion = fragment.metadata.deletion_file
            if deletion is not None:  # named from the dataset's root, data files from its data/
                files.append((f"../{deletion.path(fragment.fragment_id)}", deletion.base_id))
        bases = dataset.base_paths()
    except (ValueError, OSError, RuntimeError) as exc:
        raise InvalidTableStateError(f"{what} cannot be read: {exc}") from None
    foreign = [path for path, base in files if base is not None or not _plain_relative(path)]
    if bases or foreign:
        raise InvalidTableStateError(
            f"{what} names files outside the table: {(foreign or [str(base) for base in bases.values()])[:3]}"
        )
    filesystem, root = filesystem_for(location, storage_options)
    data = f"{root.rstrip('/')}/data"
    missing = [
        info.path
        for info in filesystem.get_file_info([os.path.normpath(f"{data}/{path}") for path, _base in files])
        if info.type != pafs.FileType.File
    ]
    if missing:
        raise InvalidTableStateError(f"{what} names files the table does not have: {missing[:3]}")


def _plain_relative(path: str) -> bool:
    """A path relative to the dataset's ``data/`` (a deletion file's, ``../_deletions/…``) that
    stays inside the dataset."""
    parts = path.split("/")
    if "://" in path or path.startswith("/") or "\\" in path:
        return False
    if parts[0] == ".." and len(parts) > 1 and parts[1] == "_deletions":
        parts = parts[2:]
    return all(part not in ("", ".", "..") for part in parts)


def dataset_exists(location: str, storage_options: dict[str, str]) -> bool:
    """True when ``location`` holds a readable Lance dataset."""
    if is_local(location) and not os.path.isdir(os.path.join(local_path(location), VERSIONS_DIRECTORY)):
        return False  # cheap answer without opening anything
    try:
        lance_dataset(location, storage_options)
        return True
    except (ValueError, OSError):
        return False


def missing_dataset_error(location: str, storage_options: Mapping[str, str], what: str) -> LanceNamespaceError:
    """The error for a dataset that cannot be read at ``location`` because files are missing:
    TableNotFoundError when none of Lance's files are there (gone, or declared and never
    written), InvalidTableStateError when some are (the dataset is half there)."""
    held = _entries_at(location, storage_options)
    if held is None:
        return TableNotFoundError(f"{what} has no data: nothing is left at its location")
    if not held & {*LANCE_ENTRIES, VERSIONS_DIRECTORY}:
        return TableNotFoundError(f"{what} is declared but has no data yet")
    return InvalidTableStateError(f"{what}: files of its dataset are missing, it cannot be read")


def _entries_at(location: str, storage_options: Mapping[str, str]) -> set[str] | None:
    """The names directly under ``location``; None when nothing is there."""
    if is_local(location):
        path = local_path(location)
        return set(os.listdir(path)) if os.path.isdir(path) and not os.path.islink(path) else None
    filesystem, path = filesystem_for(location, storage_options)
    selector = pafs.FileSelector(path.rstrip("/"), recursive=False, allow_not_found=True)
    return {info.base_name for info in filesystem.get_file_info(selector)} or None


# What a table's location holds of its own: Lance's directories, then its manifests (a dataset
# exists while they do: deleted last, a declare racing the deletion is refused rather than given a
# location whose new files this deletion would remove), the catalog's metadata, the owner's marker.
LANCE_ENTRIES = ("data", "_deletions", "_indices", "_transactions", "_refs", "tree")
OWNED_ENTRIES = (*LANCE_ENTRIES, VERSIONS_DIRECTORY, ICEBERG_METADATA_DIRECTORY)


def delete_owned_files(location: str, storage_options: dict[str, str], marker: str) -> None:
    """Delete what a table's location holds of its own (``OWNED_ENTRIES``, then ``marker``), and
    the location itself once empty. Anything else under it is left alone, and symbolic links are
    removed as links, never followed. The caller has proved that the entry owns the location."""
    if not is_local(location):
        filesystem, root = filesystem_for(location, storage_options)
        for entry in OWNED_ENTRIES:
            with contextlib.suppress(FileNotFoundError):
                filesystem.delete_dir(f"{root.rstrip('/')}/{entry}")
        with contextlib.suppress(FileNotFoundError):
            filesystem.delete_file(f"{root.rstrip('/')}/{marker}")
        return
    root = local_path(location)
    for entry in (*OWNED_ENTRIES, marker):
        path = os.path.join(root, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)  # removes links inside as links
        else:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                os.remove(path)
    with contextlib.suppress(OSError):  # only when nothing else is left
        os.rmdir(root)


def arrow_schema_json(dataset: lance.LanceDataset) -> JsonArrowSchema:
    """The dataset's schema in the Lance spec's JSON Arrow form."""
    from lance.schema import schema_to_json

    schema = JsonArrowSchema.from_dict(schema_to_json(dataset.schema))
    if schema is None:  # from_dict answers None only for a None input
        raise ValueError("the dataset has no schema")
    return schema


def table_uri(location: str) -> str:
    """A complete URI for a location (``file://`` for local paths, escaped: a name such as
    ``%2e%2e`` stays a name when a client decodes the URI)."""
    if "://" in location:
        return location
    return pathlib.Path(os.path.abspath(location)).as_uri()


def is_empty_directory(location: str, storage_options: Mapping[str, str]) -> bool:
    """True when nothing is at ``location`` yet, or an empty directory (a file there is not)."""
    if is_local(location):
        path = local_path(location)
        if not os.path.lexists(path):
            return True
        return os.path.isdir(path) and not os.path.islink(path) and not os.listdir(path)
    filesystem, path = filesystem_for(location, storage_options)
    if filesystem.get_file_info(path).type == pafs.FileType.File:
        return False
    selector = pafs.FileSelector(path.rstrip("/"), recursive=False, allow_not_found=True)
    return not filesystem.get_file_info(selector)
