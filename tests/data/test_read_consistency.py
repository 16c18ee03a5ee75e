"""``read_consistency_interval``: reads may skip the catalog for a bounded time (lancedb's meaning).

Unset (the default) and 0, every data read asks the catalog where its table is; with N seconds, a
read within N seconds of the last read that asked makes no catalog request, and one after does.
A table dropped, renamed or replaced elsewhere may be read as it was for up to N seconds, through
this bridge at once; a reader never gets data that was not its table's at the last check.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import lance.namespace
import pyarrow as pa
import pytest
from lance_namespace.errors import InvalidInputError, TableNotFoundError

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.config.settings import Settings
from lance_iceberg_ns.data import datasets, opening

from ..conftest import RequestCounter
from ..helpers import ipc, write_values

INTERVAL = 1.0  # seconds: long enough for the reads "within" it on a slow machine, short to wait out


def _bridge(endpoint: str, lance_root: Path, **properties: str) -> IcebergLanceNamespace:
    return IcebergLanceNamespace(endpoint=endpoint, root=str(lance_root), **properties)


def _count(ns: IcebergLanceNamespace, table_id: list[str]) -> int:
    return ns.count_table_rows({"id": table_id}).count


def _until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def _values(ns: IcebergLanceNamespace, table_id: list[str]) -> list[int]:
    answer = ns.query_table({"id": table_id, "k": 100, "vector": {}, "columns": {"column_names": ["v"]}})
    return sorted(pa.ipc.open_file(answer.data).read_all().column("v").to_pylist())


@pytest.mark.parametrize("raw", ["-1", "soon", "nan", "inf", "-0.5", "1e999"])
def test_a_bad_interval_is_invalid_input(raw: str) -> None:
    with pytest.raises(InvalidInputError, match="read_consistency_interval"):
        Settings.from_properties({"endpoint": "http://catalog:8181", "read_consistency_interval": raw})


def test_unset_is_strong_and_numbers_are_seconds() -> None:
    def interval(**more: str) -> float | None:
        return Settings.from_properties({"endpoint": "http://catalog:8181", **more}).read_consistency_interval

    assert interval() is None
    assert interval(read_consistency_interval="") is None
    assert interval(read_consistency_interval="0") == 0
    assert interval(read_consistency_interval=" 2.5 ") == 2.5


@pytest.mark.parametrize("setting", [{}, {"read_consistency_interval": "0"}])
def test_by_default_and_with_0_every_read_asks_the_catalog(
    endpoint: str, lance_root: Path, db: list[str], request_counter: RequestCounter, setting: dict[str, str]
) -> None:
    with _bridge(endpoint, lance_root, **setting) as ns:
        write_values(ns, [*db, "t"], [1, 2, 3])
        _count(ns, [*db, "t"])
        for read in (_count, _values):
            request_counter.reset()
            read(ns, [*db, "t"])
            assert request_counter.count >= 1


def test_within_the_interval_a_read_makes_no_catalog_request_and_after_it_one_does(
    endpoint: str, lance_root: Path, db: list[str], request_counter: RequestCounter
) -> None:
    table_id = [*db, "t"]
    with _bridge(endpoint, lance_root, read_consistency_interval=str(INTERVAL)) as ns:
        write_values(ns, table_id, [1, 2, 3])
        _count(ns, table_id)  # asks: the place is now known
        asked_at = time.monotonic()
        request_counter.reset()
        assert _count(ns, table_id) == 3
        assert _values(ns, table_id) == [1, 2, 3]
        assert request_counter.count == 0
        assert time.monotonic() - asked_at < INTERVAL  # the reads above were within it
        time.sleep(INTERVAL)
        assert _count(ns, table_id) == 3
        assert request_counter.count >= 1  # the interval ran out: asked again
        request_counter.reset()
        assert _values(ns, table_id) == [1, 2, 3]  # and that answer starts a new interval
        assert request_counter.count == 0


def test_a_version_written_elsewhere_is_seen_once_the_interval_runs_out_and_own_writes_at_once(
    endpoint: str, lance_root: Path, db: list[str]
) -> None:
    table_id = [*db, "t"]
    with (
        _bridge(endpoint, lance_root, read_consistency_interval=str(INTERVAL)) as ns,
        _bridge(endpoint, lance_root) as other,
    ):
        write_values(ns, table_id, [1, 2, 3])
        assert _count(ns, table_id) == 3
        other.insert_into_table({"id": table_id, "mode": "append"}, ipc(pa.table({"v": [4]})))
        assert _count(ns, table_id) == 3  # up to the interval out of date
        time.sleep(INTERVAL)
        assert _count(ns, table_id) == 4
        ns.insert_into_table({"id": table_id, "mode": "append"}, ipc(pa.table({"v": [5]})))
        assert _values(ns, table_id) == [1, 2, 3, 4, 5]  # this bridge's own write, at once


def test_the_interval_runs_from_the_last_check_not_from_the_end_of_a_slow_read(
    endpoint: str, lance_root: Path, db: list[str], request_counter: RequestCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that asked the catalog and then took longer than the interval leaves the next read
    nothing to skip: its check is already older than the interval."""
    table_id = [*db, "t"]
    with _bridge(endpoint, lance_root, read_consistency_interval=str(INTERVAL)) as ns:
        write_values(ns, table_id, [1, 2, 3])
        assert _count(ns, table_id) == 3
        time.sleep(INTERVAL)  # the next read checks again, then takes an interval to finish
        finish = opening._outcome
        monkeypatch.setattr(opening, "_outcome", lambda read: (time.sleep(INTERVAL), finish(read))[1])
        assert _count(ns, table_id) == 3
        monkeypatch.setattr(opening, "_outcome", finish)
        request_counter.reset()
        assert _count(ns, table_id) == 3
        assert request_counter.count >= 1


