"""Several Lance tables moving together: new versions of managed tables published in one atomic
catalog commit, or not at all.

pylance commits one table at a time. To publish several at once, each write goes through a
staging namespace: pylance stages the manifest as usual and asks the namespace to create the
version; the staging namespace records the request and answers with the staged manifest, so
nothing is published yet and pylance takes its commit as done. Once every table is staged, one
``batch_create_table_versions`` publishes them all (the catalog checks every table's requirement
before changing any), and the bridge then moves the staged manifests to their final names. If any write
or the commit fails, no table moves, and every file the writes made (data files, transaction files,
staged manifests) is deleted, unless the catalog's answer left open whether the commit landed.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.dataset
from lance_namespace import (
    BatchCreateTableVersionsRequest,
    CreateTableVersionEntry,
    CreateTableVersionResponse,
    DescribeTableResponse,
    DescribeTableVersionResponse,
    LanceNamespace,
    ListTableVersionsResponse,
    TableVersion,
)
from lance_namespace.errors import InvalidInputError, LanceNamespaceError

from lance_iceberg_ns.errors.codes import is_refusal
from lance_iceberg_ns.identifiers import in_default_namespace, parse_table_id
from lance_iceberg_ns.jobs.planned_writes import WRITE_MODES, TableWrite
from lance_iceberg_ns.namespace import IcebergLanceNamespace, as_namespace
from lance_iceberg_ns.versions.operations import refuse_across_warehouses

STAGING_THREADS = 8  # writes staged at once by one atomic commit


class StagingNamespace(LanceNamespace):
    """What pylance commits through while an atomic commit is staged: a bridge of its own
    (``bridge``, built from ``properties``) answers every question, with all the bridge applies to
    each call, but a version is recorded for the later atomic commit instead of being created.
    Each is answered as its staged manifest: declined, pylance would keep the manifest too, but
    would first check with pauses (about a fifth of a second) whether the version landed anyway,
    and log two warnings. pylance asks only what a write through a namespace asks (the table, its
    versions), and this answers only that."""

    def __init__(self, **properties: str) -> None:
        self.bridge = IcebergLanceNamespace(**properties)
        self._staged: dict[tuple[str, ...], CreateTableVersionEntry] = {}
        self._staged_lock = threading.Lock()

    def namespace_id(self) -> str:
        return self.bridge.namespace_id()

    def describe_table(self, request: Any = None) -> DescribeTableResponse:
        return self.bridge.describe_table(request)

    def list_table_versions(self, request: Any = None) -> ListTableVersionsResponse:
        return self.bridge.list_table_versions(request)

    def describe_table_version(self, request: Any = None) -> DescribeTableVersionResponse:
        return self.bridge.describe_table_version(request)

    def create_table_version(self, request: Any = None) -> Any:
        fields = dict(request) if isinstance(request, Mapping) else request.to_dict()
        entry = CreateTableVersionEntry.from_dict(fields)
        assert entry is not None
        with self._staged_lock:
            if tuple(entry.id or ()) in self._staged:
                raise InvalidInputError(f"Table {'.'.join(entry.id or [])} is written twice in one atomic commit")
            self._staged[tuple(entry.id or ())] = entry
        staged = TableVersion(
            version=entry.version,
            manifest_path=entry.manifest_path,
            manifest_size=entry.manifest_size,
            e_tag=entry.e_tag,
        )
        return CreateTableVersionResponse(version=staged)

    def staged(self, table_id: Sequence[str]) -> CreateTableVersionEntry | None:
        with self._staged_lock:
            return self._staged.get(tuple(table_id))

    def close(self) -> None:
        """Release the bridge's connections."""
        self.bridge.close()


@dataclass(frozen=True)
class PublishedVersion:
    table_id: list[str]
    version: int


def stage(staging: StagingNamespace, table_id: Sequence[str], write: Callable[[], object]) -> None:
    """Run one pylance write through the staging namespace; its version must end up staged."""
    write()
    if staging.staged(table_id) is None:
        raise InvalidInputError(f"The write to {'.'.join(table_id)} did not go through the namespace")


