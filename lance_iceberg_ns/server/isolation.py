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
behind data work, and none shares its memory.

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
import fcntl
import logging
import re
import secrets
import select
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pydantic_core
from lance_namespace import LanceNamespace
from lance_namespace.errors import (
    InvalidInputError,
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
from lance_iceberg_ns.server.forking import start_worker, stop_template
from lance_iceberg_ns.server.logs import audit_by_the_server, redact
from lance_iceberg_ns.server.routes import Route
from lance_iceberg_ns.server.settings import DEFAULT_DATA_REQUEST_SECONDS
from lance_iceberg_ns.server.turns import TableTurns
from lance_iceberg_ns.server.worker import DECLARED, READY, TAKE_BACK, read_message, write_message

logger = logging.getLogger(__name__)

START_SECONDS = 120.0  # how long a request may wait for a worker to be free (the template's imports included)
READY_SECONDS = 30.0  # how long a fork may take to say it is ready (milliseconds on an idle host)
STOP_SECONDS = 5.0
TAKE_BACK_SECONDS = 60.0  # at least, whatever the requests' own time: a take-back cut off leaves files
STARTED_WITH_THE_APP = 2  # workers started before any request: a fork of the template, about 35 MB of its own idle
IDLE_SECONDS = 300.0  # a worker idle this long ends, beyond those started with the app
PIPE_BYTES = 1 << 20  # Linux's default most for a pipe
_TAIL_LINES = 40  # of a worker's stderr, kept to say why it ended
CRASHES_TO_REFUSE = 2  # ends of workers by a signal on one table ...
CRASH_SECONDS = 60.0  # ... within this long refuse its data requests for this long
_ALLOCATION_FAILED = re.compile(rb"memory allocation of (\d+) bytes failed")
# a write's failed allocation of at least this share of the ceiling is the request's own need (a bomb
# asks for gigabytes at once); a smaller one failed because pylance's own memory had grown to it
ASKED_BY_THE_REQUEST = 0.25


class Abandonment:
    """A read whose client may go away while it runs: ``abandon`` (from the event loop, once the
    client has gone) ends the worker running it, and the read answers ClientGone. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self.abandoned = False

    def abandon(self) -> None:
        with self._lock:  # the worker is killed only while it is still this read's
            self.abandoned = True
            if self._worker is not None:
                self._worker.process.kill()

    def running_on(self, worker: _Worker) -> None:
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


class WorkerCrashed(ServiceUnavailableError):
    """The worker running a request ended by a signal it did not ask for: not its memory ceiling,
    not its time running out (a stack overflowed reading a planted manifest, say)."""


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
        try:
            answer, content = self.workers.run(
                self.request_seconds,
                header,
                encoded,
                body if route.arrow_body else b"",
                abandonment=abandonment,
                table=_table_key(request) if route.names_a_table and not route.only_reads else (),
                writing=not route.only_reads,
            )
        except WorkerCrashed:
            if table:
                self.crashing.crashed(table)
            raise
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
        self._idle: collections.deque[_Worker] = collections.deque()
        self._busy: set[_Worker] = set()
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
                abandoned = abandonment is not None and abandonment.finished()
                error = worker.ended(self.memory_mb, writing)
                self._let_go(worker)
                self._start_in_background()  # in its place
                if abandoned:
                    raise ClientGone("The client went away while its read ran: the read was stopped") from None
                if not worker.declared:
                    raise error from None
            else:
                abandoned = abandonment is not None and abandonment.finished()  # killed as it answered, maybe
                if abandoned or answer[0].get(
                    "retire"
                ):  # or it holds what a failed allocation, or a large request, left
                    self._let_go(worker)
                    self._start_in_background()
                    worker.stop()
                else:
                    self._give_back(worker)
                return answer
        for declared in worker.declared:
            error = self._take_back(seconds, header, declared, error)
        raise error

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

    def _take(self) -> _Worker:
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
                    worker = self._idle.pop()  # the one used last: its caches are warm
                    if not worker.process.ended:
                        self._busy.add(worker)
                        return worker
                    worker.stop()  # ended while idle (with the template, say): another in its place
                    self._alive -= 1
                    self._start_in_background()
            finally:
                self._waiting -= 1

    def _give_back(self, worker: _Worker) -> None:
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

    def _resting(self) -> list[_Worker]:
        """The workers idle for ``IDLE_SECONDS``, taken off the idle ones (those used longest ago
        first), beyond the ``STARTED_WITH_THE_APP`` kept in any case. Holds the lock."""
        resting: list[_Worker] = []
        now = time.monotonic()
        while (
            len(self._idle) > STARTED_WITH_THE_APP
            and self._alive - len(resting) > STARTED_WITH_THE_APP
            and now - self._idle[0].idle_since > IDLE_SECONDS
        ):
            resting.append(self._idle.popleft())
        return resting

    def _let_go(self, worker: _Worker) -> None:
        with self._changed:
            self._busy.discard(worker)
            self._alive -= 1

    def _start_in_background(self) -> None:
        with self._changed:
            self._starting += 1
            self._alive += 1
        threading.Thread(target=self._start, name="data-worker-start", daemon=True).start()

    def _start(self) -> None:
        worker: _Worker | None = None
        failure = None
        try:
            worker = _Worker(self.memory_mb)
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


class _Worker:
    """One worker process: requests down its stdin, answers up its stdout, its stderr relayed to
    this process's log (the last lines kept, to say why it ended)."""

    def __init__(self, memory_mb: int) -> None:
        self.process = start_worker(memory_mb << 20)  # a fork of the template: no imports to wait for
        for pipe in (self.process.stdin, self.process.stdout):  # a body or an answer in fewer wake-ups
            with contextlib.suppress(OSError, AttributeError):
                fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)  # type: ignore[union-attr]
        self._tail: collections.deque[bytes] = collections.deque(maxlen=_TAIL_LINES)
        self.timed_out: float | None = None
        self.declared: list[dict[str, Any]] = []  # by the request running, before its answer
        self.idle_since = time.monotonic()
        self._relay = threading.Thread(target=self._relay_stderr, name="data-worker-log", daemon=True)
        self._relay.start()

    def wait_ready(self) -> None:
        """Returns once the worker can answer; EOFError if it ended first, or is ended for saying
        nothing within ``READY_SECONDS``."""
        assert self.process.stdout is not None
        said, _, _ = select.select([self.process.stdout], [], [], READY_SECONDS)
        if not said:
            self.process.kill()
        message = read_message(self.process.stdout)
        if message is None or message[0].get("kind") != READY:
            raise EOFError("the worker ended before it was ready")

    def call(self, seconds: float, header: dict[str, Any], *payload: bytes) -> tuple[dict[str, Any], bytearray]:
        """The answer to one request; the worker is ended if it takes more than ``seconds``. Notes
        that come before the answer (tables declared) are kept in ``declared``."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self._tail.clear()  # what it wrote before this request says nothing of why it ends now
        self.declared = []
        write_message(self.process.stdin, header, *payload)
        deadline = time.monotonic() + seconds
        while True:
            left = max(0.0, deadline - time.monotonic())
            answered, _, _ = select.select([self.process.stdout], [], [], left)  # a message comes all at once
            if not answered:
                self.timed_out = seconds
                self.process.kill()
            answer = read_message(self.process.stdout)
            if answer is None:
                raise EOFError("the worker ended")
            if answer[0].get("kind") != DECLARED:
                break
            told = answer[0]  # what a create declared: a later note of the same table says more
            self.declared = [note for note in self.declared if note["table"] != told["table"]] + [told]
        self.idle_since = time.monotonic()
        return answer

    def ended(self, memory_mb: int, writing: bool = False) -> LanceNamespaceError:
        """The error that answers the request this worker was running when it ended (``writing``:
        a request that may commit)."""
        self.stop()
        self._relay.join(STOP_SECONDS)
        tail = b"".join(self._tail)
        allocation = _ALLOCATION_FAILED.search(tail)
        if allocation:
            return allocation_failed(int(allocation[1]), memory_mb, writing)
        if self.timed_out is not None:
            return ServiceUnavailableError(
                f"The request took more than {self.timed_out:g} s in its data worker, which was ended; whether a "
                f"write took effect is unknown"
            )
        code = self.process.returncode
        how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit status {code}"
        ended_by = (
            WorkerCrashed if code is not None and code < 0 and -code != signal.SIGKILL else ServiceUnavailableError
        )
        return ended_by(
            f"The data worker running the request ended ({how}); whether a write took effect is unknown: retry"
        )

    def stop(self) -> None:
        """Close its pipe (an idle worker ends at once), and end it if it does not."""
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            self.process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _relay_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in iter(self.process.stderr.readline, b""):
            self._tail.append(line)
            text = line.decode("utf-8", "replace").rstrip()
            if text:
                logger.warning("data worker %d: %s", self.process.pid, redact(text))


def allocation_failed(asked: int, memory_mb: int, writing: bool) -> LanceNamespaceError:
    """The answer to a request whose worker ended when an allocation of ``asked`` bytes failed
    under a ceiling of ``memory_mb``: the request's own need (InvalidInputError: the same request
    fails again) for a read, which holds no more than what it asks for, and for a write that asked
    for a large share of the ceiling at once; for a write that failed on a small allocation, the
    worker's memory, grown by pylance's own for the table (its versions, the commits it retried:
    a write's rows are bounded well under the ceiling), and a fresh worker answers a retry
    (ServiceUnavailableError)."""
    if not writing or asked >= memory_mb * (1 << 20) * ASKED_BY_THE_REQUEST:
        return InvalidInputError(
            f"The request needs more memory than a data worker may use ({memory_mb} MiB): an allocation "
            f"of {asked} bytes failed"
        )
    return ServiceUnavailableError(
        f"The data worker running the request reached its memory ceiling ({memory_mb} MiB; an allocation of "
        f"{asked} bytes failed) and was replaced; whether a write took effect is unknown: retry"
    )


_exiting = threading.Event()


@atexit.register
def _stop_workers() -> None:
    _exiting.set()
    for workers in list(DataWorkers._by_ceiling.values()):
        workers.close()
    stop_template()
