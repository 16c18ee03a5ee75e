"""One data worker process seen from the server (``isolation``): requests down its stdin, answers
up its stdout, one message each (``worker``), its stderr relayed to the log; and what its end means
for the request it was running.

A request waits for its answer on a thread (``call``: ``select`` on the pipe), or on the event loop
(``call_on_loop``: a reader on the pipe, for reads, so that no thread is woken either way). Either
way the worker is ended once the request's time is out, and its end says why (``ended``): its
memory ceiling, its time, a signal.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import logging
import os
import re
import select
import signal
import subprocess
import threading
import time
from typing import Any

import anyio.to_thread
from lance_namespace.errors import InvalidInputError, LanceNamespaceError, ServiceUnavailableError

from lance_iceberg_ns.server.forking import start_worker
from lance_iceberg_ns.server.logs import redact
from lance_iceberg_ns.server.worker import (
    DECLARED,
    READY,
    WHOLE_MESSAGE_BYTES,
    read_head,
    read_message,
    read_payload,
    write_message,
)

logger = logging.getLogger(__name__)

READY_SECONDS = 30.0  # how long a fork may take to say it is ready (milliseconds on an idle host)
STOP_SECONDS = 5.0
PIPE_BYTES = 1 << 20  # Linux's default most for a pipe
_TAIL_LINES = 40  # of a worker's stderr, kept to say why it ended
_ALLOCATION_FAILED = re.compile(rb"memory allocation of (\d+) bytes failed")
# a write's failed allocation of at least this share of the ceiling is the request's own need (a bomb
# asks for gigabytes at once); a smaller one failed because pylance's own memory had grown to it
ASKED_BY_THE_REQUEST = 0.25


class WorkerCrashed(ServiceUnavailableError):
    """The worker running a request ended by a signal it did not ask for: not its memory ceiling,
    not its time running out (a stack overflowed reading a planted manifest, say)."""


class DataWorker:
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
        assert self.process.stdout is not None
        self._send(header, *payload)
        deadline = time.monotonic() + seconds
        while True:
            left = max(0.0, deadline - time.monotonic())
            answered, _, _ = select.select([self.process.stdout], [], [], left)  # a message comes all at once
            if not answered:
                self._end_for_time(seconds)
            answer = read_message(self.process.stdout)
            if self._is_the_answer(answer):
                return answer  # type: ignore[return-value]  # not None: _is_the_answer raised

    async def call_on_loop(
        self, seconds: float, header: dict[str, Any], *payload: bytes
    ) -> tuple[dict[str, Any], bytearray]:
        """``call``, awaited on the event loop rather than blocking a thread: the answer is read
        once the pipe holds it (written whole when it is small, ``worker.WHOLE_MESSAGE_BYTES``);
        a larger payload is read on a thread, so that the loop never waits for the worker to write."""
        assert self.process.stdout is not None
        stdout = self.process.stdout
        loop = asyncio.get_running_loop()
        self._send(header, *payload)
        deadline = loop.time() + seconds
        while True:
            if not await _readable(stdout.fileno(), max(0.0, deadline - loop.time())):
                self._end_for_time(seconds)
                await _readable(stdout.fileno(), None)  # its end, once killed
            head = read_head(stdout)
            if head is None:
                raise EOFError("the worker ended")
            header_read, size = head
            if size <= WHOLE_MESSAGE_BYTES:  # in the pipe already
                answer = (header_read, read_payload(stdout, size))
            else:
                answer = (header_read, await anyio.to_thread.run_sync(read_payload, stdout, size))
            if self._is_the_answer(answer):
                return answer

    def _send(self, header: dict[str, Any], *payload: bytes) -> None:
        assert self.process.stdin is not None
        self._tail.clear()  # what it wrote before this request says nothing of why it ends now
        self.declared = []
        write_message(self.process.stdin, header, *payload)

    def _end_for_time(self, seconds: float) -> None:
        self.timed_out = seconds
        self.process.kill()

    def _is_the_answer(self, message: tuple[dict[str, Any], bytearray] | None) -> bool:
        """Whether ``message`` answers the request (else it is a note before the answer, kept);
        EOFError when the worker ended instead."""
        if message is None:
            raise EOFError("the worker ended")
        if message[0].get("kind") == DECLARED:
            told = message[0]  # what a create declared: a later note of the same table says more
            self.declared = [note for note in self.declared if note["table"] != told["table"]] + [told]
            return False
        self.idle_since = time.monotonic()
        return True

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
        how = (
            "with the data workers' template"
            if code is None  # a grandchild of this process, reaped by the template that ended
            else f"signal {signal.Signals(-code).name}"
            if code < 0
            else f"exit status {code}"
        )
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


async def _readable(fd: int, seconds: float | None) -> bool:
    """Whether the pipe ``fd`` has something to read (or has ended) within ``seconds`` (None: no
    limit), awaited on the event loop; the pipe is left blocking, as a thread reads it."""
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, _set_once, readable)
    try:
        await asyncio.wait_for(readable, seconds)
        return True
    except asyncio.TimeoutError:
        return False
    finally:
        loop.remove_reader(fd)
        os.set_blocking(fd, True)  # uvloop's reader made it non-blocking


def _set_once(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


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
