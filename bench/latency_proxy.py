"""A TCP proxy on 127.0.0.1 that puts a catalog one network round trip away.

Every chunk of bytes is held for half the round trip in each direction, in order, so that
requests on one connection still pipeline and many connections run side by side. Connections stay
open as long as both ends keep them (HTTP keep-alive works through it). A new connection's first
bytes wait one more round trip, as a TCP handshake with a remote server costs: a client that keeps
its connections pays it once, one that opens a connection per request pays it every time.

With ``count_requests`` it also logs each HTTP/1.1 request a client sends (its method and target,
such as ``GET /bucket/key?list-type=2``), found in the byte stream as it passes; the bytes are
forwarded unchanged, so signed requests (S3's SigV4) stay valid.

In a benchmark it runs in its own process, so that it takes no interpreter time from the client
being measured; that process stops by itself when its parent goes (its standard input closes):

    with proxy_process("http://127.0.0.1:8181", round_trip_ms=20) as endpoint:
        ...  # talk to endpoint instead of the catalog

    with counting_proxy_process("http://127.0.0.1:8333", round_trip_ms=20) as proxied:
        ...  # talk to proxied.endpoint
        proxied.take()  # [(1, "PUT /bucket/key"), ...]: the requests since the last take

    python bench/latency_proxy.py --upstream http://127.0.0.1:8181 --round-trip-ms 20
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit


class LatencyProxy:
    """The proxy, served by an event loop on a thread of its own; ``start`` and ``stop`` it, or use
    it as a context manager. ``connections`` counts the connections accepted, ``peak_in_flight``
    the most requests in flight at one moment (connections whose bytes went upstream and whose
    answer has not come back yet). With ``count_requests``, ``take_requests`` returns the HTTP
    requests clients sent since its last call, each with the number of its connection."""

    def __init__(
        self, upstream: str, round_trip_ms: float, handshake: bool = True, count_requests: bool = False
    ) -> None:
        parts = urlsplit(upstream)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"upstream must be http://host:port, got {upstream!r}")
        self.upstream_host, self.upstream_port = parts.hostname, parts.port
        self.one_way = round_trip_ms / 2000.0
        self.handshake = handshake
        self.port = 0
        self.connections = 0
        self.in_flight = 0
        self.peak_in_flight = 0
        self.loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopping: asyncio.Event | None = None
        self.open_ends: set[_Pipe] = set()
        self.count_requests = count_requests
        self._requests: list[tuple[int, str]] = []
        self._requests_lock = threading.Lock()  # appended on the loop's thread, taken on others

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LatencyProxy:
        self._thread = threading.Thread(target=self._run, name="latency-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the latency proxy did not start")
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._stopping is not None:
            self.loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(10)
        self._thread = None

    def __enter__(self) -> LatencyProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            self.loop.run_until_complete(self._serve_until_stopped())
        finally:
            self.loop.close()

    async def _serve_until_stopped(self) -> None:
        self._stopping = asyncio.Event()
        server = await self.loop.create_server(self._client_connected, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stopping.wait()
            server.close()
            for end in list(self.open_ends):
                if end.transport is not None:
                    end.transport.abort()
            await asyncio.sleep(0)

    def _client_connected(self) -> _Pipe:
        self.connections += 1
        client = _Pipe(self, client=None)
        client.number = self.connections
        return client

    def take_requests(self) -> list[tuple[int, str]]:
        """The requests received since the last call, in the order they came: the connection's
        number (1 for the first accepted) and the request (``METHOD target``)."""
        with self._requests_lock:
            taken, self._requests = self._requests, []
        return taken

    def _requests_received(self, connection: int, requests: list[str]) -> None:
        with self._requests_lock:
            self._requests.extend((connection, request) for request in requests)

    def _request_sent(self, client: _Pipe) -> None:
        if not client.awaiting_answer:
            client.awaiting_answer = True
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def _answer_delivered(self, client: _Pipe) -> None:
        if client.awaiting_answer:
            client.awaiting_answer = False
            self.in_flight -= 1


class _Pipe(asyncio.Protocol):
    """One end of a proxied connection, the client's or the upstream's: what it receives is
    written to the other end ``one_way`` later, in order. Protocol callbacks and timers rather
    than streams and tasks, so that the proxy costs the machine little next to what it measures."""

    def __init__(self, proxy: LatencyProxy, client: _Pipe | None) -> None:
        self.proxy = proxy
        self.client = client  # None on the client's end; on the upstream end, the client's end
        self.peer: _Pipe | None = client
        self.transport: asyncio.Transport | None = None
        self.pending: deque[bytes | None] = deque()  # None: this end closed, so close the other
        self.not_before = 0.0
        self.awaiting_answer = False  # on the client's end: its request went upstream, no answer yet
        self.reader = _RequestReader() if client is None and proxy.count_requests else None
        self.number = 0  # on the client's end: which connection this is, counted from 1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.proxy.open_ends.add(self)
        if self.client is not None:  # the upstream end, made for a client's end waiting for it
            self.client.peer = self
            if self.client.transport is not None:
                self.client.transport.resume_reading()
            return
        loop = self.proxy.loop
        # SYN out, SYN-ACK back, then the first bytes out: they reach the server a round trip
        # later than on a connection already open.
        self.not_before = loop.time() + (2 * self.proxy.one_way if self.proxy.handshake else 0.0)
        transport.pause_reading()  # until there is an upstream connection to write to
        host, port = self.proxy.upstream_host, self.proxy.upstream_port
        connecting = asyncio.ensure_future(loop.create_connection(lambda: _Pipe(self.proxy, self), host, port))
        connecting.add_done_callback(self._upstream_attempted)

    def _upstream_attempted(self, connecting: asyncio.Future[tuple[asyncio.Transport, _Pipe]]) -> None:
        if (connecting.cancelled() or connecting.exception() is not None) and self.transport is not None:
            self.transport.close()  # the upstream refused: so does the proxy

    def data_received(self, data: bytes) -> None:
        if self.reader is not None:
            requests = self.reader.feed(data)
            if requests:
                self.proxy._requests_received(self.number, requests)
        self._later(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.proxy.open_ends.discard(self)
        self._later(None)

    def _later(self, data: bytes | None) -> None:
        loop = self.proxy.loop
        self.pending.append(data)
        loop.call_at(max(loop.time(), self.not_before) + self.proxy.one_way, self._forward)

    def _forward(self) -> None:
        data = self.pending.popleft()  # every timer takes the oldest chunk, so order is kept
        peer = self.peer
        if peer is None or peer.transport is None:
            return
        if data is None:
            peer.transport.close()  # once it has written what it holds
            return
        if self.client is None:
            self.proxy._request_sent(self)
        else:  # counted before the write: the client may act on the answer at once
            self.proxy._answer_delivered(self.client)
        peer.transport.write(data)


class _RequestReader:
    """Finds the requests in one client connection's bytes (HTTP/1.1, pipelined or not): each
    head's request line, then its body skipped by ``Content-Length`` or chunk by chunk."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.body_left = 0  # bytes of the current body (or chunk and its CRLF) still to pass
        self.state = "head"  # or "chunk-size", "trailer" in a chunked body

    def feed(self, data: bytes) -> list[str]:
        """The request lines (``METHOD target``) that begin in ``data``."""
        if self.body_left >= len(data) and not self.buffer:  # the middle of an upload: no copy
            self.body_left -= len(data)
            return []
        self.buffer += data
        found: list[str] = []
        while True:
            if self.body_left:
                passed = min(self.body_left, len(self.buffer))
                del self.buffer[:passed]
                self.body_left -= passed
                if self.body_left:
                    return found
            separator = b"\r\n\r\n" if self.state == "head" else b"\r\n"
            end = self.buffer.find(separator)
            if end < 0:
                return found
            text = bytes(self.buffer[:end]).decode("latin-1")
            del self.buffer[: end + len(separator)]
            if self.state == "head":
                request_line, *fields = text.split("\r\n")
                method, target = request_line.split(" ")[:2]
                found.append(f"{method} {target}")
                headers = {name.strip().lower(): value.strip() for name, _, value in (f.partition(":") for f in fields)}
                if "chunked" in headers.get("transfer-encoding", "").lower():
                    self.state = "chunk-size"
                else:
                    self.body_left = int(headers.get("content-length", "0"))
            elif self.state == "chunk-size":
                size = int(text.split(";")[0], 16)
                if size:
                    self.body_left = size + 2  # the chunk and the CRLF after it
                else:
                    self.state = "trailer"
            elif not text:  # the empty line that ends the trailer
                self.state = "head"


