"""The connections a server keeps open: past ``max_connections`` the oldest one with no request
under way (or one still trickling its head) is closed to make room, so that a flood of connections
that send nothing, or trickle a head, never locks out a client that sends its request; one that
uploads a body is never closed for room."""

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
        return connection.recv(1) == b""
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


def test_a_connection_uploading_a_body_is_never_closed_for_room(running: RunningServer) -> None:
    uploader = _connect(running)
    body = b"x" * 1000
    uploader.sendall(_head(INSERT, content_type="application/vnd.apache.arrow.stream", content_length="1000"))
    uploader.sendall(body[:10])
    time.sleep(0.2)
    with _sockets(running, FLOOD):
        time.sleep(0.3)
        assert not _closed_by_server(uploader)
        uploader.settimeout(5)
        uploader.sendall(body[10:])
        status_line = uploader.recv(200).split(b"\r\n", 1)[0]
        assert status_line.startswith(b"HTTP/1.1 "), status_line  # answered (400: not Arrow), not cut off
    uploader.close()


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
        connections.head_read(connection)  # both bodies under way
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
