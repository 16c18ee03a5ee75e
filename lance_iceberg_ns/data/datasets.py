"""Lance datasets by location: the one module that opens a dataset (``lance.dataset``), checks
that one is there or that a version of it is the table's own, and hands rows to Lance's writer
in the batches it takes best. Where ``opened_elsewhere`` holds, it opens none. ``data.opening``
keeps the datasets it opens for the data operations."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import lance
import pyarrow as pa
from lance_namespace import LanceNamespace
from lance_namespace.errors import (
    InvalidInputError,
    InvalidTableStateError,
    LanceNamespaceError,
    TableBranchNotFoundError,
    TableNotFoundError,
    TableVersionNotFoundError,
)
from lance_namespace_urllib3_client.models.json_arrow_schema import JsonArrowSchema

from lance_iceberg_ns.limits import MAX_VERSION
from lance_iceberg_ns.storage import files

# Lance's writer counts a slice of a larger batch as the whole buffer it shares, and starts a page
# for each: 10,000-row slices of a table cost it 2.3x the CPU and 100x the pages of the same rows
# joined (bench/write_batches.py). Batches of their own (Spark's, an IPC body's) cost it as much or
# up to a fifth more unjoined; every write joins what it hands over, so no caller's slices reach Lance.
WRITE_BATCH_BYTES = 4 * 1024 * 1024

# What a read names: a version number or a tag of main, or (branch, a version number of it, or
# None for its latest); None is main's latest.
Version = int | str | tuple[str, int | None] | None


_OPENED_ELSEWHERE: ContextVar[bool] = ContextVar("lance_iceberg_ns.opened_elsewhere", default=False)


class OpensADataset(BaseException):  # noqa: N818  (not an error: the request goes where datasets open)
    """A dataset would be opened where ``opened_elsewhere`` holds: the request is to be run where
    datasets may be opened (a data worker). A BaseException, so that no handler of errors takes it
    for a dataset that is not there."""


@contextmanager
def opened_elsewhere() -> Iterator[None]:
    """Within the block (on this thread), opening a dataset raises ``OpensADataset`` instead: the
    server runs its catalog requests so, and answers in a data worker any that turns out to open
    one (a manifest anybody with write access to a location wrote can end the process reading it)."""
    token = _OPENED_ELSEWHERE.set(True)
    try:
        yield
    finally:
        _OPENED_ELSEWHERE.reset(token)


def _may_open() -> None:
    if _OPENED_ELSEWHERE.get():
        raise OpensADataset()


def version_on(branch: str | None, version: int | None) -> Version:
    """The version a request names: ``version`` of ``branch`` (main when none is named, or ``main``)."""
    return (branch, version) if branch and branch != "main" else version


def lance_dataset(
    location: str, storage_options: Mapping[str, str], version: int | str | None = None
) -> lance.LanceDataset:
    """The one call that opens a dataset by its location (at ``version``: a number or a tag), with
    pylance's own errors; ``open_dataset`` types them."""
    _may_open()
    return lance.dataset(location, version=version, storage_options=dict(storage_options) or None)


def dataset_of_manifest(location: str, storage_options: Mapping[str, str], message: bytes) -> lance.LanceDataset:
    """The dataset at ``location`` as a manifest no commit has named yet describes it (``message``:
    the manifest's protobuf message, ``versions.bases.manifest_message``), with pylance's own errors;
    its base paths and fragments read, its indices not (pylance reads those from the final manifest)."""
    _may_open()
    return lance.LanceDataset(location, storage_options=dict(storage_options) or None, serialized_manifest=message)


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


def open_dataset(location: str, storage_options: Mapping[str, str], version: Version = None) -> lance.LanceDataset:
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
    namespace: LanceNamespace, table_id: Sequence[str], version: Version = None
) -> lance.LanceDataset:
    """A table's dataset opened through ``namespace``, so that for a table whose versions the
    catalog manages, the catalog names the latest version and takes every commit."""
    _may_open()
    dataset = lance.dataset(namespace_client=namespace, table_id=list(table_id))
    return checkout(dataset, version, f"table {'.'.join(table_id)}")


def checkout(dataset: lance.LanceDataset, version: Version, what: str) -> lance.LanceDataset:
    """``dataset`` at ``version`` (a number or a tag, or a branch's; ``None`` is as it is). Raises
    ``TableBranchNotFoundError`` or ``TableVersionNotFoundError`` naming ``what`` for a branch,
    version or tag it does not have."""
    if version is None:
        return dataset
    number = version[1] if isinstance(version, tuple) else version
    if isinstance(number, int) and not 0 <= number <= MAX_VERSION:
        raise InvalidInputError(f"A version is a number between 0 and {MAX_VERSION}, got {number}")
    try:
        # pylance reads a branch it does not have as an internal "Not found" of its folder
        if isinstance(version, tuple) and version[0] not in dataset.branches.list():
            raise TableBranchNotFoundError(f"Branch {version[0][:40]!r} not found for {what}")
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
        named: list[tuple[str, int | None]] = []
        for fragment in dataset.get_fragments():
            named += [(data_file.path, data_file.base_id) for data_file in fragment.data_files()]
            deletion = fragment.metadata.deletion_file
            if deletion is not None:  # named from the dataset's root, data files from its data/
                named.append((f"../{deletion.path(fragment.fragment_id)}", deletion.base_id))
        bases = dataset.base_paths()
    except (ValueError, OSError, RuntimeError) as exc:
        raise InvalidTableStateError(f"{what} cannot be read: {exc}") from None
    foreign = [path for path, base in named if base is not None or not _plain_relative(path)]
    if bases or foreign:
        raise InvalidTableStateError(
            f"{what} names files outside the table: {(foreign or [str(base) for base in bases.values()])[:3]}"
        )
    missing = files.files_missing(location, storage_options, [f"data/{path}" for path, _base in named])
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


def dataset_exists(location: str, storage_options: Mapping[str, str]) -> bool:
    """True when ``location`` holds a readable Lance dataset."""
    if not files.may_hold_dataset(location):
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
    held = files.entries_at(location, storage_options)
    if held is None:
        return TableNotFoundError(f"{what} has no data: nothing is left at its location")
    if not held & {*files.LANCE_ENTRIES, files.VERSIONS_DIRECTORY}:
        return TableNotFoundError(f"{what} is declared but has no data yet")
    return InvalidTableStateError(f"{what}: files of its dataset are missing, it cannot be read")


def arrow_schema_json(dataset: lance.LanceDataset) -> JsonArrowSchema:
    """The dataset's schema in the Lance spec's JSON Arrow form."""
    from lance.schema import schema_to_json

    schema = JsonArrowSchema.from_dict(schema_to_json(dataset.schema))
    if schema is None:  # from_dict answers None only for a None input
        raise ValueError("the dataset has no schema")
    return schema