@contextlib.contextmanager
def proxy_process(upstream: str, round_trip_ms: float) -> Iterator[str]:
    """Run the proxy in a child process for the duration; yields its endpoint. The child exits
    when this block ends, and by itself if this process dies (its standard input closes)."""
    with _child(upstream, round_trip_ms, count_requests=False) as (endpoint, _process):
        yield endpoint


@dataclass
class ProxiedRequests:
    """A counting proxy in a child process (``counting_proxy_process``): its endpoint, ``take`` for
    the requests it received since the last take, and ``connections``, the connections it had
    accepted by then."""

    endpoint: str
    process: subprocess.Popen[str]
    connections: int = 0

    def take(self) -> list[tuple[int, str]]:
        """The requests received since the last call, in the order they came: the number of the
        connection each came on (1 for the first) and the request (``METHOD target``)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("take\n")
        self.process.stdin.flush()
        taken = json.loads(self.process.stdout.readline())
        self.connections = taken["connections"]
        return [(connection, request) for connection, request in taken["requests"]]


@contextlib.contextmanager
def counting_proxy_process(upstream: str, round_trip_ms: float) -> Iterator[ProxiedRequests]:
    """``proxy_process`` that also logs every HTTP request; ``take`` asks the child for them."""
    with _child(upstream, round_trip_ms, count_requests=True) as (endpoint, process):
        yield ProxiedRequests(endpoint, process)


@contextlib.contextmanager
def _child(upstream: str, round_trip_ms: float, count_requests: bool) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    command = [sys.executable, __file__, "--upstream", upstream, "--round-trip-ms", str(round_trip_ms)]
    if count_requests:
        command.append("--count-requests")
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        endpoint = process.stdout.readline().strip()
        if not endpoint.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"the latency proxy did not start: {endpoint!r}")
        yield endpoint, process
    finally:
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream", required=True, help="http://host:port of the catalog")
    parser.add_argument("--round-trip-ms", type=float, required=True)
    parser.add_argument("--count-requests", action="store_true", help="answer each 'take' line on stdin")
    args = parser.parse_args()
    with LatencyProxy(args.upstream, args.round_trip_ms, count_requests=args.count_requests) as proxy:
        print(proxy.endpoint, flush=True)
        if not args.count_requests:
            sys.stdin.read()  # until the parent closes our input, or exits
        for line in sys.stdin:  # until the parent closes our input, or exits
            if line.strip() == "take":
                taken = {"requests": proxy.take_requests(), "connections": proxy.connections}
                print(json.dumps(taken), flush=True)


if __name__ == "__main__":
    main()
