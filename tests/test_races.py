"""Races on one namespace: 32 threads declaring one table, declare/drop/list running together, and
the lifecycle's purge/undrop race with several tables at once. Each test checks every race it runs."""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from pathlib import Path

import lance
import lance.namespace
import pyarrow as pa
import pytest
from lance_namespace import (
    CountTableRowsRequest,
    DeclareTableRequest,
    InsertIntoTableRequest,
    MergeInsertIntoTableRequest,
)
from lance_namespace.errors import ServiceUnavailableError, TableAlreadyExistsError, TableNotFoundError

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.server import serve_in_background
from tests.helpers import ipc, together
from tests.stores import Store

on_each_store = pytest.mark.usefixtures("store")  # the test runs on a local disk and on S3


@on_each_store
def test_32_threads_declaring_one_table_have_exactly_one_winner(ns: IcebergLanceNamespace, db: list[str]) -> None:
    for round_ in range(3):
        table_id = [*db, f"contested{round_}"]
        outcomes = together(32, lambda _i, table_id=table_id: ns.declare_table({"id": table_id}))
        winners = [o for o in outcomes if not isinstance(o, Exception)]
        losers = [o for o in outcomes if isinstance(o, Exception)]
        assert len(winners) == 1, outcomes
        assert all(isinstance(o, TableAlreadyExistsError) for o in losers), losers
        listed = ns.list_tables({"id": db, "include_declared": True}).tables
        assert listed.count(f"contested{round_}") == 1


@on_each_store
def test_listing_never_shows_a_half_made_or_dropped_table(ns: IcebergLanceNamespace, db: list[str]) -> None:
    """Writers create and drop tables while listers list. A listed table must be one whose create
    had started before the listing ended, and whose drop had not finished before it began."""
    created_started: dict[str, float] = {}
    dropped_done: dict[str, float] = {}
    violations: list[str] = []
    listings = 0
    stop = threading.Event()
    lock = threading.Lock()

    def writer(worker: int) -> None:
        for round_ in range(6):
            name = f"w{worker}_{round_}"
            with lock:
                created_started[name] = time.monotonic()
            lance.write_dataset(pa.table({"id": [round_]}), namespace_client=ns, table_id=[*db, name])
            if round_ % 2 == 0:
                ns.drop_table({"id": [*db, name]})
                with lock:
                    dropped_done[name] = time.monotonic()

    def lister() -> None:
        nonlocal listings
        while not stop.is_set():
            began = time.monotonic()
            listed = ns.list_tables({"id": db}).tables
            ended = time.monotonic()
            with lock:
                for name in listed:
                    if created_started.get(name, float("inf")) > ended:
                        violations.append(f"{name} listed before its create began")
                    if dropped_done.get(name, float("inf")) < began:
                        violations.append(f"{name} listed after its drop finished")
                listings += 1

    listers = [threading.Thread(target=lister) for _ in range(2)]
    for thread in listers:
        thread.start()
    failures = [outcome for outcome in together(4, writer) if isinstance(outcome, Exception)]
    stop.set()
    for thread in listers:
        thread.join(60)
    assert not failures and not violations, (failures, violations[:5])
    assert listings > 0, "no listing ran while the writers did"
    final = set(ns.list_tables({"id": db}).tables)
    assert final == {f"w{w}_{r}" for w in range(4) for r in range(6) if r % 2 == 1}
    for name in final:  # every listed table is whole
        assert lance.dataset(namespace_client=ns, table_id=[*db, name]).count_rows() == 1


