"""The bodies a server holds at once, all clients together: request bodies as they upload and
answers until their clients take them. Beyond ``max_held_bytes`` a request is answered 503 at
once, and a client that stops taking its answer is cut off after the read timeout, so that what
it held is let go."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from lance_namespace import LanceNamespace

from lance_iceberg_ns.server import RunningServer, serve_in_background

MIB = 1 << 20
READ_TIMEOUT = 1.5


class Answering(LanceNamespace):
    """A backend whose query answers ``answer_bytes`` bytes and whose insert takes any body."""

    def __init__(self, answer_bytes: int) -> None:
        self.answer = b"x" * answer_bytes
        self.inserted: list[int] = []

    def namespace_id(self) -> str:
        return "Answering"

    def namespace_exists(self, request: Any) -> None:  # type: ignore[override]
        return None

    def query_table(self, request: Any) -> bytes:  # type: ignore[override]
        return self.answer

    def insert_into_table(self, request: Any, request_data: bytes) -> dict[str, Any]:  # type: ignore[override]
        self.inserted.append(len(request_data))
        return {"transaction_id": "t"}


@contextlib.contextmanager
def _served(answer_bytes: int, max_held_mb: int) -> Iterator[tuple[RunningServer, Answering]]:
    backend = Answering(answer_bytes)
    options = {"max_body_bytes": MIB, "max_data_body_bytes": 4 * MIB, "max_held_bytes": max_held_mb * MIB}
    with serve_in_background(backend, request_read_timeout=READ_TIMEOUT, **options) as running:
        yield running, backend


def _connect(running: RunningServer, receive_buffer: int | None = None, source: str = "") -> socket.socket:
    """A connection to the server, from ``source`` (a loopback address: a client of its own) if given."""
    host, port = running.uri.removeprefix("http://").rsplit(":", 1)
    connection = socket.socket()
    if receive_buffer:  # a client that takes little at a time
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    if source:
        connection.bind((source, 0))
    connection.settimeout(30)
    connection.connect((host, int(port)))
    return connection


def _head(path: str, **headers: str) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: x",
        *(f"{name.replace('_', '-')}: {value}" for name, value in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


INSERT = "/v1/table/a$b/insert"
QUERY, QUERY_BODY = "/v1/table/a$b/query", {"k": 1, "vector": {}}
SENT_QUERY = b'{"k":1,"vector":{}}'


def _send_query(connection: socket.socket) -> None:
    connection.sendall(_head(QUERY, content_type="application/json", content_length=str(len(SENT_QUERY))) + SENT_QUERY)


def test_bodies_uploading_at_once_are_held_within_the_limit_and_the_next_is_503_at_once() -> None:
    with _served(10, max_held_mb=8) as (running, backend):
        # three clients, 4, 2.4 and 2 MiB declared, 3.6, 2.3 and 1.9 MiB sent: the server holds what
        # arrived (two large holders within three quarters of the room, a small one in the last quarter)
        uploading = [_connect(running, source=f"127.0.0.{2 + index}") for index in range(3)]
        for connection, declared, sent in zip(uploading, (40, 24, 20), (36, 23, 19), strict=True):
            length = str(declared * MIB // 10)
            connection.sendall(_head(INSERT, content_type="application/vnd.apache.arrow.stream", content_length=length))
            connection.sendall(b"\0" * (sent * MIB // 10))
            time.sleep(0.1)
        time.sleep(0.3)
        started = time.monotonic()
        refused = requests.post(running.uri + INSERT, data=b"\0" * MIB, timeout=10)
        assert time.monotonic() - started < 1
        assert (refused.status_code, refused.json()["code"]) == (503, 17), refused.text
        assert "busy" in refused.json()["error"] and "7.6 MiB" in refused.json()["error"]
        catalog = requests.post(f"{running.uri}/v1/namespace/a/exists", json={}, timeout=5)
        assert catalog.status_code == 200  # a small body still has room
        for connection in uploading:
            connection.close()
        time.sleep(0.3)  # the server sees them go and lets their bodies go
        again = requests.post(running.uri + INSERT, data=b"\0" * MIB, timeout=10)
    assert again.status_code != 503, again.text
    assert backend.inserted == [MIB]


def test_one_client_holds_at_most_its_share_and_another_clients_body_still_fits() -> None:
    """One client uploading two large bodies at once holds at most three quarters of the room (6
    of 8 MiB): its second body is refused, and another client's insert has room. Before the room
    was shared, both bodies were held and every other client's large body was refused."""
    with _served(10, max_held_mb=8) as (running, backend):
        first = _connect(running, source="127.0.0.2")
        first.sendall(_head(INSERT, content_type="application/vnd.apache.arrow.stream", content_length=str(4 * MIB)))
        first.sendall(b"\0" * (36 * MIB // 10))
        time.sleep(0.3)
        second = _connect(running, source="127.0.0.2")
        second.sendall(_head(INSERT, content_type="application/vnd.apache.arrow.stream", content_length=str(4 * MIB)))
        with contextlib.suppress(OSError):
            second.sendall(b"\0" * (36 * MIB // 10))
        answer = second.recv(1 << 16)
        assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
        assert b"this client's requests hold" in answer
        other = _connect(running, source="127.0.0.3")
        other.sendall(_head(INSERT, content_type="application/vnd.apache.arrow.stream", content_length=str(MIB)))
        other.sendall(b"\0" * MIB)
        assert other.recv(1 << 16).startswith(b"HTTP/1.1 200")
        for connection in (first, second, other):
            connection.close()
    assert backend.inserted == [MIB]


def test_lengths_declared_and_never_sent_hold_nothing() -> None:
    """A client that declares a large body and sends none of it costs a socket, not room: counting
    declared lengths let four heads of 256 MiB refuse every other large body for minutes."""
    with _served(10, max_held_mb=8) as (running, backend):
        declared = [_connect(running) for _ in range(4)]
        for connection in declared:
            connection.sendall(
                _head(INSERT, content_type="application/vnd.apache.arrow.stream", content_length=str(4 * MIB))
            )
        time.sleep(0.3)
        assert _guard(running).held.held == 0
        taken = requests.post(running.uri + INSERT, data=b"\0" * (2 * MIB), timeout=10)
        for connection in declared:
            connection.close()
    assert taken.status_code == 200, taken.text
    assert backend.inserted == [2 * MIB]


def test_a_body_streamed_without_a_length_is_refused_once_it_passes_the_room_left() -> None:
    with _served(10, max_held_mb=6) as (running, _):
        holding = _connect(running)
        holding.sendall(_head(INSERT, content_length=str(4 * MIB)) + b"\0" * (4 * MIB - 100))
        time.sleep(0.3)

        def chunks() -> Iterator[bytes]:
            for _ in range(4):  # 4 MiB, where about 2 are left
                yield b"\0" * MIB

        refused = requests.post(running.uri + INSERT, data=chunks(), timeout=10)
        holding.close()
    assert (refused.status_code, refused.json()["code"]) == (503, 17), refused.text


def test_unread_answers_are_held_within_the_limit_and_let_go_once_their_clients_are_cut_off() -> None:
    answer = 24 * MIB  # beyond what the kernel's socket buffers take for a client that reads nothing
    with _served(answer, max_held_mb=50) as (running, _):
        unread = [_connect(running, receive_buffer=4096) for _ in range(2)]
        for connection in unread:
            _send_query(connection)
        time.sleep(0.5)  # both answers are under way, neither is read
        refused = requests.post(running.uri + QUERY, json=QUERY_BODY, timeout=10)
        assert (refused.status_code, refused.json()["code"]) == (503, 17), refused.status_code
        small = requests.post(f"{running.uri}/v1/namespace/a/exists", json={}, timeout=5)
        assert small.status_code == 200
        time.sleep(READ_TIMEOUT + 1.5)  # the clients that take nothing are cut off, their answers let go
        taken = requests.post(running.uri + QUERY, json=QUERY_BODY, timeout=30)
        for connection in unread:
            connection.close()
    assert taken.status_code == 200 and len(taken.content) == answer


def test_a_client_reading_its_answer_slowly_but_steadily_gets_all_of_it() -> None:
    answer = 8 * MIB
    with _served(answer, max_held_mb=50) as (running, _):
        connection = _connect(running, receive_buffer=4096)
        _send_query(connection)
        received, started = 0, time.monotonic()
        while received < answer:
            chunk = connection.recv(1 << 20)
            if not chunk:
                break
            received += len(chunk)
            if time.monotonic() - started < READ_TIMEOUT * 2:
                time.sleep(0.01)  # slow, for longer than the read timeout, never stopped
        connection.close()
    assert received > answer


@pytest.mark.parametrize("held_mb", [1, 4])
def test_the_limit_is_never_below_one_largest_body(held_mb: int) -> None:
    with _served(10, max_held_mb=held_mb) as (running, backend):
        answer = requests.post(running.uri + INSERT, data=b"\0" * (4 * MIB - 100), timeout=10)
    assert answer.status_code == 200, answer.text
    assert backend.inserted == [4 * MIB - 100]


def test_held_bytes_go_back_to_zero_after_every_kind_of_end() -> None:
    with _served(2 * MIB, max_held_mb=8) as (running, _):
        requests.post(running.uri + INSERT, data=b"\0" * MIB, timeout=10)
        guard = _guard(running)
        requests.post(running.uri + QUERY, json=QUERY_BODY, timeout=10)
        requests.post(running.uri + INSERT, data=b"\0" * (5 * MIB), timeout=10)  # 413
        cut = _connect(running)
        cut.sendall(_head(INSERT, content_length=str(3 * MIB)) + b"\0" * 1000)
        cut.close()
        deadline = time.monotonic() + 10
        while guard.held.held and time.monotonic() < deadline:
            time.sleep(0.05)
    assert guard.held.held == 0


def _guard(running: RunningServer) -> Any:
    from lance_iceberg_ns.server.guard import GuardMiddleware

    stack = running._server.config.app.middleware_stack  # built at the first request
    while not isinstance(stack, GuardMiddleware):
        stack = stack.app
    return stack


def test_a_client_taking_its_answer_at_a_trickle_is_cut_off_after_a_second_per_mib() -> None:
    answer = 8 * MIB  # to be taken within the read timeout and 8 s
    with _served(answer, max_held_mb=50) as (running, _):
        connection = _connect(running, receive_buffer=4096)
        _send_query(connection)
        received, started = 0, time.monotonic()
        with contextlib.suppress(ConnectionResetError):
            while time.monotonic() - started < 60:
                chunk = connection.recv(8192)
                if not chunk:
                    break
                received += len(chunk)
                time.sleep(0.08)  # about 100 KB/s: more than the 64 KiB each read timeout, yet 80 s in all
        took = time.monotonic() - started
        connection.close()
    assert received < answer and took < READ_TIMEOUT + 8 + 10, (received, took)


def test_the_room_kept_for_small_holders_takes_a_clients_second_body_but_not_a_large_holders() -> None:
    from lance_iceberg_ns.server.capacity import HeldBytes

    held = HeldBytes(8 * MIB, largest=4 * MIB)  # a client holds at most 6 MiB; the last 2 MiB are for small holders
    assert held.take(4 * MIB, "attacker") and held.take(2 * MIB, "attacker")  # 6 MiB: its share
    assert not held.take(MIB, "attacker")
    assert held.take(MIB, "victim") and held.take(MIB, "victim")  # its second body too, within the kept room
    assert not held.take(1, "victim") and not held.take(1, "third")  # the room is full
    held.give_back(MIB, "victim")
    assert held.take(MIB, "third")
