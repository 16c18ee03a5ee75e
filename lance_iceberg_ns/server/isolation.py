"""Data work in worker processes, so that nothing a client sends can stop the server.

pylance aborts its process when an allocation fails (Rust cannot recover from one), and a client
can make it ask for any amount: views sharing one string, a dictionary cast to plain strings, a
literal copied into every row. Bounds close each such shape as it is found; isolation closes the
class. Every request that runs pylance on a client's input (every route ``routes`` does not know
to be catalog-only) runs in a worker process (``worker``), one request at a time, each worker
with a memory ceiling. A worker that dies answers its own request, and only that one:

- an allocation over the ceiling is the input's doing: InvalidInputError (400), naming the ceiling;
- any other end (a signal, the system's OOM killer) is ServiceUnavailableError (503): retry.

Another worker is started at once in its place: a fork of the template that has loaded pylance
(``forking``), ready in milliseconds. So is one for a worker that lives on holding what its request
left (an allocation that failed in Arrow, which answers 400 and does not end the process, or more
than half its ceiling grown): the next request, another client's perhaps, gets a fresh fork's memory.
A create tells the server, before it makes anything, the mark its table's entry will bear, then the
table it declared or brought back from the trash, before it writes (``worker.DECLARED``); if its
worker ends meanwhile, where the create's own undo never runs, another worker takes that table back
(``worker.TAKE_BACK``: only that very entry, and only if nothing was written), once no other request
of this server is at work on the table (``turns``).

A read whose client goes away while it runs (``routes.ONLY_READING``: a query, a count) has its
worker ended (``Abandonment``): nobody will read its answer, and a query sent and hung up on cannot
hold a data thread for as long as it would have run. Writes always run to their end.

The server process keeps the catalog routes, health, metrics and the event loop: none of them waits
behind data work, and none shares its memory. A read (``routes.ONLY_READING``) is sent to an idle
worker and its answer awaited on the event loop (``DataWorkers.run_on_loop``), with no thread to
wake either way; the others, and a read that finds no worker idle, wait for theirs on a thread.

Workers belong to the process, not to one app: apps with the same ceiling share them (each app
sends its recipe, the bridge's properties, with each request; a worker keeps the bridges it built).
An app starts two workers with it, in the background (a request that comes first waits for the
first one ready), and more as requests find none idle; idle ones are kept up to the largest
``data_threads`` of the apps (beyond two, for ``IDLE_SECONDS``). They stop when their pipe closes: when the server
stops, or ends in any way.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
import pydantic_core
from lance_namespace import LanceNamespace
from lance_namespace.errors import (
    LanceNamespaceError,
    ServiceUnavailableError,
    from_error_code,
)
from pydantic import BaseModel
from starlette.responses import Response

from lance_iceberg_ns import limits
from lance_iceberg_ns.cache import RecentlyUsed
from lance_iceberg_ns.identifiers import parse_table_id
from lance_iceberg_ns.server.capacity import ClientGone
from lance_iceberg_ns.server.data_worker import DataWorker, WorkerCrashed
from lance_iceberg_ns.server.forking import stop_template
from lance_iceberg_ns.server.logs import audit_by_the_server
from lance_iceberg_ns.server.routes import Route
from lance_iceberg_ns.server.settings import DEFAULT_DATA_REQUEST_SECONDS
from lance_iceberg_ns.server.turns import TableTurns
from lance_iceberg_ns.server.worker import (
    TAKE_BACK,
)

logger = logging.getLogger(__name__)

START_SECONDS = 120.0  # how long a request may wait for a worker to be free (the template's imports included)
TAKE_BACK_SECONDS = 60.0  # at least, whatever the requests' own time: a take-back cut off leaves files
STARTED_WITH_THE_APP = 2  # workers started before any request: a fork of the template, about 35 MB of its own idle
IDLE_SECONDS = 300.0  # a worker idle this long ends, beyond those started with the app
CRASHES_TO_REFUSE = 2  # ends of workers by a signal on one table ...
CRASH_SECONDS = 60.0  # ... within this long refuse its data requests for this long


class Abandonment:
    """A read whose client may go away while it runs: ``abandon`` (from the event loop, once the
    client has gone) ends the worker running it, and the read answers ClientGone. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._worker: DataWorker | None = None
        self.abandoned = False

    def abandon(self) -> None:
        with self._lock:  # the worker is killed only while it is still this read's
            self.abandoned = True
            if self._worker is not None:
                self._worker.process.kill()

    def running_on(self, worker: DataWorker) -> None:
        """The read runs on ``worker`` now; ended at once if abandoned already."""
        with self._lock:
            self._worker = worker
            if self.abandoned:
                worker.process.kill()

    def finished(self) -> bool:
        """The read is done with its worker (before the worker goes to anyone else); whether it
        was abandoned, its worker killed or about to end."""
        with self._lock:
            self._worker = None
            return self.abandoned