def test_purge_and_undrop_race_on_many_tables_at_once(ns: IcebergLanceNamespace, db: list[str], store: Store) -> None:
    """Eight tables at a time, each with a purge and an undrop released together, for 25 rounds (8
    on S3, whose rounds are slower): exactly one wins each race, and a table that was undropped
    has all its data."""
    tables = [[*db, f"raced{i}"] for i in range(8)]
    for table_id in tables:
        lance.write_dataset(pa.table({"id": [1, 2, 3]}), namespace_client=ns, table_id=table_id)
    for _round in range(25 if store.kind == "disk" else 8):
        for table_id in tables:
            if ns.table_status(table_id).state == "not_found":
                lance.write_dataset(pa.table({"id": [1, 2, 3]}), namespace_client=ns, table_id=table_id)
            ns.drop_table({"id": table_id})

        def contender(index: int) -> object:
            table_id = tables[index // 2]
            return ns.purge_table(table_id) if index % 2 == 0 else ns.undrop_table(table_id)

        outcomes = together(16, contender)
        for position, table_id in enumerate(tables):
            purged, undropped = outcomes[2 * position], outcomes[2 * position + 1]
            purge_won, undrop_won = purged == 1, not isinstance(undropped, Exception)
            assert purge_won != undrop_won, (table_id, purged, undropped)
            if undrop_won:
                assert lance.dataset(namespace_client=ns, table_id=table_id).count_rows() == 3
            else:
                assert isinstance(undropped, TableNotFoundError)
                assert ns.table_status(table_id).state == "not_found"


def _first_writes_together(client: object, db: list[str], name: str, merges: int = 0, writers: int = 4) -> None:
    """``writers`` writes of 100 new rows each (the first ``merges`` of them merge-inserts) into a
    table declared a moment ago, released at once. Lance makes a first version as an overwrite, so
    without turns one write's rows were lost while both were answered, or one failed with an
    internal error."""
    table_id = [*db, name]
    client.declare_table(DeclareTableRequest(id=table_id))  # type: ignore[attr-defined]

    def write(index: int) -> object:
        rows = ipc(pa.table({"id": pa.array(range(index * 100, index * 100 + 100), pa.int64())}))
        if index < merges:
            merge = MergeInsertIntoTableRequest(id=table_id, on=["id"], when_not_matched_insert_all=True)
            return client.merge_insert_into_table(merge, rows)  # type: ignore[attr-defined]
        return client.insert_into_table(InsertIntoTableRequest(id=table_id), rows)  # type: ignore[attr-defined]

    outcomes = together(writers, write)
    assert not [o for o in outcomes if isinstance(o, Exception)], outcomes
    counted = client.count_table_rows(CountTableRowsRequest(id=table_id))  # type: ignore[attr-defined]
    assert getattr(counted, "count", counted) == writers * 100  # a response in process, a number from the server


@pytest.mark.parametrize("managed", ["false", "true"])
def test_first_writes_into_a_declared_table_all_land(endpoint: str, store: Store, db: list[str], managed: str) -> None:
    properties = {**store.properties, "table_version_management": managed}
    with IcebergLanceNamespace(endpoint=endpoint, root=store.root, **properties) as ns:
        for round_, merges in enumerate((0, 0, 2, 4)):  # inserts, inserts and merge-inserts, merge-inserts
            _first_writes_together(ns, db, f"first_{managed}_{round_}", merges)


def test_first_writes_through_the_server_all_land(endpoint: str, store: Store, db: list[str]) -> None:
    properties = {"endpoint": endpoint, "root": store.root, **store.properties}
    with serve_in_background(properties=properties) as server:
        for round_, merges in enumerate((0, 0, 2, 4)):
            _first_writes_together(lance.namespace.RestNamespace(uri=server.uri), db, f"served_{round_}", merges)


def test_first_writes_of_one_table_never_hold_up_another_s() -> None:
    """Turns are per location: a slow first write of one table leaves every other table's free."""
    from lance_iceberg_ns.data.opening import _FIRST_WRITES

    holding, release = threading.Event(), threading.Event()

    def slow_first_write() -> None:
        with _FIRST_WRITES.turn("/root/a.lance"):
            holding.set()
            release.wait(30)

    slow = threading.Thread(target=slow_first_write)
    slow.start()
    holding.wait(30)
    started = time.monotonic()
    with _FIRST_WRITES.turn("/root/b.lance"):
        assert time.monotonic() - started < 1
    same = threading.Event()

    def same_table() -> None:
        with _FIRST_WRITES.turn("/root/a.lance"):
            same.set()

    waiting = threading.Thread(target=same_table)
    waiting.start()
    assert not same.wait(0.3)  # the same table waits its turn
    release.set()
    assert same.wait(30)
    for thread in (slow, waiting):
        thread.join(30)
    assert not _FIRST_WRITES._locks  # nothing is kept for tables no one is writing


@pytest.mark.parametrize("operation", ["insert", "merge", "create"])
def test_a_first_version_made_by_another_process_meanwhile_is_built_on(
    ns: IcebergLanceNamespace, db: list[str], store: Store, monkeypatch: pytest.MonkeyPatch, operation: str
) -> None:
    """Turns are taken within a process; another process may write the first version between the
    bridge's look and its write. The insert then appends to it and the merge-insert merges into it
    (Lance refuses the bridge's "create"), and create_table writes over it as the next version, as
    it would have."""
    from lance_iceberg_ns.data import datasets

    table_id = [*db, f"made_elsewhere_{operation}"]
    location = ns.declare_table(DeclareTableRequest(id=table_id)).location
    real_exists, looks = datasets.dataset_exists, []

    def exists_once_the_other_process_wrote(place: str, options: dict[str, str]) -> bool:
        looks.append(place)
        if len(looks) == 1:  # the other process writes its first version as the bridge looks
            other = pa.table({"writer": pa.array([-1] * 10, pa.int64())})
            lance.write_dataset(other, place, mode="create", storage_options=store.storage_options)
        return real_exists(place, options) if len(looks) > 2 else False

    monkeypatch.setattr(datasets, "dataset_exists", exists_once_the_other_process_wrote)
    rows = ipc(pa.table({"writer": pa.array([1] * 100, pa.int64())}))
    if operation == "insert":
        ns.insert_into_table(InsertIntoTableRequest(id=table_id), rows)
    elif operation == "merge":
        merge = MergeInsertIntoTableRequest(id=table_id, on=["writer"], when_not_matched_insert_all=True)
        ns.merge_insert_into_table(merge, rows)
    else:
        ns.create_table({"id": table_id, "mode": "overwrite"}, rows)
    written = store.dataset(location)
    assert written.version == 2 and len(looks) >= 2
    assert written.count_rows() == (100 if operation == "create" else 110)
    assert store.dataset(location, version=1).count_rows() == 10  # the other process's version stays in the history


def test_first_writes_take_turns_among_processes_and_wait_for_another_only_so_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The machine-wide turn is a lock file: held by another process (here another open file of
    it, which the system treats alike), a first write waits, then gives up with ServiceUnavailable."""
    from lance_iceberg_ns.data import opening

    turns = opening._Turns(str(tmp_path / "turns"))
    with turns.turn("/root/a.lance"):
        (held,) = list((tmp_path / "turns").iterdir())
    other = os.open(held, os.O_RDWR)
    fcntl.flock(other, fcntl.LOCK_EX)
    monkeypatch.setattr(opening, "TURN_SECONDS", 0.3)
    started = time.monotonic()
    with pytest.raises(ServiceUnavailableError, match="first version"), turns.turn("/root/a.lance"):
        pass
    assert 0.3 <= time.monotonic() - started < 5
    os.close(other)  # the other process ends: the turn is free
    with turns.turn("/root/a.lance"):
        pass


def test_a_turn_directory_another_user_could_reach_is_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from lance_iceberg_ns.data import opening

    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with caplog.at_level(logging.WARNING), opening._Turns(str(shared)).turn("/root/a.lance"):
        pass
    assert list(shared.iterdir()) == []
    assert "this process only" in caplog.text and "not a directory of this user's alone" in caplog.text