def test_a_bridges_own_write_to_a_name_given_a_new_table_elsewhere_is_read_at_once(
    endpoint: str, lance_root: Path, db: list[str]
) -> None:
    """The write asks the catalog, which names the new table: the next read goes there too, not to
    the renamed table the name led to at the last read."""
    table_id = [*db, "t"]
    with (
        _bridge(endpoint, lance_root, read_consistency_interval="600") as ns,
        _bridge(endpoint, lance_root) as other,
    ):
        write_values(ns, table_id, [1, 2, 3])
        assert _values(ns, table_id) == [1, 2, 3]
        other.rename_table({"id": table_id, "new_table_name": "t_old"})
        write_values(other, table_id, [7])
        ns.insert_into_table({"id": table_id, "mode": "append"}, ipc(pa.table({"v": [8]})))
        assert _values(ns, table_id) == [7, 8] and _count(ns, table_id) == 2


def test_this_bridges_own_restores_deletes_and_overwrites_are_read_at_once_within_the_interval(
    endpoint: str, lance_root: Path, db: list[str]
) -> None:
    table_id = [*db, "t"]
    with _bridge(endpoint, lance_root, read_consistency_interval="600") as ns:
        write_values(ns, table_id, [1, 2, 3])  # version 1
        ns.insert_into_table({"id": table_id, "mode": "append"}, ipc(pa.table({"v": [4, 5]})))
        assert _values(ns, table_id) == [1, 2, 3, 4, 5]
        ns.restore_table({"id": table_id, "version": 1})
        assert _values(ns, table_id) == [1, 2, 3]
        ns.restore_table({"id": table_id, "version": 2})
        assert _count(ns, table_id) == 5
        ns.delete_from_table({"id": table_id, "predicate": "v > 3"})
        assert _values(ns, table_id) == [1, 2, 3]
        ns.insert_into_table({"id": table_id, "mode": "overwrite"}, ipc(pa.table({"v": [9]})))
        assert _values(ns, table_id) == [9]


def test_a_table_renamed_and_replaced_elsewhere_is_read_as_it_was_until_the_interval_runs_out(
    endpoint: str, lance_root: Path, db: list[str]
) -> None:
    """The reader gets the rows its table had at the last check, never the new table's, and then
    the new table's: within the interval the name still leads to the dataset proved for it then."""
    table_id, archived = [*db, "t"], [*db, "t_old"]
    with (
        _bridge(endpoint, lance_root, read_consistency_interval=str(INTERVAL)) as ns,
        _bridge(endpoint, lance_root) as other,
    ):
        write_values(ns, table_id, [1, 2, 3])
        assert _values(ns, table_id) == [1, 2, 3]
        other.rename_table({"id": table_id, "new_table_name": archived[-1]})
        write_values(other, table_id, [7, 7, 7, 7, 7])  # a new table under the name, at a new location
        assert _values(ns, table_id) == [1, 2, 3]  # the table the name led to at the last check
        assert _values(ns, archived) == [1, 2, 3]  # a name not read before asks the catalog
        time.sleep(INTERVAL)
        assert _values(ns, table_id) == [7, 7, 7, 7, 7]