class CrashingTables:
    """Tables whose data requests end the workers that run them: after ``CRASHES_TO_REFUSE`` such
    ends within ``CRASH_SECONDS``, the table's data requests are refused (503) without a worker
    until ``CRASH_SECONDS`` after the last, so that a table whose stored data crashes its readers
    costs the others one worker start per crash, not one per request. Kept for the most recently
    crashing ``capacity`` tables."""

    def __init__(self, capacity: int = 1024) -> None:
        self._lock = threading.Lock()
        self._ends: RecentlyUsed[tuple[str, ...], tuple[float, ...]] = RecentlyUsed(capacity)

    def refuse_if_crashing(self, table: tuple[str, ...]) -> None:
        with self._lock:
            ends = self._recent(table)
        if len(ends) >= CRASHES_TO_REFUSE:
            wait = CRASH_SECONDS - (time.monotonic() - ends[-1])
            raise ServiceUnavailableError(
                f"Requests on this table ended {len(ends)} data workers in the last {CRASH_SECONDS:g} s; its data "
                f"requests are refused for {wait:.0f} s more (is a version of it written by location damaged?)"
            )

    def crashed(self, table: tuple[str, ...]) -> None:
        with self._lock:
            self._ends.keep(table, (*self._recent(table), time.monotonic())[-CRASHES_TO_REFUSE:])

    def _recent(self, table: tuple[str, ...]) -> tuple[float, ...]:
        since = time.monotonic() - CRASH_SECONDS
        return tuple(end for end in self._ends.get(table) or () if end > since)


@dataclass(frozen=True)
class Recipe:
    """How a worker builds the namespace that answers a request: the bridge's properties (secrets
    included: never shown), for each caller's token when the server forwards it."""

    properties: Mapping[str, str] = field(repr=False)
    forward_bearer_token: bool = False
    key: str = field(default_factory=lambda: secrets.token_hex(8))

    @classmethod
    def of(
        cls, namespace: LanceNamespace | None, properties: Mapping[str, str] | None, forward_bearer_token: bool
    ) -> Recipe | None:
        """The recipe of what a server serves, or None for a namespace a worker cannot rebuild
        (another implementation, or a subclass of the bridge): its data work stays in process."""
        from lance_iceberg_ns import IcebergLanceNamespace

        if properties is not None:
            return cls(dict(properties), forward_bearer_token)
        if type(namespace) is IcebergLanceNamespace:
            return cls(namespace.properties, forward_bearer_token)
        return None


