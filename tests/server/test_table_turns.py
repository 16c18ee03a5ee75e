"""A create cut off is taken back only when no other request is at work on its table: the
take-back waits for requests under way, holds back new ones meanwhile, and gives up, leaving the
table, when it is not alone in time."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from lance_namespace.errors import ServiceUnavailableError

from lance_iceberg_ns.server import isolation
from lance_iceberg_ns.server.isolation import DataWorkers
from lance_iceberg_ns.server.turns import TableTurns
from lance_iceberg_ns.server.worker import TAKE_BACK

TABLE = ("wh", "db", "t")


def test_a_take_back_waits_for_the_requests_on_its_table_and_holds_back_new_ones() -> None:
    turns, events = TableTurns(), []
    writing, release = threading.Event(), threading.Event()

    def request(name: str, table: tuple[str, ...], hold: bool = False) -> None:
        with turns.shared(table):
            events.append(f"{name} runs")
            if hold:
                writing.set()
                assert release.wait(10)
        events.append(f"{name} done")

    def take_back() -> None:
        with turns.alone(TABLE) as alone:
            events.append(f"take-back alone={alone}")

    under_way = threading.Thread(target=request, args=("insert", TABLE, True))
    under_way.start()
    assert writing.wait(5)
    taking = threading.Thread(target=take_back)
    taking.start()
    time.sleep(0.2)
    later = threading.Thread(target=request, args=("create", TABLE))
    later.start()
    other = threading.Thread(target=request, args=("other", ("wh", "db", "u")))
    other.start()
    other.join(5)
    time.sleep(0.2)
    assert events == ["insert runs", "other runs", "other done"]  # the take-back and the later create wait
    release.set()
    for thread in (under_way, taking, later):
        thread.join(5)
    assert events[3:] == ["insert done", "take-back alone=True", "create runs", "create done"]


def test_a_take_back_not_alone_in_time_holds_nothing() -> None:
    turns = TableTurns()
    with turns.shared(TABLE), turns.alone(TABLE, within=0.2) as alone:
        assert alone is False
    with turns.alone(TABLE, within=0.2) as alone:  # nothing was left held
        assert alone is True


class _FakeWorker:
    """A worker of these tests: it starts at once, its kills are counted, and it answers at once."""

    def __init__(self, memory_mb: int) -> None:
        self.idle_since = time.monotonic()
        self.kills = 0
        self.process: Any = type("Running", (), {"ended": False, "kill": lambda _: self._killed()})()
        self.declared: list[dict[str, Any]] = []

    def _killed(self) -> None:
        self.kills += 1

    def wait_ready(self) -> None:
        pass

    def call(self, seconds: float, header: dict[str, Any], *payload: bytes) -> tuple[dict[str, Any], bytearray]:
        return {"kind": "ok"}, bytearray()

    def ended(self, memory_mb: int, writing: bool = False) -> Exception:
        return ServiceUnavailableError("The data worker running the request ended")

    def stop(self) -> None:
        pass


class _Cutting(_FakeWorker):
    """A create is cut off after declaring its table; an insert runs until released; a take-back
    answers that it removed the table. Every call is recorded, in order."""

    calls: list[str] = []
    insert_running = threading.Event()
    release_insert = threading.Event()

    def call(self, seconds: float, header: dict[str, Any], *payload: bytes) -> tuple[dict[str, Any], bytearray]:
        operation = header["operation"]
        self.calls.append(f"{operation} starts")
        if operation == "create_table":
            self.declared.append({"table": list(TABLE), "location": "/t.lance", "restored": False})
            raise EOFError("the worker ended")
        if operation == "insert_into_table":
            self.insert_running.set()
            assert self.release_insert.wait(10)
        self.calls.append(f"{operation} ends")
        return ({"kind": "taken_back", "removed": True} if operation == TAKE_BACK else {"kind": "ok"}), bytearray()


def test_a_cut_off_create_is_taken_back_only_after_another_clients_write_on_its_table_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(isolation, "DataWorker", _Cutting)
    workers = DataWorkers(2)
    outcome: dict[str, Any] = {}
    inserting = threading.Thread(
        target=lambda: outcome.update(insert=workers.run(5, {"operation": "insert_into_table"}, table=TABLE))
    )
    inserting.start()
    assert _Cutting.insert_running.wait(10)

    def create() -> None:
        with pytest.raises(ServiceUnavailableError) as raised:
            workers.run(5, {"operation": "create_table"}, table=TABLE)
        outcome["create"] = str(raised.value)

    creating = threading.Thread(target=create)
    creating.start()
    time.sleep(0.3)
    assert TAKE_BACK + " starts" not in _Cutting.calls  # not while the insert is under way
    _Cutting.release_insert.set()
    for thread in (inserting, creating):
        thread.join(10)
    assert _Cutting.calls.index("insert_into_table ends") < _Cutting.calls.index(TAKE_BACK + " starts")
    assert "the table wh.db.t it declared was taken back" in outcome["create"]
    workers.close()


def test_a_turn_is_on_the_table_as_the_bridge_parses_it_and_reads_take_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """A write naming the table in another Unicode form holds the same turn; a read holds none (a
    query running on a table must not keep its take-back waiting, nor hold back others' writes)."""
    import lance_namespace

    from lance_iceberg_ns.server.routes import ROUTES

    composed, decomposed = "caf\u00e9", "cafe\u0301"
    taken: dict[str, tuple[str, ...]] = {}

    class Recording:
        def keep_at_least(self, count: int, start: int) -> None:
            pass

        def run(self, seconds: float, header: dict[str, Any], *payload: bytes, **how: Any) -> Any:
            taken[header["operation"]] = tuple(how["table"])
            return {"kind": "ok", "status": 200}, bytearray()

    monkeypatch.setattr(DataWorkers, "of", classmethod(lambda cls, memory_mb: Recording()))
    isolated = isolation.Isolated(isolation.Recipe({}, False), 64, 1)
    routes = {route.operation: route for route in ROUTES}
    for operation, name in (("insert_into_table", decomposed), ("count_table_rows", composed)):
        model = getattr(lance_namespace, routes[operation].model)
        isolated.answer(routes[operation], model(id=["wh", "db", name]), b"", None)
    assert taken == {"insert_into_table": ("wh", "db", composed), "count_table_rows": ()}


class _Answering(_FakeWorker):
    """A read's client may go away just as the answer comes (``abandon_now``)."""

    def call(self, seconds: float, header: dict[str, Any], *payload: bytes) -> tuple[dict[str, Any], bytearray]:
        if header.get("abandon_now"):
            header["abandon_now"].abandon()
        return super().call(seconds, header, *payload)


def test_a_read_abandoned_after_it_answered_never_ends_the_worker_another_request_took(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(isolation, "DataWorker", _Answering)
    workers = DataWorkers(3)
    workers.keep_at_least(1, start=0)  # a worker done is kept idle
    try:
        done = isolation.Abandonment()
        workers.run(5, {"operation": "query_table"}, abandonment=done)
        (worker,) = workers._idle  # given back
        done.abandon()  # the client's hang-up, heard only now: the worker is another request's
        assert worker.kills == 0
        late = isolation.Abandonment()
        workers.run(5, {"operation": "query_table", "abandon_now": late}, abandonment=late)
        assert worker.kills == 1 and worker not in workers._idle  # killed as it answered: never handed out again
    finally:
        workers.close()


class _CutBeforeMaking(_FakeWorker):
    """A create cut off after telling only the mark its entry would bear: nothing bears it."""

    def call(self, seconds: float, header: dict[str, Any], *payload: bytes) -> tuple[dict[str, Any], bytearray]:
        if header["operation"] == "create_table":
            self.declared.append({"table": list(TABLE), "create_id": "c0ffee", "restored": False})
            raise EOFError("the worker ended")
        return {"kind": "taken_back", "removed": False}, bytearray()


def test_a_create_cut_off_before_it_made_its_table_says_nothing_was_taken_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(isolation, "DataWorker", _CutBeforeMaking)
    workers = DataWorkers(4)
    try:
        with pytest.raises(ServiceUnavailableError) as raised:
            workers.run(5, {"operation": "create_table"}, table=TABLE)
    finally:
        workers.close()
    assert "the table wh.db.t it was declaring was not found (never made, or not its own)" in str(raised.value)