def test_after_a_swap_of_names_elsewhere_a_name_reads_its_old_table_until_the_interval_runs_out(
    endpoint: str, lance_root: Path, db: list[str]
) -> None:
    """As documented: within the interval ``a`` answers the dataset it named at the last check,
    which the swap has made ``b``'s table; a place the bridge proved owned all the same."""
    a, b, tmp = [*db, "a"], [*db, "b"], [*db, "tmp"]
    with (
        _bridge(endpoint, lance_root, read_consistency_interval=str(INTERVAL)) as ns,
        _bridge(endpoint, lance_root) as other,
    ):
        write_values(other, a, [1, 2, 3])
        write_values(other, b, [9])
        assert _values(ns, a) == [1, 2, 3]
        for old, new in ((a, tmp), (b, a), (tmp, b)):
            other.rename_table({"id": old, "new_table_name": new[-1]})
        assert _values(ns, a) == [1, 2, 3]  # now b's table
        time.sleep(INTERVAL)
        assert (_values(ns, a), _values(ns, b)) == ([9], [1, 2, 3])


@pytest.mark.parametrize("soft_delete", ["true", "false"])
def test_a_table_dropped_elsewhere_is_gone_once_the_interval_runs_out(
    endpoint: str, lance_root: Path, db: list[str], soft_delete: str
) -> None:
    table_id = [*db, "t"]
    with (
        _bridge(endpoint, lance_root, read_consistency_interval=str(INTERVAL)) as ns,
        _bridge(endpoint, lance_root, soft_delete=soft_delete) as other,
    ):
        write_values(ns, table_id, [1, 2, 3])
        assert _values(ns, table_id) == [1, 2, 3]
        other.drop_table({"id": table_id})
        if soft_delete == "true":  # its files stay: read as it was, within the interval
            assert _values(ns, table_id) == [1, 2, 3]
        else:  # its files are gone: the failed read asks the catalog again
            with pytest.raises(TableNotFoundError):
                _values(ns, table_id)
        time.sleep(INTERVAL)
        with pytest.raises(TableNotFoundError):
            _values(ns, table_id)


def test_a_drop_or_rename_through_this_bridge_is_seen_at_once(endpoint: str, lance_root: Path, db: list[str]) -> None:
    table_id, moved = [*db, "t"], [*db, "t_moved"]
    with _bridge(endpoint, lance_root, read_consistency_interval="300") as ns:
        write_values(ns, table_id, [1, 2, 3])
        assert _count(ns, table_id) == 3
        ns.rename_table({"id": table_id, "new_table_name": moved[-1]})
        with pytest.raises(TableNotFoundError):
            _count(ns, table_id)
        assert _count(ns, moved) == 3
        ns.drop_table({"id": moved})
        with pytest.raises(TableNotFoundError):
            _count(ns, moved)
        write_values(ns, table_id, [9])  # a new table under the first name
        assert _values(ns, table_id) == [9]


@pytest.mark.parametrize("how", ["rename", "register", "create", "declare", "undrop"])
def test_a_name_given_a_table_through_this_bridge_is_read_at_once(
    endpoint: str, lance_root: Path, db: list[str], how: str
) -> None:
    """The name's previous table was dropped elsewhere (soft delete keeps its files): a table this
    bridge then puts under the name is what the name reads, at once, whatever the interval."""
    table_id, source = [*db, "t"], [*db, "s"]
    with (
        _bridge(endpoint, lance_root, read_consistency_interval="300") as ns,
        _bridge(endpoint, lance_root) as other,
    ):
        write_values(other, table_id, [1, 2, 3])
        assert _count(ns, table_id) == 3
        other.drop_table({"id": table_id})
        if how == "rename":
            write_values(other, source, [5] * 50)
            ns.rename_table({"id": source, "new_table_name": table_id[-1]})
        elif how == "register":
            location = str(lance_root / db[0] / db[1] / "elsewhere.lance")
            lance.write_dataset(pa.table({"v": [5] * 50}), location)
            ns.register_table({"id": table_id, "location": location})
        elif how == "create":
            ns.create_table({"id": table_id}, ipc(pa.table({"v": [5] * 50})))
        elif how == "declare":
            ns.declare_table({"id": table_id})
        else:
            write_values(other, table_id, [5] * 50)
            other.drop_table({"id": table_id})
            ns.undrop_table(table_id)  # the newest soft-deleted table of the name: the 50 rows
        if how == "declare":
            with pytest.raises(TableNotFoundError):  # declared, nothing written yet
                _count(ns, table_id)
        else:
            assert _count(ns, table_id) == 50