class Isolated:
    """An app's data routes, answered by the worker processes of its ceiling."""

    def __init__(
        self, recipe: Recipe, memory_mb: int, data_threads: int, request_seconds: float = DEFAULT_DATA_REQUEST_SECONDS
    ) -> None:
        self.recipe = recipe
        self.request_seconds = request_seconds
        self.workers = DataWorkers.of(memory_mb)
        self.crashing = CrashingTables()
        self.workers.keep_at_least(data_threads, start=min(data_threads, STARTED_WITH_THE_APP))

    def answer(
        self,
        route: Route,
        request: BaseModel,
        body: bytes,
        token: str | None,
        abandonment: Abandonment | None = None,
    ) -> Response:
        """``route``'s operation on ``request`` (and its Arrow IPC ``body``) in a worker, as the HTTP
        answer; raises the Lance error the operation raised, or the one its worker's end means
        (ClientGone when it was ended by ``abandonment``)."""
        header, encoded, table = self._message(route, request, token)
        with self._crashes_noted(table):
            answer = self.workers.run(
                self.request_seconds,
                header,
                encoded,
                body if route.arrow_body else b"",
                abandonment=abandonment,
                table=_table_key(request) if route.names_a_table and not route.only_reads else (),
                writing=not route.only_reads,
            )
        return _response(answer)

    async def answer_on_loop(
        self, route: Route, request: BaseModel, token: str | None, abandonment: Abandonment | None = None
    ) -> Response:
        """``answer`` for a read (``routes.ONLY_READING``: no Arrow IPC body, no turn on its table),
        awaited on the event loop: on a thread (``answer``) only when no worker is idle."""
        header, encoded, table = self._message(route, request, token)
        with self._crashes_noted(table):
            answer = await self.workers.run_on_loop(self.request_seconds, header, encoded, abandonment=abandonment)
        if answer is None:
            return await anyio.to_thread.run_sync(self.answer, route, request, b"", token, abandonment)
        return _response(answer)

    def _message(
        self, route: Route, request: BaseModel, token: str | None
    ) -> tuple[dict[str, Any], bytes, tuple[str, ...]]:
        """The header and the request's JSON a worker is sent for ``request``, and the table it
        names (its data requests refused while they keep crashing workers: ``CrashingTables``)."""
        fields = request.model_dump(by_alias=True, exclude_unset=True)
        encoded = pydantic_core.to_json(fields, inf_nan_mode="constants")  # a NaN the parser took stays one
        header = {
            "operation": route.operation,
            "recipe": self.recipe.key,
            "properties": dict(self.recipe.properties),
            "token": token if self.recipe.forward_bearer_token else None,
            "arrived": time.monotonic(),
            "max_data_bytes": limits.max_data_bytes(),  # the server's cap on what a body decodes to
            "request_bytes": len(encoded),
        }
        table = tuple(getattr(request, "id", None) or ()) if route.names_one_table else ()
        if table:
            self.crashing.refuse_if_crashing(table)
        return header, encoded, table

    @contextlib.contextmanager
    def _crashes_noted(self, table: tuple[str, ...]) -> Iterator[None]:
        try:
            yield
        except WorkerCrashed:
            if table:
                self.crashing.crashed(table)
            raise


def _response(message: tuple[dict[str, Any], bytearray]) -> Response:
    """A worker's answer as the HTTP answer, or the Lance error it raised."""
    answer, content = message
    if answer["kind"] == "error":
        error = from_error_code(int(answer["code"]), str(answer["message"]))
        if answer.get("status"):
            error.http_status = int(answer["status"])  # type: ignore[attr-defined]  # 413 beyond a size limit
        raise error
    return Response(memoryview(content), status_code=int(answer["status"]), media_type=answer.get("media_type"))


def _table_key(request: BaseModel) -> tuple[str, ...]:
    """The table a request names, as the bridge parses it (Unicode normalized): a write's turn on
    it (``turns``), whatever spelling the client sent; none for an id the bridge will refuse."""
    try:
        return tuple(parse_table_id(getattr(request, "id", None) or []).parts)
    except LanceNamespaceError:
        return ()


