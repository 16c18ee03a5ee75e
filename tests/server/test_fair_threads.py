"""The data threads shared fairly between clients: one client holds at most its share of them and of
the queue, and a thread that frees goes to the waiting client holding the fewest. Checked on
``WorkerThreads`` itself, then through a served app with clients told apart by the address a
trusted proxy forwards."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
import anyio.abc
import pytest
import requests
from lance_namespace.errors import ServiceUnavailableError

from lance_iceberg_ns.server.capacity import WorkerThreads, client_share
from lance_iceberg_ns.server.routes import ROUTES

from .test_attacks_server import BlockingNamespace

DATA_ROUTE = next(route for route in ROUTES if route.operation == "count_table_rows")


@pytest.mark.parametrize(("threads", "share"), [(1, 1), (2, 1), (3, 2), (4, 3), (8, 6), (16, 12)])
def test_a_client_may_hold_all_but_a_quarter_of_the_threads(threads: int, share: int) -> None:
    assert client_share(threads) == share
    assert WorkerThreads(threads).reserved == threads - share


class _Calls:
    """Blocking calls run on ``threads``, each released by name: the order they started in, and
    each one's outcome in the order they ended (its name, or ``503: ...`` when it was refused)."""

    def __init__(self, threads: WorkerThreads) -> None:
        self.threads = threads
        self.started: list[str] = []
        self.outcomes: dict[str, str] = {}
        self.releases: dict[str, threading.Event] = {}
        self._all_released = False

    def call(self, name: str) -> Callable[[], str]:
        release = self._release_of(name)

        def blocking() -> str:
            self.started.append(name)
            assert release.wait(30)
            return name

        return blocking

    async def run(self, name: str, client: str) -> None:
        try:
            self.outcomes[name] = await self.threads.run(DATA_ROUTE, self.call(name), client=client)
        except ServiceUnavailableError as error:
            self.outcomes[name] = f"503: {error}"

    async def start(self, group: anyio.abc.TaskGroup, client: str, count: int, apart: float = 0.0) -> None:
        """``count`` requests of ``client`` started in ``group``, named ``<client>0``, ``<client>1``..."""
        for index in range(count):
            group.start_soon(self.run, f"{client}{index}", client)
            await anyio.sleep(apart)

    def release(self, *names: str) -> None:
        for name in names:
            self._release_of(name).set()

    def release_all(self) -> None:
        """Every call, those to come too: the test is done with them."""
        self._all_released = True
        for release in self.releases.values():
            release.set()

    def refused(self) -> list[str]:
        return [name for name, outcome in self.outcomes.items() if outcome.startswith("503: ")]

    def _release_of(self, name: str) -> threading.Event:
        release = self.releases.setdefault(name, threading.Event())
        if self._all_released:
            release.set()
        return release


async def _until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(10):
        while not condition():
            await anyio.sleep(0.01)


def test_another_client_finds_a_thread_while_one_client_fills_its_share() -> None:
    calls = _Calls(WorkerThreads(4))

    async def main() -> None:
        async with anyio.create_task_group() as group:
            await calls.start(group, "a", 6)
            await _until(lambda: len(calls.started) == 3)
            await anyio.sleep(0.1)
            assert (
                sorted(calls.started) == ["a0", "a1", "a2"] and calls.threads.waiting == 3
            )  # the fourth thread is kept
            group.start_soon(calls.run, "b0", "b")
            await _until(lambda: "b0" in calls.started)  # at once, beside a's three
            calls.release("b0")
            await _until(lambda: list(calls.outcomes) == ["b0"])
            assert calls.threads.running("a") == 3  # a's waiting requests do not take b's thread
            calls.release_all()

    anyio.run(main)
    assert sorted(calls.outcomes.values()) == ["a0", "a1", "a2", "a3", "a4", "a5", "b0"]


