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


class _Cutting:
    """A fake worker: a create is cut off after declaring its table; an insert runs until released;
    a take-back answers that it removed the table. Every call is recorded, in order."""

    calls: list[str] = []
    insert_running = threading.Event()
    release_insert = threading.Event()

    def __init__(self, memory_mb: int) -> None:
        self.idle_since = time.monotonic()
        self.process: Any = type("Running", (), {"ended": False, "kill": lambda self: None})()
        self.declared: list[dict[str, Any]] = []

    def wait_ready(self) -> None:
        pass

    def call(self, seconds: float, header: dict[str, Any], *payload: bytes) -> tuple[dict[str, Any], bytearray]:
        operation = header["operation"]
        self.calls.append(f"{operation} starts")
        if operation == "create_table":
            self.declared.append({"table": list(TABLE), "restored": False})
            raise EOFError("the worker ended")
        if operation == "insert_into_table":
            self.insert_running.set()
            assert self.release_insert.wait(10)
        self.calls.append(f"{operation} ends")
        return ({"kind": "taken_back", "removed": True} if operation == TAKE_BACK else {"kind": "ok"}), bytearray()

    def ended(self, memory_mb: int) -> Exception:
        return ServiceUnavailableError("The data worker running the request ended")

    def stop(self) -> None:
        pass


def test_a_cut_off_create_is_taken_back_only_after_another_clients_write_on_its_table_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(isolation, "_Worker", _Cutting)
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
