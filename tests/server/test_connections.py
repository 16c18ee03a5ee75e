"""The connections a server keeps open: past ``max_connections`` one is closed to make room, oldest
first among those with no request under way, then those trickling a head, then those trickling a
body, so that no flood of connections that send nothing, or send slowly, locks out a client that
sends its request; one whose request is read is never closed for room."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from lance_iceberg_ns.server import RunningServer, serve_in_background
from lance_iceberg_ns.server.connections import RESERVED_FILES, Connections

from .test_held_bodies import INSERT, Answering, _connect, _head

CAP = 40
FLOOD = 5 * CAP


@pytest.fixture()
def running() -> Iterator[RunningServer]:
    with serve_in_background(Answering(10), request_read_timeout=30, max_connections=CAP) as running:
        yield running


@contextlib.contextmanager
def _sockets(running: RunningServer, count: int, first_bytes: bytes = b"") -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    try:
        for _ in range(count):
            connection = _connect(running)
            if first_bytes:
                connection.sendall(first_bytes)
            opened.append(connection)
        yield opened
    finally:
        for connection in opened:
            connection.close()


def _closed_by_server(connection: socket.socket) -> bool:
    connection.settimeout(0.05)
    try:
        return connection.recv(1, socket.MSG_PEEK) == b""
    except (TimeoutError, BlockingIOError):
        return False
    except OSError:  # reset
        return True


def _answered_quickly(running: RunningServer) -> float:
    started = time.monotonic()
    answer = requests.post(f"{running.uri}/v1/namespace/a$b/exists", json={}, timeout=2)
    assert answer.status_code == 200, answer.text
    return time.monotonic() - started


def _open_count(running: RunningServer) -> int:
    protocol: Any = running._server.config.http  # type: ignore[attr-defined]
    return int(protocol.open_connections.open)


def test_connections_that_send_nothing_make_room_for_one_that_sends_a_request(running: RunningServer) -> None:
    with _sockets(running, FLOOD) as flood:
        time.sleep(0.3)  # every one accepted
        assert _answered_quickly(running) < 2
        assert _open_count(running) <= CAP
        closed = sum(_closed_by_server(connection) for connection in flood)
        assert closed >= FLOOD - CAP, closed  # the oldest ones went first
        assert not _closed_by_server(flood[-1])  # the newest are kept


def test_connections_that_trickle_a_head_make_room_too(running: RunningServer) -> None:
    with _sockets(running, FLOOD, first_bytes=b"POST /v1/namespace/a$b/exists HTTP/1.1\r\nHost: x\r\n"):
        time.sleep(0.3)
        for _ in range(3):
            assert _answered_quickly(running) < 2
        assert _open_count(running) <= CAP


def test_connections_that_trickle_bodies_make_room_too(running: RunningServer) -> None:
    """Small bodies are not counted among those held: sent a byte at a time, they held every
    connection until their read deadline, and every new client was closed at once."""
    head = _head(INSERT, content_type="application/vnd.apache.arrow.stream", content_length="1000")
    with _sockets(running, FLOOD, first_bytes=head + b"x"):
        time.sleep(0.3)
        for _ in range(3):
            assert _answered_quickly(running) < 2
        assert _open_count(running) <= CAP


def test_a_connection_whose_request_is_read_is_never_closed_for_room() -> None:
    with serve_in_background(Answering(24 << 20), request_read_timeout=30, max_connections=CAP) as running:
        waiting = _connect(running, receive_buffer=4096)
        body = b'{"k":1,"vector":{}}'
        waiting.sendall(
            _head("/v1/table/a$b/query", content_type="application/json", content_length=str(len(body))) + body
        )
        time.sleep(0.5)  # its answer is under way, not taken
        with _sockets(running, FLOOD):
            time.sleep(0.3)
            assert not _closed_by_server(waiting)
        waiting.settimeout(5)
        assert waiting.recv(200).startswith(b"HTTP/1.1 200")
        waiting.close()


def test_room_is_made_from_the_idle_then_the_heads_then_the_bodies_oldest_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lance_iceberg_ns.server import connections as module

    class Connection:
        def __init__(self) -> None:
            self.transport = self
            self.aborted = False

        def abort(self) -> None:
            self.aborted = True

    monkeypatch.setattr(module, "GRACE_SECONDS", 0.0)
    connections = Connections(max_connections=4)
    uploading, heading, idle, fresh = Connection(), Connection(), Connection(), Connection()
    for connection in (uploading, heading, idle, fresh):
        assert connections.opened(connection, connection)  # type: ignore[arg-type]
    for connection in (uploading, heading):
        connections.begun(connection)
    connections.head_read(uploading)
    connections.begun(fresh)
    connections.head_read(fresh)
    connections.body_read(fresh)  # read: its answer is being made
    closed = []
    for _ in range(3):
        newcomer = Connection()
        assert connections.opened(newcomer, newcomer)  # type: ignore[arg-type]
        connections.begun(newcomer)
        connections.head_read(newcomer)
        connections.body_read(newcomer)
        closed.append(next(c for c in (uploading, heading, idle) if c.aborted and c not in closed))
    assert closed == [idle, heading, uploading] and not fresh.aborted


def test_when_no_connection_may_be_closed_the_new_one_is() -> None:
    class Transport:
        aborted = False

        def abort(self) -> None:
            self.aborted = True

    connections = Connections(max_connections=2)
    first, second, third = object(), object(), object()
    for connection in (first, second):
        assert connections.opened(connection, Transport())  # type: ignore[arg-type]
        connections.begun(connection)
        connections.head_read(connection)
        connections.body_read(connection)  # both read: their answers are being made
    refused = Transport()
    assert not connections.opened(third, refused)  # type: ignore[arg-type]
    assert refused.aborted and connections.open == 2
    connections.done(first)
    connections.closed(second)
    assert connections.opened(third, Transport())  # type: ignore[arg-type]


def test_the_cap_leaves_room_for_the_servers_own_files() -> None:
    import resource

    cap = Connections(max_connections=10**9).cap  # raises the soft file limit to the hard one first
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert soft == hard or hard == resource.RLIM_INFINITY
    assert cap == soft - RESERVED_FILES
    assert Connections(max_connections=7).cap == 7