def test_a_bad_query_within_the_interval_is_still_invalid_input(endpoint: str, lance_root: Path, db: list[str]) -> None:
    table_id = [*db, "t"]
    with _bridge(endpoint, lance_root, read_consistency_interval="300") as ns:
        write_values(ns, table_id, [1, 2, 3])
        assert _count(ns, table_id) == 3
        with pytest.raises(InvalidInputError):
            ns.count_table_rows({"id": table_id, "predicate": "no_such_column > 1"})


def test_the_server_property_skips_the_catalog_within_the_interval(
    endpoint: str, lance_root: Path, db: list[str], request_counter: RequestCounter
) -> None:
    from lance_iceberg_ns.server import serve_in_background

    properties = {"endpoint": endpoint, "root": str(lance_root), "read_consistency_interval": "300"}
    with _bridge(endpoint, lance_root) as ns, serve_in_background(properties=properties) as served:
        write_values(ns, [*db, "t"], [1, 2, 3])
        client = lance.namespace.RestNamespace(uri=served.uri)  # a Rust client: its requests are not counted
        request = {"id": [*db, "t"], "k": 10, "vector": {}}
        client.query_table(request)
        request_counter.reset()
        for _ in range(3):
            assert pa.ipc.open_file(client.query_table(request).data).read_all().num_rows == 3
        assert request_counter.count == 0


def test_a_first_version_that_lands_as_the_table_is_opened_is_read(
    ns: IcebergLanceNamespace, db: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A create in flight elsewhere: the first open finds no version, and by the time the bridge
    looks, the version is there. The read answers its rows (it was an internal error)."""
    table_id = [*db, "landing"]
    location = ns.declare_table({"id": table_id}).location
    opened = datasets.lance_dataset

    def lands_meanwhile(*args: object, **kwargs: object) -> lance.LanceDataset:
        monkeypatch.setattr(datasets, "lance_dataset", opened)
        lance.write_dataset(pa.table({"v": [7, 8]}), location)  # the other process's create
        raise ValueError(f"Dataset at path {location} was not found: Not found: {location}/_versions")

    monkeypatch.setattr(datasets, "lance_dataset", lands_meanwhile)
    assert _values(ns, table_id) == [7, 8]


# --- strong reads that arrive together share the catalog's answer ---------------------------------


def test_a_read_takes_only_an_answer_to_a_question_asked_after_it_arrived() -> None:
    answers: opening.SharedAnswers[str, int] = opening.SharedAnswers(8)
    asked: list[int] = []
    release = threading.Event()

    def slow() -> int:
        asked.append(len(asked) + 1)
        number = asked[-1]
        assert release.wait(10)
        return number

    def refuse() -> int:
        raise AssertionError("asked again, though an answer asked late enough was there")

    arrived = time.monotonic()
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(answers.ask, "t", arrived, slow)
        _until(lambda: len(asked) == 1)
        joined = pool.submit(answers.ask, "t", arrived, refuse)  # arrived before that question was asked
        time.sleep(0.01)
        own = pool.submit(answers.ask, "t", time.monotonic(), slow)  # arrived after it was asked
        _until(lambda: len(asked) == 2)
        release.set()
        assert first.result()[0] == joined.result()[0] == 1
        assert own.result()[0] == 2 and own.result()[1] > first.result()[1]
    assert answers.ask("t", arrived, refuse) == own.result()  # the last answer, asked after it arrived
    assert answers.ask("t", time.monotonic(), lambda: 3)[0] == 3  # one who arrives now asks


class _HeldQuestion:
    """A catalog question that says when it is asked and answers only once let go: ``outcome``
    gives its answer or raises."""

    def __init__(self, outcome: Callable[[], Any]) -> None:
        self.asked, self.released = threading.Event(), threading.Event()
        self._outcome = outcome

    def __call__(self) -> Any:
        self.asked.set()
        assert self.released.wait(10)
        return self._outcome()


def _raise(failure: BaseException) -> Callable[[], Any]:
    def raising() -> Any:
        raise failure

    return raising


def test_a_read_whose_question_is_slow_asks_anew(monkeypatch: pytest.MonkeyPatch) -> None:
    """One question stuck on a lost connection holds up no other read for long."""
    monkeypatch.setattr(opening, "WAIT_FOR_ANOTHERS_QUESTION_SECONDS", 0.05)
    answers: opening.SharedAnswers[str, str] = opening.SharedAnswers(8)
    hangs = _HeldQuestion(lambda: "late")
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(answers.ask, "t", time.monotonic(), hangs)
        assert hangs.asked.wait(10)
        started = time.monotonic()
        assert answers.ask("t", started - 1, lambda: "own")[0] == "own"
        assert time.monotonic() - started < 5
        hangs.released.set()
        assert first.result()[0] == "late"


def test_a_failed_question_fails_the_reads_waiting_for_it_each_with_a_copy_and_is_not_kept() -> None:
    answers: opening.SharedAnswers[str, int] = opening.SharedAnswers(8)
    gone = _HeldQuestion(_raise(TableNotFoundError("Table t does not exist")))
    arrived = time.monotonic()
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(answers.ask, "t", arrived, gone)
        assert gone.asked.wait(10)
        waiting = [pool.submit(answers.ask, "t", arrived, lambda: 0) for _ in range(2)]
        time.sleep(0.05)
        gone.released.set()
        failures = [read.exception() for read in (first, *waiting)]
    assert all(isinstance(failure, TableNotFoundError) for failure in failures)
    assert len({id(failure) for failure in failures}) == 3
    assert all(failure.__cause__ is failures[0] for failure in failures[1:])
    assert answers.ask("t", arrived, lambda: 5)[0] == 5


def test_a_read_waiting_on_a_question_whose_asker_was_interrupted_asks_anew() -> None:
    answers: opening.SharedAnswers[str, str] = opening.SharedAnswers(8)
    interrupted = _HeldQuestion(_raise(KeyboardInterrupt()))

    def asker() -> str:
        with contextlib.suppress(KeyboardInterrupt):
            return answers.ask("t", time.monotonic(), interrupted)[0]
        return "interrupted"

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(asker)
        assert interrupted.asked.wait(10)
        waiting = pool.submit(answers.ask, "t", time.monotonic() - 1, lambda: "own")
        time.sleep(0.05)
        interrupted.released.set()
        assert first.result() == "interrupted"
        assert waiting.result()[0] == "own"


def test_a_request_served_in_its_callers_own_task_leaves_no_arrival_behind(
    endpoint: str, lance_root: Path, db: list[str]
) -> None:
    """An app awaited in the caller's task (as httpx's ASGI transport does) must not leave the
    caller's later reads taking answers asked before they began."""
    import asyncio

    from lance_iceberg_ns.data import request_arrived
    from lance_iceberg_ns.server import create_app

    with _bridge(endpoint, lance_root) as ns:
        write_values(ns, [*db, "t"], [1])
        app = create_app(ns)
        path = f"/v1/table/{'$'.join([*db, 't'])}/count_rows"
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
                 "headers": [(b"host", b"x"), (b"content-type", b"application/json")],
                 "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2)}  # fmt: skip
        sent: list[dict[str, object]] = []

        async def in_the_callers_task() -> float | None:
            async def receive() -> dict[str, object]:
                return {"type": "http.request", "body": b"{}", "more_body": False}

            async def send(message: dict[str, object]) -> None:
                sent.append(message)

            await app(scope, receive, send)
            return request_arrived.get()

        assert asyncio.run(in_the_callers_task()) is None
        assert sent[0]["status"] == 200