class DataWorkers:
    """The worker processes of one memory ceiling in this process. The idle one used last is taken
    first (it has the datasets and indices open, and the rest can rest), and a request that finds
    none idle starts one of its own."""

    _by_ceiling: dict[int, DataWorkers] = {}
    _creating = threading.Lock()

    @classmethod
    def of(cls, memory_mb: int) -> DataWorkers:
        with cls._creating:
            workers = cls._by_ceiling.get(memory_mb)
            if workers is None:
                workers = cls._by_ceiling[memory_mb] = cls(memory_mb)
            return workers

    def __init__(self, memory_mb: int) -> None:
        if memory_mb < 1:
            raise ValueError("memory_mb must be at least 1")
        self.memory_mb = memory_mb
        self._idle: collections.deque[DataWorker] = collections.deque()
        self._busy: set[DataWorker] = set()
        self._starting = 0  # started in the background, not yet ready
        self._alive = 0  # idle, busy or starting
        self._keep = 0
        self._waiting = 0  # requests waiting for an idle worker
        self._start_failure: LanceNamespaceError | None = None  # why the last start failed, until one succeeds
        self._changed = threading.Condition()  # reentrant: a waiting request starts a worker while it holds it
        self.turns = TableTurns()

    def keep_at_least(self, count: int, start: int) -> None:
        """Keep up to ``count`` idle workers (an app's ``data_threads``), and have at least
        ``start`` of them running or starting now (the others start when requests need them)."""
        with self._changed:
            self._keep = max(self._keep, count)
            missing = start - self._alive
        for _ in range(missing):
            self._start_in_background()

    def any_ready(self) -> bool:
        """Whether a worker has started and can take requests (idle or busy now)."""
        return bool(self._idle or self._busy)

    def run(
        self,
        seconds: float,
        header: dict[str, Any],
        *payload: bytes,
        abandonment: Abandonment | None = None,
        table: Sequence[str] = (),
        writing: bool = False,
    ) -> tuple[dict[str, Any], bytearray]:
        """One request on an idle worker, ended if it takes more than ``seconds``, or once its
        ``abandonment`` is abandoned (ClientGone); the worker's end, if it ends, as a Lance error.
        The request holds a turn on the ``table`` it names while it runs (``turns``); a create cut
        off is taken back once its turn is given up, when the take-back is alone on the table.
        ``writing``: the request may commit (how a failed allocation is answered: ``allocation_failed``)."""
        with self.turns.shared(table):
            worker = self._take()
            if abandonment is not None:
                abandonment.running_on(worker)
            try:
                answer = worker.call(seconds, header, *payload)
            except (OSError, EOFError, ValueError):
                error = self._ended(worker, abandonment, writing)
                if not worker.declared:
                    raise error from None
            else:
                retired = self._answered(worker, answer, abandonment)
                if retired is not None:
                    retired.stop()
                return answer
        for declared in worker.declared:
            error = self._take_back(seconds, header, declared, error)
        raise error

    async def run_on_loop(
        self, seconds: float, header: dict[str, Any], *payload: bytes, abandonment: Abandonment | None = None
    ) -> tuple[dict[str, Any], bytearray] | None:
        """``run`` for a read (which takes no turn on its table and declares nothing), awaited on
        the event loop instead of holding a thread for the worker's answer: two thread hops fewer on
        every query. None when no worker is idle: the caller runs it on a thread, where it may wait."""
        worker = self._take_idle()
        if worker is None:
            return None
        if abandonment is not None:
            abandonment.running_on(worker)
        try:
            answer = await worker.call_on_loop(seconds, header, *payload)
        except (OSError, EOFError, ValueError):
            # waits for the worker's end and its last words (its stderr's relay): on a thread
            raise await anyio.to_thread.run_sync(self._ended, worker, abandonment, False) from None
        retired = self._answered(worker, answer, abandonment)
        if retired is not None:
            await anyio.to_thread.run_sync(retired.stop)
        return answer

    def _ended(self, worker: DataWorker, abandonment: Abandonment | None, writing: bool) -> LanceNamespaceError:
        """The error for a request whose worker ended under it (ClientGone when its client went
        away and it was ended for that); another worker is started in its place."""
        abandoned = abandonment is not None and abandonment.finished()
        error = worker.ended(self.memory_mb, writing)
        self._let_go(worker)
        self._start_in_background()  # in its place
        if abandoned:
            return ClientGone("The client went away while its read ran: the read was stopped")
        return error

    def _answered(
        self, worker: DataWorker, answer: tuple[dict[str, Any], bytearray], abandonment: Abandonment | None
    ) -> DataWorker | None:
        """A worker that answered goes back to the idle ones; or it is retired (returned, for the
        caller to stop): when it holds what a failed allocation, or a large request, left, or it
        was killed as it answered, its client gone."""
        abandoned = abandonment is not None and abandonment.finished()
        if abandoned or answer[0].get("retire"):
            self._let_go(worker)
            self._start_in_background()
            return worker
        self._give_back(worker)
        return None

    def _take_back(
        self, seconds: float, header: dict[str, Any], declared: dict[str, Any], error: LanceNamespaceError
    ) -> LanceNamespaceError:
        """Undo what a create did before its worker ended (on another worker), alone on the table;
        the request's error, saying what became of the table. An audit line says it too."""
        table = ".".join(declared["table"])
        restored = declared.get("restored")
        with self.turns.alone(declared["table"]) as alone:
            try:
                if not alone:
                    outcome = "was left as it is (other requests were writing to it)"
                    if restored:
                        outcome = "back from the trash was left as it is (other requests were writing to it)"
                else:
                    taking_back = {**header, "operation": TAKE_BACK, "declared": declared}
                    answer, _ = self.run(max(seconds, TAKE_BACK_SECONDS), taking_back)
                    removed = answer.get("kind") == "taken_back" and answer.get("removed")
                    if restored:
                        outcome = "back from the trash was dropped again" if removed else "back from the trash was left"
                    elif removed:
                        outcome = "was taken back"
                    elif "location" not in declared:  # cut off before it said where: it may never have been made
                        outcome = "was not found (never made, or not its own): nothing was taken back"
                    else:
                        outcome = "was left as it is (written to, or no longer the create's)"
            except LanceNamespaceError as failure:
                logger.warning("The table %s a create declared could not be taken back: %s", table, failure)
                outcome = "could not be taken back: drop it"
        audit_by_the_server("take_back", declared["table"], f"the table {outcome}")
        verb = "brought" if restored else "declared" if "location" in declared else "was declaring"
        return type(error)(f"{error}; the table {table} it {verb} {outcome}")

    def close(self) -> None:
        """Stop every worker: the idle ones as they finish, the busy ones at once (the server is
        going: nobody waits for their answers)."""
        with self._changed:
            idle, self._idle, self._keep = list(self._idle), collections.deque(), 0
            busy = list(self._busy)
        for worker in busy:
            worker.process.kill()
        for worker in idle:
            worker.stop()
            self._let_go(worker)

    def _take(self) -> DataWorker:
        """The idle worker used last, or the first to become idle: a busy one done, or one started
        for this request in the background (a request never waits for a worker of its own to
        import pylance when another finishes first). ServiceUnavailableError when workers fail to
        start, or none is free within ``START_SECONDS``."""
        deadline = time.monotonic() + START_SECONDS
        with self._changed:
            self._waiting += 1
            try:
                while True:
                    while not self._idle:
                        if self._start_failure is not None and not self._starting:
                            raise ServiceUnavailableError(str(self._start_failure))
                        if self._starting < self._waiting:  # one starting for each request waiting
                            self._start_in_background()
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise ServiceUnavailableError(f"No data worker was free within {START_SECONDS:g} s: retry")
                        self._changed.wait(left)
                    worker = self._take_idle()
                    if worker is not None:
                        return worker
            finally:
                self._waiting -= 1

    def _take_idle(self) -> DataWorker | None:
        """The idle worker used last (its caches are warm), now busy; None when none is idle. One
        that ended while idle (with the template, say) is replaced."""
        with self._changed:
            while self._idle:
                worker = self._idle.pop()
                if not worker.process.ended:
                    self._busy.add(worker)
                    return worker
                worker.stop()
                self._alive -= 1
                self._start_in_background()
            return None

    def _give_back(self, worker: DataWorker) -> None:
        with self._changed:
            self._busy.discard(worker)
            kept = len(self._idle) < self._keep
            if kept:
                self._idle.append(worker)
                self._changed.notify()
            resting = self._resting()
        for stopped in resting if kept else [worker]:
            stopped.stop()
            self._let_go(stopped)

    def _resting(self) -> list[DataWorker]:
        """The workers idle for ``IDLE_SECONDS``, taken off the idle ones (those used longest ago
        first), beyond the ``STARTED_WITH_THE_APP`` kept in any case. Holds the lock."""
        resting: list[DataWorker] = []
        now = time.monotonic()
        while (
            len(self._idle) > STARTED_WITH_THE_APP
            and self._alive - len(resting) > STARTED_WITH_THE_APP
            and now - self._idle[0].idle_since > IDLE_SECONDS
        ):
            resting.append(self._idle.popleft())
        return resting

    def _let_go(self, worker: DataWorker) -> None:
        with self._changed:
            self._busy.discard(worker)
            self._alive -= 1

    def _start_in_background(self) -> None:
        with self._changed:
            self._starting += 1
            self._alive += 1
        threading.Thread(target=self._start, name="data-worker-start", daemon=True).start()

    def _start(self) -> None:
        worker: DataWorker | None = None
        failure = None
        try:
            worker = DataWorker(self.memory_mb)
            worker.wait_ready()
        except (OSError, EOFError, ValueError) as exc:
            why = worker.ended(self.memory_mb) if worker is not None else (str(exc) or type(exc).__name__)
            failure = ServiceUnavailableError(f"A data worker did not start: {why}")
            if not _exiting.is_set():  # at exit, workers starting meet the template stopped: nothing to say
                logger.warning("%s", failure)
            worker = None
        finally:
            with self._changed:
                self._starting -= 1
                self._start_failure = failure
                if worker is not None and (len(self._idle) < self._keep or self._waiting):
                    self._idle.append(worker)
                    worker = None
                else:
                    self._alive -= 1
                self._changed.notify_all()
        if worker is not None:
            worker.stop()


_exiting = threading.Event()


@atexit.register
def _stop_workers() -> None:
    _exiting.set()
    for workers in list(DataWorkers._by_ceiling.values()):
        workers.close()
    stop_template()
