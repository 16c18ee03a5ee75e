"""Worker threads: the data routes get their own, so that slow queries never hold up the catalog.

Every request's work runs in a worker thread (but a read that a worker process answers is awaited
on the event loop, holding a data thread's place and no thread: ``run_on_loop``). A data operation
(a query, a write, an index build) may hold its thread for seconds, a catalog operation for
milliseconds; sharing anyio's one pool of 40 threads, 40 slow queries would leave a cheap
``namespace exists`` waiting behind them. The data routes therefore take their threads from a
limiter of their own, ``data_threads`` at a time; a data request beyond it waits its turn, and once
``WAITING_PER_THREAD`` times as many are waiting, the next is refused at once with
ServiceUnavailable (503), so that neither the wait nor the bodies held by waiting requests grow
without bound. The threads and the queue are shared fairly between clients (``WorkerThreads``).
Catalog routes keep anyio's default limiter, from which no data request takes a thread.

The data requests under way are counted here, on the event loop, rather than read from a second
limiter's statistics: one limiter per call instead of two, and each costs task-group checkpoints
on the query path.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.to_thread
from lance_namespace.errors import ServiceUnavailableError
from starlette.concurrency import run_in_threadpool

from lance_iceberg_ns.server.routes import Route
from lance_iceberg_ns.server.settings import (
    DEFAULT_DATA_THREADS,
    DEFAULT_DATA_WORKER_MEMORY_MB,
    SMALLEST_DATA_WORKER_MEMORY_MB,
)

WAITING_PER_THREAD = 4

T = TypeVar("T")


def client_share(data_threads: int) -> int:
    """How many data threads one client may hold at once: all but a quarter (at least one), which
    are kept for the others; with one thread, that one."""
    return data_threads - max(1, data_threads // 4) if data_threads > 1 else 1


class WorkerThreads:
    """Where each route's work runs: data routes on ``data_threads`` threads of their own (with a
    bounded queue, shared fairly between clients), catalog routes on anyio's default threads.

    **Fairness.** A client (its address, as the audit log has it: behind a trusted proxy, the one
    the proxy forwards) holds at most ``client_share`` of the data threads, and the last quarter
    (``reserved``) goes only to clients holding none, so that two clients cannot hold them all
    between them; a client has at most its share of the queue waiting. When a thread frees, it
    goes to the waiting client that holds the fewest, the longest-waiting first among equals. When
    the queue is full, a request from a client with fewer waiting than another takes the place of
    that other's newest (answered 503): clients that fill the queue between them cannot keep a third
    out of it. A few clients' slow requests (allocation bombs that run a worker to its ceiling,
    reads of crashing tables that cost a worker start each, CPU-heavy expressions) therefore never
    hold every thread: another client's request finds one free, or the next one that frees. Many
    clients (many addresses) with one slow request each can still."""

    def __init__(self, data_threads: int = DEFAULT_DATA_THREADS) -> None:
        if data_threads < 1:
            raise ValueError("data_threads must be at least 1")
        self.data_threads = data_threads
        self.most_waiting = data_threads * WAITING_PER_THREAD
        self.share = client_share(data_threads)
        self.reserved = data_threads - self.share  # threads only a client holding none may take
        self.most_waiting_per_client = max(1, self.most_waiting * self.share // data_threads)
        self._threads = anyio.CapacityLimiter(data_threads)  # never waits: requests are let in by _turns
        self._running = 0  # all of these are read and written on the event loop only
        self._queued = 0
        self._running_by_client: dict[str, int] = {}
        self._waiting: dict[str, collections.deque[_Turn]] = {}  # by client, oldest first
        self._arrivals = itertools.count()

    @property
    def waiting(self) -> int:
        """Data requests waiting for a thread."""
        return self._queued

    def check_room(self, route: Route, data: bool | None = None, client: str = "") -> None:
        """ServiceUnavailableError when ``route`` reads or writes data (or ``data`` says this request
        does) and ``client`` has its share of the queue waiting, or the queue is full and no other
        client has more than one more waiting than it; checked before a body is read, and again as
        the request takes its place in the queue."""
        if not (route.reads_or_writes_data if data is None else data):
            return
        mine = len(self._waiting.get(client, ()))
        if mine >= self.most_waiting_per_client:
            raise ServiceUnavailableError(
                f"The server is busy: {mine} data requests from this client are waiting for one of its "
                f"{self.data_threads} data threads, as many as one client may have waiting; retry later"
            )
        if self._queued >= self.most_waiting and self._longest_queue(beyond=mine + 1) is None:
            raise ServiceUnavailableError(
                f"The server is busy: {self._queued} data requests are waiting for one of its "
                f"{self.data_threads} data threads; retry later"
            )

    async def run(
        self,
        route: Route,
        function: Callable[..., T],
        *args: object,
        data: bool | None = None,
        client: str = "",
        gone: Gone | None = None,
        abandon: Callable[[], None] | None = None,
    ) -> T:
        """``function(*args)`` in a worker thread of ``route``'s kind (or of ``data``'s, for a
        request of a catalog route that opens a dataset), once it is the request's turn
        (``client``'s, for a data request). A request that must wait for its turn leaves the queue
        when ``gone`` returns (its client went away: ClientGone), so that requests nobody will read
        never hold places or threads; one whose client goes away while its call runs has ``abandon``
        called, if given (a read's worker is ended). A request cancelled while its call runs waits
        for the call (anyio shields it), so that the count stays that of the threads' calls."""
        data = route.reads_or_writes_data if data is None else data
        if not data:
            return await run_in_threadpool(function, *args)
        async with self._turn(route, client, gone):
            return await _unless_gone(anyio.to_thread.run_sync(function, *args, limiter=self._threads), gone, abandon)

    async def run_on_loop(
        self,
        route: Route,
        function: Callable[..., Awaitable[T]],
        *args: object,
        client: str = "",
        gone: Gone | None = None,
        abandon: Callable[[], None] | None = None,
    ) -> T:
        """``run`` for a data request whose work is awaited on the event loop (a read that a worker
        process answers, ``isolation``): it takes its turn and holds a place among the data threads
        as ``run``'s does, with no thread of its own."""
        async with self._turn(route, client, gone):
            return await _unless_gone(function(*args), gone, abandon)

    @contextlib.asynccontextmanager
    async def _turn(self, route: Route, client: str, gone: Gone | None) -> AsyncIterator[None]:
        """A data request's place among the data threads, once it is its turn."""
        self.check_room(route, True, client)  # no await between the check and joining the queue: the cap is exact
        await self._take_a_thread(client, gone)
        try:
            yield
        finally:
            self._give_back(client)

    def running(self, client: str) -> int:
        """Data requests of ``client`` holding a thread."""
        return self._running_by_client.get(client, 0)

    async def _take_a_thread(self, client: str, gone: Gone | None) -> None:
        if self._may_take(client):
            self._hold(client)  # a thread free and nobody waiting who may take it
            return
        if self._queued >= self.most_waiting:  # full, and check_room found a longer queue than this client's
            self._push_out(self._longest_queue(beyond=len(self._waiting.get(client, ())) + 1))
        turn = _Turn(next(self._arrivals))
        self._waiting.setdefault(client, collections.deque()).append(turn)
        self._queued += 1
        self._hand_out()  # there may be room for this one now
        try:
            await _given_unless_gone(turn, gone)
        except BaseException:
            if turn.given.is_set():
                if not turn.pushed_out:  # given a thread and then cancelled: to the next
                    self._give_back(client)
            else:
                self._leave(client, turn)
            raise
        if not turn.given.is_set():  # its client went away while it waited
            self._leave(client, turn)
            raise ClientGone("The client went away while its request waited for a data thread")
        if turn.pushed_out:
            raise ServiceUnavailableError(
                f"The server is busy: this request was waiting for one of its {self.data_threads} data threads "
                f"behind more of its client's own than other clients had waiting, when the queue was full; retry later"
            )

    def _longest_queue(self, beyond: int) -> str | None:
        """The client with the most requests waiting, when that is more than ``beyond``."""
        if not self._waiting:
            return None
        client = max(self._waiting, key=lambda waiting: len(self._waiting[waiting]))
        return client if len(self._waiting[client]) > beyond else None

    def _push_out(self, client: str | None) -> None:
        """Make room in a full queue: ``client``'s newest waiting request is answered 503."""
        if client is None:
            return
        turn = self._waiting[client][-1]
        self._leave(client, turn)
        turn.pushed_out = True
        turn.given.set()

    def _leave(self, client: str, turn: _Turn) -> None:
        queue = self._waiting[client]
        queue.remove(turn)
        self._queued -= 1
        if not queue:
            del self._waiting[client]

    def _may_take(self, client: str) -> bool:
        """Whether ``client`` may take a thread now: one is free, and either it holds none or it
        holds fewer than its share and a thread would still be left for each of ``reserved``."""
        free = self.data_threads - self._running
        held = self.running(client)
        return free > 0 and (held == 0 or (held < self.share and free - 1 >= self.reserved))

    def _hold(self, client: str) -> None:
        self._running += 1
        self._running_by_client[client] = self.running(client) + 1

    def _give_back(self, client: str) -> None:
        self._running -= 1
        left = self.running(client) - 1
        if left:
            self._running_by_client[client] = left
        else:
            del self._running_by_client[client]
        self._hand_out()

    def _hand_out(self) -> None:
        """Free threads to waiting requests: each to the client holding the fewest (within its
        share), its oldest request; among clients holding as many, the one waiting longest."""
        while self._running < self.data_threads and self._waiting:
            eligible = [c for c in self._waiting if self._may_take(c)]
            if not eligible:
                return
            client = min(eligible, key=lambda c: (self.running(c), self._waiting[c][0].arrival))
            queue = self._waiting[client]
            turn = queue.popleft()
            self._queued -= 1
            if not queue:
                del self._waiting[client]
            self._hold(client)
            turn.given.set()


Gone = Callable[[], Awaitable[None]]  # returns when the request's client has gone away


class ClientGone(ServiceUnavailableError):
    """The client went away while its request waited for a data thread: nobody reads the answer."""


async def _given_unless_gone(turn: _Turn, gone: Gone | None) -> None:
    """Wait for ``turn`` to be given a thread, or, with ``gone``, for its client to go away."""
    if gone is None:
        await turn.given.wait()
        return
    async with anyio.create_task_group() as waiting:

        async def watch() -> None:
            await gone()
            waiting.cancel_scope.cancel()

        waiting.start_soon(watch)
        await turn.given.wait()
        waiting.cancel_scope.cancel()


async def _unless_gone(call: Awaitable[T], gone: Gone | None, abandon: Callable[[], None] | None) -> T:
    """``call`` awaited, calling ``abandon`` if ``gone`` returns first (the call is still waited
    for: it answers sooner once abandoned). The watch is a bare task of the event loop, cancelled
    once the call returns: a task group's scopes cost more than the watch does on every query."""
    if gone is None or abandon is None:
        return await call

    async def watch() -> None:
        with contextlib.suppress(Exception):  # a watch that fails is no going away, and is never awaited
            await gone()
            abandon()

    watching = asyncio.ensure_future(watch())
    try:
        return await call
    finally:
        watching.cancel()


@dataclass
class _Turn:
    """A data request waiting for a thread: ``given`` is set once one is held for it, or once it is
    pushed out of a full queue."""

    arrival: int
    given: anyio.Event = field(default_factory=anyio.Event)
    pushed_out: bool = False  # set with given: no thread, a 503 (WorkerThreads._push_out)


class HeldBytes:
    """The request and answer bodies this server process holds at once, within ``most`` bytes.

    Each body is taken as it arrives (one that declares more than the room left is refused before
    it is read) and each answer before it is sent, and given back when its request is done
    (``guard.GuardMiddleware``): a request that would take more is answered 503 at once, so that
    many bodies uploading at once, or answers their clients do not read, cannot grow the server's
    memory beyond ``most``, and lengths declared and never sent hold none of it.

    Shared between clients as the data threads are (``WorkerThreads``): the last ``reserved``
    bytes (a quarter of the room) go only to clients holding at most that much in all, and a
    client holds at most ``share`` (three quarters, and at least one ``largest`` body). One
    address sending many large bodies cannot keep every other client's write out, nor the second
    of a client's own two. Used on the event loop only."""

    def __init__(self, most: int, largest: int = 1) -> None:
        if most < 1:
            raise ValueError("most must be at least 1 byte")
        self.most = most
        self.share = min(most, max(largest, most - most // 4))
        self.reserved = most - self.share
        self.held = 0
        self._by_client: dict[str, int] = {}

    def holds(self, client: str) -> int:
        """The bytes ``client``'s requests hold now."""
        return self._by_client.get(client, 0)

    def fits(self, size: int, client: str = "") -> bool:
        """Whether ``size`` more bytes would fit now for ``client`` (nothing is taken)."""
        if size <= 0:
            return True
        if self.held + size > self.most:
            return False
        mine = self.holds(client) + size
        return mine <= self.reserved or (mine <= self.share and self.held + size <= self.most - self.reserved)

    def take(self, size: int, client: str = "") -> bool:
        """Whether ``size`` more bytes fit (``fits``); they are counted as held when they do."""
        if not self.fits(size, client):
            return False
        if size > 0:
            self.held += size
            self._by_client[client] = self.holds(client) + size
        return True

    def give_back(self, size: int, client: str = "") -> None:
        if size <= 0:
            return
        self.held -= size
        left = self.holds(client) - size
        if left > 0:
            self._by_client[client] = left
        else:
            self._by_client.pop(client, None)

    def refusal(self, size: int, client: str = "") -> str:
        """Why ``size`` more bytes were refused: the 503's message."""
        mine = self.holds(client)
        if mine and self.held + size <= self.most:
            return (
                f"The server is busy: this client's requests hold {_mib(mine)} of request and answer bodies, and "
                f"{_mib(size)} more would pass the share one client may hold while others may need room; retry later"
            )
        return (
            f"The server is busy: it holds {_mib(self.held)} of request and answer bodies, and {_mib(size)} more "
            f"would pass its limit of {_mib(self.most)}; retry later"
        )


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


def default_worker_memory_mb(data_threads: int, server_processes: int = 1) -> int:
    """A data worker's ceiling when none is given: ``DEFAULT_DATA_WORKER_MEMORY_MB``, or less so
    that one per data thread of each of ``server_processes`` (``serve --workers``) fits in three
    quarters of the memory this process may use (at least ``SMALLEST_DATA_WORKER_MEMORY_MB``): the
    workers' ceilings together never promise more than the machine has."""
    machine = physical_memory_mb()
    if machine is None:
        return DEFAULT_DATA_WORKER_MEMORY_MB
    each = machine * 3 // 4 // max(1, data_threads * server_processes)
    return max(SMALLEST_DATA_WORKER_MEMORY_MB, min(DEFAULT_DATA_WORKER_MEMORY_MB, each))


def physical_memory_mb() -> int | None:
    """The memory this process may use, in MiB: the machine's, capped by its cgroup v2 ``memory.max``."""
    try:
        machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None
    try:
        groups = Path("/proc/self/cgroup").read_text().splitlines()
        path = next((line[3:] for line in groups if line.startswith("0::")), None)
        limit = Path(f"/sys/fs/cgroup{path}/memory.max").read_text().strip() if path else ""
    except OSError:
        limit = ""
    return min(machine, int(limit) if limit.isdigit() else machine) >> 20