def stage_all(staging: StagingNamespace, writes: Sequence[tuple[Sequence[str], Callable[[], object]]]) -> None:
    """Stage every write (``(table_id, write)``), side by side: each reads its table's latest
    version and writes a manifest and a transaction file. The first failure, in the order given,
    is raised once every write is done."""
    with ThreadPoolExecutor(max_workers=max(1, min(len(writes), STAGING_THREADS))) as pool:
        staged = [pool.submit(stage, staging, table_id, write) for table_id, write in writes]
    for one in staged:
        one.result()


def refuse_repeated(ns: IcebergLanceNamespace, table_ids: Sequence[Sequence[str]]) -> None:
    """InvalidInputError, before anything is written, for a table named twice in one commit (as
    the bridge reads names: in NFC, a bare name in the default namespace), or tables of several
    warehouses."""
    tables = [
        parse_table_id(in_default_namespace(list(table_id), ns.settings.default_namespace)) for table_id in table_ids
    ]
    seen: set[tuple[str, ...]] = set()
    for table in tables:
        if tuple(table.parts) in seen:
            raise InvalidInputError(f"Table {'.'.join(table.parts)} is written twice in one atomic commit")
        seen.add(tuple(table.parts))
    refuse_across_warehouses(tables)


def publish(
    ns: IcebergLanceNamespace, staging: StagingNamespace, table_ids: Sequence[Sequence[str]]
) -> list[PublishedVersion]:
    """Publish the staged versions of ``table_ids`` in one atomic catalog commit (which finalizes
    their manifests). Raises ConcurrentModificationError (nothing published) if a table moved."""
    entries = []
    for table_id in table_ids:
        entry = staging.staged(table_id)
        if entry is None:
            raise InvalidInputError(f"Nothing was staged for {'.'.join(table_id)}")
        entries.append(entry)
    response = ns.batch_create_table_versions(BatchCreateTableVersionsRequest(entries=entries))
    return [PublishedVersion(list(e.id or []), v.version) for e, v in zip(entries, response.versions, strict=True)]


def commit_together(
    ns: IcebergLanceNamespace, staging: StagingNamespace, writes: Sequence[tuple[TableWrite, list[str]]]
) -> list[PublishedVersion]:
    """Stage the commit of every write (``(plan, fragments)``, its fragments written), then publish
    them all in one catalog commit. When that fails, every file the writes made is deleted, unless
    the catalog's answer leaves open whether it took the commit (the files may then be the tables')."""
    try:
        stage_all(
            staging, [(plan.table_id, functools.partial(plan.commit, written, staging)) for plan, written in writes]
        )
    except BaseException:  # the staging namespace publishes nothing
        discard_all(staging, writes)
        raise
    try:
        return publish(ns, staging, [list(plan.table_id) for plan, _written in writes])
    except LanceNamespaceError as exc:
        if is_refusal(exc.code):  # nothing was published
            discard_all(staging, writes)
        raise


def discard_all(staging: StagingNamespace, writes: Sequence[tuple[TableWrite, list[str]]]) -> None:
    """Delete what every write made (fragments, transaction, staged manifest) for a commit that never landed."""
    for plan, written in writes:
        staged = staging.staged(plan.table_id)
        plan.discard(written, staged.manifest_path if staged is not None else None)


def _arrow_stream(data: Any) -> pa.RecordBatchReader:
    """The rows of ``data``: anything with the Arrow stream interface (pyarrow's tables, batches and
    readers, pandas and polars DataFrames, DuckDB's results), a pyarrow or Lance dataset, a dict of
    columns or a list of rows (dicts)."""
    try:
        if isinstance(data, pyarrow.dataset.Dataset):  # a LanceDataset is one too
            return data.scanner().to_reader()
        if isinstance(data, dict):
            data = pa.table(data)
        elif isinstance(data, list):
            data = pa.Table.from_pylist(data)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise InvalidInputError(f"Rows to write cannot be read as Arrow data: {exc}") from None
    if not hasattr(data, "__arrow_c_stream__"):
        raise InvalidInputError(
            f"Rows to write must be Arrow data (a table, batches, a reader), not {type(data).__name__}"
        )
    return pa.RecordBatchReader.from_stream(data)


