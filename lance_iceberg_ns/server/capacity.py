"""Worker threads: the data routes get their own, so that slow queries never hold up the catalog.

Every request's work runs in a worker thread. A data operation (a query, a write, an index build)
may hold its thread for seconds, a catalog operation for milliseconds; sharing one pool, 40 slow
queries would leave a cheap ``namespace exists`` waiting behind them. The data routes therefore run
on a pool of their own, ``data_threads`` at a time; a data request beyond it waits its turn, and
once ``WAITING_PER_THREAD`` times as many are waiting, the next is refused at once with
ServiceUnavailable (503), so that neither the wait nor the bodies held by waiting requests grow
without bound. Catalog routes have a pool of ``CATALOG_THREADS`` that no data request takes.

The pools are plain executors handed to the event loop: a request's hop to its thread and back is
the loop's own future, without a task-group checkpoint on either side (on the query path that
machinery cost about as much CPU as the rest of the server's routing). Each call runs in a copy of
the request's context, so that its log lines carry the request's ID.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from lance_namespace.errors import ServiceUnavailableError

from lance_iceberg_ns.server.routes import Route

DEFAULT_DATA_THREADS = 8
WAITING_PER_THREAD = 4
CATALOG_THREADS = 40  # as many as Starlette's default pool had

T = TypeVar("T")


class WorkerThreads:
    """Where each route's work runs: data routes on ``data_threads`` threads of their own (with a
    bounded queue), catalog routes on threads of theirs."""

    def __init__(self, data_threads: int = DEFAULT_DATA_THREADS) -> None:
        if data_threads < 1:
            raise ValueError("data_threads must be at least 1")
        self.data_threads = data_threads
        self.most_waiting = data_threads * WAITING_PER_THREAD
        self._data = ThreadPoolExecutor(data_threads, thread_name_prefix="lance-data")
        self._catalog = ThreadPoolExecutor(CATALOG_THREADS, thread_name_prefix="lance-catalog")
        self._counting = threading.Lock()
        self._data_calls = 0  # running or waiting: counted down when a call ends or is cancelled unstarted

    @property
    def waiting(self) -> int:
        """Data requests waiting for a thread."""
        return max(0, self._data_calls - self.data_threads)

    def check_room(self, route: Route) -> None:
        """ServiceUnavailableError when ``route`` reads or writes data and its queue is full; checked
        before a body is read, and again as the request takes its place in the queue."""
        waiting = self.waiting
        if route.reads_or_writes_data and waiting >= self.most_waiting:
            raise ServiceUnavailableError(
                f"The server is busy: {waiting} data requests are waiting for one of its "
                f"{self.data_threads} data threads; retry later"
            )

    async def run(self, route: Route, function: Callable[..., T], *args: object) -> T:
        """``function(*args)`` in a worker thread of ``route``'s kind, once it is the request's turn.
        A request cancelled meanwhile stops waiting; a call already running finishes on its thread
        (and holds its place in the count until then)."""
        context = contextvars.copy_context()
        if not route.reads_or_writes_data:
            return await asyncio.wrap_future(self._catalog.submit(context.run, function, *args))
        self.check_room(route)  # no await between the check and joining the queue: the cap is exact
        with self._counting:
            self._data_calls += 1
        call = self._data.submit(context.run, function, *args)
        call.add_done_callback(self._ended)
        return await asyncio.wrap_future(call)

    def _ended(self, call: Future[Any]) -> None:
        with self._counting:
            self._data_calls -= 1