def test_two_clients_cannot_hold_every_thread_between_them() -> None:
    calls = _Calls(WorkerThreads(8))  # a client: 6 threads; the last 2 for clients holding none

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for client, waiting in (("a", 2), ("b", 9)):
                await calls.start(group, client, 8)
                await _until(lambda waiting=waiting: calls.threads.waiting >= waiting)
            assert (calls.threads.running("a"), calls.threads.running("b")) == (6, 1)  # one thread still free
            group.start_soon(calls.run, "c0", "c")
            await _until(lambda: "c0" in calls.started)
            calls.release_all()

    anyio.run(main)


def test_a_thread_that_frees_goes_to_the_waiting_client_holding_the_fewest() -> None:
    calls = _Calls(WorkerThreads(4))

    async def main() -> None:
        async with anyio.create_task_group() as group:
            await calls.start(group, "a", 3)
            await _until(lambda: len(calls.started) == 3)
            group.start_soon(calls.run, "b0", "b")
            await _until(lambda: len(calls.started) == 4)  # every thread taken: 3 by a, 1 by b
            group.start_soon(calls.run, "a3", "a")  # waits first ...
            await anyio.sleep(0.1)
            group.start_soon(calls.run, "b1", "b")
            group.start_soon(calls.run, "c0", "c")  # ... then b and c, holding one and none
            await anyio.sleep(0.1)
            assert calls.threads.waiting == 3
            calls.release("a0")  # a thread frees: c holds none
            await _until(lambda: len(calls.started) == 5)
            assert calls.started[4] == "c0"
            calls.release("c0")  # a holds 2, b 1: the free thread is kept for a client holding none
            await anyio.sleep(0.2)
            assert len(calls.started) == 5
            group.start_soon(calls.run, "d0", "d")  # and d, holding none, takes it at once
            await _until(lambda: len(calls.started) == 6)
            assert calls.started[5] == "d0"
            calls.release("b0")  # b holds none now: its turn, though a waited longer
            await _until(lambda: len(calls.started) == 7)
            assert calls.started[6] == "b1"
            calls.release("d0")  # a holds 2: the one thread free stays for a client holding none
            await anyio.sleep(0.2)
            assert len(calls.started) == 7
            calls.release("a1")  # a holds 1, two free: a may take one
            await _until(lambda: len(calls.started) == 8)
            assert calls.started[7] == "a3"
            calls.release_all()

    anyio.run(main)


def test_one_client_may_fill_only_its_share_of_the_queue() -> None:
    calls = _Calls(WorkerThreads(2))  # a client: 1 thread, 4 of the 8 waiting places

    async def main() -> None:
        async with anyio.create_task_group() as group:
            await calls.start(group, "a", 7, apart=0.02)
            await _until(lambda: len(calls.refused()) == 2)
            group.start_soon(calls.run, "b0", "b")
            await _until(lambda: "b0" in calls.started)
            calls.release_all()

    anyio.run(main)
    assert calls.refused() == ["a5", "a6"]
    assert all("from this client" in calls.outcomes[name] for name in calls.refused())


def test_two_clients_filling_the_queue_between_them_cannot_keep_a_third_out() -> None:
    calls = _Calls(WorkerThreads(2))  # 1 thread each; 8 waiting places, 4 per client

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for index in range(5):  # a0 and b0 hold the two threads; four of each wait
                for client in "ab":
                    group.start_soon(calls.run, f"{client}{index}", client)
                    await anyio.sleep(0.01)
            await _until(lambda: calls.threads.waiting == 8)
            group.start_soon(calls.run, "c0", "c")  # full: c takes the place of the newest of a client with more
            await _until(lambda: len(calls.outcomes) == 1)
            assert calls.threads.waiting == 8 and len(calls.threads._waiting["c"]) == 1
            group.start_soon(calls.run, "c1", "c")  # and again: b and a have 4 and 3, c 1
            await _until(lambda: len(calls.outcomes) == 2)
            group.start_soon(calls.run, "c2", "c")  # a and b have 3 each, c 2: no longer more than one more
            await _until(lambda: len(calls.outcomes) == 3)
            calls.release_all()

    anyio.run(main)
    outcomes = calls.outcomes
    pushed_out = sorted(name for name in calls.refused() if "behind" in outcomes[name])
    assert pushed_out == ["a4", "b4"], outcomes
    assert outcomes["c2"].startswith("503: The server is busy: 8 data requests are waiting"), outcomes["c2"]
    assert [outcomes[name] for name in ("c0", "c1")] == ["c0", "c1"]