def write_together(
    namespace: IcebergLanceNamespace | Mapping[str, str],
    writes: Sequence[tuple[Sequence[str], Any, str]],
    *,
    max_rows_per_file: int = 1024 * 1024,
) -> list[PublishedVersion]:
    """Write data to several managed Lance tables and publish all their new versions at once.

    ``writes``: ``(table_id, data, mode)``, ``data`` anything with the Arrow stream interface (a
    pyarrow table, batch or reader, a pandas or polars DataFrame) and ``mode`` one of ``create``,
    ``append``, ``overwrite``. Either every table moves to its new version, or
    (ConcurrentModificationError, or the write's own error) none does and the files written for it
    are deleted; tables that ``create`` declared stay declared without data.
    """
    planned = []
    for table_id, data, mode in writes:
        rows = _arrow_stream(data)
        planned.append(PlannedWrite(table_id, mode, rows.schema, functools.partial(_write_rows, rows)))
    return write_planned_together(namespace, planned, max_rows_per_file)


@dataclass(frozen=True)
class PlannedWrite:
    """One table's part of an atomic commit: its rows' schema, and how its fragments are written
    once the write is planned (in this process, or by Spark's executors)."""

    table_id: Sequence[str]
    mode: str
    schema: pa.Schema
    write_fragments: Callable[[TableWrite], list[str]]


def write_planned_together(
    namespace: IcebergLanceNamespace | Mapping[str, str], writes: Sequence[PlannedWrite], max_rows_per_file: int
) -> list[PublishedVersion]:
    """Plan and write every table's fragments, one table after another, then publish them all in
    one catalog commit (``commit_together``). A table named twice is refused before anything is
    written; a failed write deletes the fragments written before it."""
    ns = as_namespace(namespace)
    refuse_repeated(ns, [write.table_id for write in writes])
    refuse_unpublishable(ns, writes)
    staging = StagingNamespace(**ns.properties)
    written: list[tuple[TableWrite, list[str]]] = []
    try:
        try:  # tables that exist first: one that is not managed is refused before any is declared
            order = sorted(range(len(writes)), key=lambda index: writes[index].mode == "create")
            plans = {index: _managed_plan(ns, writes[index], max_rows_per_file) for index in order}
            for index, write in enumerate(writes):
                written.append((plans[index], write.write_fragments(plans[index])))
        except BaseException:
            discard_all(staging, written)
            raise
        return commit_together(ns, staging, written)
    finally:
        staging.close()


def refuse_unpublishable(ns: IcebergLanceNamespace, writes: Sequence[PlannedWrite]) -> None:
    """InvalidInputError, before anything is declared or written, for a mode that is not one, or a
    table to create on a bridge that would not have the catalog manage its versions."""
    for write in writes:
        if write.mode not in WRITE_MODES:
            raise InvalidInputError(f"mode must be one of {WRITE_MODES}, got {write.mode!r}")
    for write in writes:
        if write.mode == "create" and not ns.settings.table_version_management:
            raise InvalidInputError(
                f"Atomic commits need tables whose versions the catalog manages; {'.'.join(write.table_id)} would "
                "not be one (set table_version_management on the bridge)"
            )


def _managed_plan(ns: IcebergLanceNamespace, write: PlannedWrite, max_rows_per_file: int) -> TableWrite:
    plan = TableWrite.plan(ns, write.table_id, write.mode, write.schema, None, max_rows_per_file)
    if not plan.managed:
        raise InvalidInputError(
            f"Atomic commits need tables whose versions the catalog manages; {'.'.join(write.table_id)} is not one"
        )
    return plan


def _write_rows(rows: pa.RecordBatchReader, plan: TableWrite) -> list[str]:
    return plan.write_fragments(iter(rows))