def test_under_load_a_read_through_the_server_sees_a_change_made_elsewhere_before_it(
    endpoint: str, lance_root: Path, db: list[str]
) -> None:
    """Clients keep querying a table through the server, so that catalog questions are always out
    and answers shared; each time the table is replaced elsewhere, a query sent after that
    finished reads the new table, never an answer asked before it."""
    from lance_iceberg_ns.server import serve_in_background

    table_id = [*db, "busy"]
    properties = {"endpoint": endpoint, "root": str(lance_root)}
    with _bridge(endpoint, lance_root) as elsewhere, serve_in_background(properties=properties) as served:
        write_values(elsewhere, table_id, [0])
        request = {"id": table_id, "k": 100, "vector": {}, "columns": {"column_names": ["v"]}}

        def rows(client: lance.namespace.RestNamespace) -> list[int]:
            return pa.ipc.open_file(client.query_table(request).data).read_all().column("v").to_pylist()

        stop = threading.Event()

        def keep_querying() -> int:
            client, calls = lance.namespace.RestNamespace(uri=served.uri), 0
            while not stop.is_set():
                with contextlib.suppress(Exception):  # the table is briefly gone between the drop and the create
                    rows(client)
                calls += 1
            return calls

        reader = lance.namespace.RestNamespace(uri=served.uri)
        with ThreadPoolExecutor(6) as pool:
            busy = [pool.submit(keep_querying) for _ in range(6)]
            try:
                time.sleep(0.3)
                for round_ in range(1, 9):
                    elsewhere.drop_table({"id": table_id})
                    write_values(elsewhere, table_id, [round_] * round_)
                    assert rows(reader) == [round_] * round_
            finally:
                stop.set()
            assert all(calls.result() > 0 for calls in busy)