def test_a_request_cancelled_while_waiting_leaves_its_place_and_one_given_a_thread_passes_it_on() -> None:
    calls = _Calls(WorkerThreads(2))

    async def main() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(calls.run, "a0", "a")
            await _until(lambda: calls.started == ["a0"])
            async with anyio.create_task_group() as cancelled:
                cancelled.start_soon(calls.run, "a1", "a")
                await _until(lambda: calls.threads.waiting == 1)
                cancelled.cancel_scope.cancel()
            assert calls.threads.waiting == 0 and "a" not in calls.threads._waiting
            group.start_soon(calls.run, "a2", "a")
            await _until(lambda: calls.threads.waiting == 1)
            calls.release("a0")
            await _until(lambda: calls.started == ["a0", "a2"])
            calls.release("a2")
        assert calls.threads._running == 0 and calls.threads._running_by_client == {} and calls.threads.waiting == 0

    anyio.run(main)


def test_a_served_client_is_answered_while_another_fills_its_share_of_the_data_threads() -> None:
    """Through the app: clients behind a trusted proxy (here loopback) are told apart by the address
    it forwards; the one that sends eight slow requests at once holds three of the four threads."""
    from lance_iceberg_ns.server import serve_in_background

    backend = BlockingNamespace()
    with serve_in_background(backend, data_threads=4) as running, ThreadPoolExecutor(8) as pool:
        count = f"{running.uri}/v1/table/a$b/count_rows"

        def post_as(address: str) -> requests.Response:
            return requests.post(count, json={}, headers={"X-Forwarded-For": address}, timeout=60)

        try:
            attacker = [pool.submit(post_as, "203.0.113.7") for _ in range(8)]
            for _ in range(3):
                assert backend.started.acquire(timeout=30)
            assert not backend.started.acquire(timeout=1)  # the fourth thread stays free
            victim: dict[str, Any] = {}

            def victim_request() -> None:
                started = time.monotonic()
                victim["answer"] = requests.post(
                    count, json={}, headers={"X-Forwarded-For": "198.51.100.2"}, timeout=60
                )
                victim["seconds"] = time.monotonic() - started

            thread = threading.Thread(target=victim_request)
            thread.start()
            assert backend.started.acquire(timeout=5)  # the victim's request runs now
        finally:
            backend.release.set()
        thread.join(30)
        statuses = [future.result().status_code for future in attacker]
    assert victim["answer"].status_code == 200 and victim["seconds"] < 2
    assert statuses == [200] * 8  # the attacker's waiting requests ran in turn


def test_requests_whose_clients_went_away_while_they_waited_are_never_run() -> None:
    """Sent, queued, and the connection closed: the request leaves the queue, and its operation
    never runs (nobody would read its answer)."""
    from lance_iceberg_ns.server import serve_in_background

    backend = BlockingNamespace()
    with serve_in_background(backend, data_threads=1) as running:
        host, port = running.uri.removeprefix("http://").split(":")
        request = (
            f"POST /v1/table/a$b/count_rows HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            "Content-Length: 2\r\n\r\n{}"
        ).encode()

        def sent(address: str) -> socket.socket:
            connection = socket.create_connection((host, int(port)), source_address=(address, 0))
            connection.sendall(request)
            return connection

        holding = sent("127.0.0.2")
        assert backend.started.acquire(timeout=30)  # the one thread is taken
        queued = [sent(f"127.0.0.{3 + index}") for index in range(3)]
        time.sleep(1)  # they reach the queue
        for connection in queued:
            connection.close()
        time.sleep(1)  # and leave it
        backend.release.set()
        assert holding.recv(1 << 16).startswith(b"HTTP/1.1 200")
        holding.close()
        again = requests.post(f"{running.uri}/v1/table/a$b/count_rows", json={}, timeout=30)
    assert again.status_code == 200
    assert backend.started.acquire(timeout=5)  # the request after them ran ...
    assert not backend.started.acquire(timeout=1)  # ... and none of the three that went away
