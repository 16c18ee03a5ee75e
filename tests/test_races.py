"""Races on one namespace: 32 threads declaring one table, declare/drop/list running together, and
the lifecycle's purge/undrop race with several tables at once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

import lance
import pyarrow as pa
from lance_namespace.errors import TableAlreadyExistsError, TableNotFoundError

from lance_iceberg_ns import IcebergLanceNamespace

RACES: Counter[str] = Counter()


def _together(count: int, action: Callable[[int], object]) -> list[object]:
    """Run ``action(i)`` in ``count`` threads released at once; each result or exception."""
    barrier = threading.Barrier(count)
    outcomes: list[object] = [None] * count

    def run(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = action(index)
        except Exception as exc:  # noqa: BLE001 - the outcome to check
            outcomes[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return outcomes


def test_32_threads_declaring_one_table_have_exactly_one_winner(ns: IcebergLanceNamespace, db: list[str]) -> None:
    for round_ in range(3):
        table_id = [*db, f"contested{round_}"]
        outcomes = _together(32, lambda _i, table_id=table_id: ns.declare_table({"id": table_id}))
        winners = [o for o in outcomes if not isinstance(o, Exception)]
        losers = [o for o in outcomes if isinstance(o, Exception)]
        assert len(winners) == 1, outcomes
        assert all(isinstance(o, TableAlreadyExistsError) for o in losers), losers
        listed = ns.list_tables({"id": db, "include_declared": True}).tables
        assert listed.count(f"contested{round_}") == 1
        RACES["32-thread declare"] += 1


def test_listing_never_shows_a_half_made_or_dropped_table(ns: IcebergLanceNamespace, db: list[str]) -> None:
    """Writers create and drop tables while listers list. A listed table must be one whose create
    had started before the listing ended, and whose drop had not finished before it began."""
    created_started: dict[str, float] = {}
    dropped_done: dict[str, float] = {}
    violations: list[str] = []
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
            RACES["listing during declare/drop"] += 1

    listers = [threading.Thread(target=lister) for _ in range(2)]
    for thread in listers:
        thread.start()
    _together(4, writer)
    stop.set()
    for thread in listers:
        thread.join(60)
    assert not violations, violations[:5]
    final = set(ns.list_tables({"id": db}).tables)
    assert final == {f"w{w}_{r}" for w in range(4) for r in range(6) if r % 2 == 1}
    for name in final:  # every listed table is whole
        assert lance.dataset(namespace_client=ns, table_id=[*db, name]).count_rows() == 1


def test_purge_and_undrop_race_on_many_tables_at_once(ns: IcebergLanceNamespace, db: list[str]) -> None:
    """Eight tables at a time, each with a purge and an undrop released together, for 25 rounds:
    exactly one wins each race, and a table that was undropped has all its data."""
    tables = [[*db, f"raced{i}"] for i in range(8)]
    for table_id in tables:
        lance.write_dataset(pa.table({"id": [1, 2, 3]}), namespace_client=ns, table_id=table_id)
    for _round in range(25):
        for table_id in tables:
            if ns.table_status(table_id).state == "not_found":
                lance.write_dataset(pa.table({"id": [1, 2, 3]}), namespace_client=ns, table_id=table_id)
            ns.drop_table({"id": table_id})

        def contender(index: int) -> object:
            table_id = tables[index // 2]
            return ns.purge_table(table_id) if index % 2 == 0 else ns.undrop_table(table_id)

        outcomes = _together(16, contender)
        for position, table_id in enumerate(tables):
            purged, undropped = outcomes[2 * position], outcomes[2 * position + 1]
            purge_won, undrop_won = purged == 1, not isinstance(undropped, Exception)
            assert purge_won != undrop_won, (table_id, purged, undropped)
            if undrop_won:
                assert lance.dataset(namespace_client=ns, table_id=table_id).count_rows() == 3
            else:
                assert isinstance(undropped, TableNotFoundError)
                assert ns.table_status(table_id).state == "not_found"
            RACES["purge/undrop"] += 1


def test_zz_race_summary() -> None:
    print(f"\nraces run: {dict(RACES)}")
    assert RACES["32-thread declare"] == 3 and RACES["purge/undrop"] == 200
