"""A TCP proxy on 127.0.0.1 that puts a catalog one network round trip away.

Every chunk of bytes is held for half the round trip in each direction, in order, so that
requests on one connection still pipeline and many connections run side by side. Connections stay
open as long as both ends keep them (HTTP keep-alive works through it). A new connection's first
bytes wait one more round trip, as a TCP handshake with a remote server costs: a client that keeps
its connections pays it once, one that opens a connection per request pays it every time.

In a benchmark it runs in its own process, so that it takes no interpreter time from the client
being measured; that process stops by itself when its parent goes (its standard input closes):

    with proxy_process("http://127.0.0.1:8181", round_trip_ms=20) as endpoint:
        ...  # talk to endpoint instead of the catalog

    python bench/latency_proxy.py --upstream http://127.0.0.1:8181 --round-trip-ms 20
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterator
from urllib.parse import urlsplit


class LatencyProxy:
    """The proxy, served by an event loop on a thread of its own; ``start`` and ``stop`` it, or use
    it as a context manager. ``connections`` counts the connections accepted, ``peak_in_flight``
    the most requests in flight at one moment (connections whose bytes went upstream and whose
    answer has not come back yet)."""

    def __init__(self, upstream: str, round_trip_ms: float, handshake: bool = True) -> None:
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
        return _Pipe(self, client=None)

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


@contextlib.contextmanager
def proxy_process(upstream: str, round_trip_ms: float) -> Iterator[str]:
    """Run the proxy in a child process for the duration; yields its endpoint. The child exits
    when this block ends, and by itself if this process dies (its standard input closes)."""
    command = [sys.executable, __file__, "--upstream", upstream, "--round-trip-ms", str(round_trip_ms)]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        endpoint = process.stdout.readline().strip()
        if not endpoint.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"the latency proxy did not start: {endpoint!r}")
        yield endpoint
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
    args = parser.parse_args()
    with LatencyProxy(args.upstream, args.round_trip_ms) as proxy:
        print(proxy.endpoint, flush=True)
        sys.stdin.read()  # until the parent closes our input, or exits


if __name__ == "__main__":
    main()
