"""Writes of one table while other calls on it run in the same bridge.

pylance swaps a dataset object's state in place when a write through it commits (merge-insert at
the end; update, delete, schema and index changes for the whole call), and refuses with "Already
borrowed", or panics, while another thread is inside a call on the same object: another write, a
read, or the look for the latest version. So every write runs on a dataset object of its own, and
once it has committed that object is the one kept for reads, which see the write at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from lance_namespace import (
    CountTableRowsRequest,
    CreateTableRequest,
    DeleteFromTableRequest,
    MergeInsertIntoTableRequest,
    UpdateTableRequest,
)

from lance_iceberg_ns import IcebergLanceNamespace

from ..helpers import ipc
from ..stores import Store

pytestmark = pytest.mark.usefixtures("store")  # every test on a local disk and on S3

ROWS = pa.table({"id": pa.array(range(1000), pa.int64()), "v": pa.array(["a"] * 1000)})


def _count(ns: IcebergLanceNamespace, table_id: list[str]) -> int:
    return ns.count_table_rows(CountTableRowsRequest(id=table_id)).count


def _merge(ns: IcebergLanceNamespace, table_id: list[str], ids: range) -> None:
    rows = pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(["m"] * len(ids))})
    request = MergeInsertIntoTableRequest(id=table_id, on=["id"], when_not_matched_insert_all=True)
    ns.merge_insert_into_table(request, ipc(rows))


def _update(ns: IcebergLanceNamespace, table_id: list[str], predicate: str) -> None:
    ns.update_table(UpdateTableRequest(id=table_id, updates=[["v", "'u'"]], predicate=predicate))


def _delete(ns: IcebergLanceNamespace, table_id: list[str], predicate: str) -> None:
    ns.delete_from_table(DeleteFromTableRequest(id=table_id, predicate=predicate))


@pytest.fixture
def table_id(ns: IcebergLanceNamespace, db: list[str]) -> list[str]:
    """A table of ``ROWS`` whose dataset the bridge keeps open (it has been read)."""
    table_id = [*db, "shared"]
    ns.create_table(CreateTableRequest(id=table_id), ipc(ROWS))
    assert _count(ns, table_id) == ROWS.num_rows
    return table_id


@pytest.fixture
def calls_on_datasets(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[list[tuple[str, Any]], threading.Event]]:
    """Each call of pylance's writes and row count, with the pylance object it ran on; the first
    delete stays at pylance's door until the returned event is set."""
    calls: list[tuple[str, Any]] = []
    release = threading.Event()

    def entering(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(dataset: lance.LanceDataset, *args: Any, **kwargs: Any) -> Any:
            calls.append((name, dataset._ds))
            if name == "delete" and [called for called, _ in calls].count("delete") == 1:
                assert release.wait(60)
            return real(dataset, *args, **kwargs)

        return call

    for name in ("delete", "update", "merge_insert", "count_rows"):
        monkeypatch.setattr(lance.LanceDataset, name, entering(name, getattr(lance.LanceDataset, name)))
    yield calls, release
    release.set()


def test_a_write_held_inside_pylance_shares_its_dataset_with_no_call_made_meanwhile(
    ns: IcebergLanceNamespace, table_id: list[str], calls_on_datasets: tuple[list[tuple[str, Any]], threading.Event]
) -> None:
    calls, release = calls_on_datasets
    with ThreadPoolExecutor(1) as thread:
        deleting = thread.submit(_delete, ns, table_id, "id < 100")
        while not calls:
            assert not deleting.done(), deleting.exception()
            threading.Event().wait(0.01)
        try:  # while the delete is held: another write of each kind, and reads
            _update(ns, table_id, "id >= 900")
            _merge(ns, table_id, range(1000, 1100))
            assert _count(ns, table_id) == 1100
        finally:
            release.set()
        deleting.result(60)
    assert _count(ns, table_id) == 1000
    held = calls[0]
    assert held[0] == "delete"
    meanwhile = calls[1:-1]  # the last is the count above, after the delete
    assert {name for name, _ in meanwhile} == {"update", "merge_insert", "count_rows"}
    assert all(dataset is not held[1] for _, dataset in meanwhile), "a call ran on the held write's dataset"
    writes = [dataset for name, dataset in meanwhile if name != "count_rows"]
    assert all(dataset is not other for dataset in writes for other in writes if other is not dataset)


def test_writes_all_land_while_reads_of_the_table_run(
    endpoint: str, lance_root: Path, store: Store, db: list[str]
) -> None:
    """With reads running on the kept dataset all the time (a long ``read_consistency_interval``
    keeps them off the catalog), every write lands, and each is read at once after it returns."""
    properties = {"root": store.root, **store.properties, "read_consistency_interval": "600"}
    with IcebergLanceNamespace(endpoint=endpoint, **properties) as ns:
        table_id = [*db, "read_meanwhile"]
        ns.create_table(CreateTableRequest(id=table_id), ipc(ROWS))
        stop, failures, reads = threading.Event(), [], [0]

        def reader() -> None:
            while not stop.is_set():
                try:
                    _count(ns, table_id)
                    reads[0] += 1
                except Exception as exc:  # noqa: BLE001 - every failure is reported
                    failures.append(exc)

        readers = [threading.Thread(target=reader, daemon=True) for _ in range(2)]
        for thread in readers:
            thread.start()
        try:
            expected = ROWS.num_rows
            for round_ in range(6):
                first = 1000 + round_ * 100
                _merge(ns, table_id, range(first, first + 100))
                assert _count(ns, table_id) == expected + 100
                _update(ns, table_id, f"id >= {first}")
                _delete(ns, table_id, f"id >= {first + 50}")
                expected += 50
                assert _count(ns, table_id) == expected
        finally:
            stop.set()
            for thread in readers:
                thread.join(60)
        assert not failures, failures[:3]
        assert reads[0] > 0
