"""Data workers started as forks of a template that has already loaded pylance.

A worker started as a new interpreter pays its imports (pylance, pyarrow, pyiceberg, the bridge)
before it can answer: 1.6 s of CPU on an idle machine, 5–10 s of wall time on a loaded two-core
host. A client whose requests end workers (allocation bombs run to a worker's ceiling, reads of a
table whose planted manifest overflows pylance's stack) made every worker start again at that price
at once, and every other client's data request wait for it. So the server starts one *template*:
a process that imports all that once and then only forks. A worker is a fork of it, ready to
answer in milliseconds.

The template runs no data work: its only threads are those pyarrow starts as it is imported, which
Arrow and its allocator make again in a fork (``os.register_at_fork``), and Lance starts none until
it is used. A fork is therefore what a new interpreter would be once it had imported the same
modules.

The template and the server talk over a Unix socket of messages (``SOCK_SEQPACKET``, one JSON object
each):
- the server asks for a worker with its memory ceiling and the worker's three pipe ends (stdin,
  stdout, stderr) attached (``SCM_RIGHTS``); the template answers with the worker's pid;
- the template reports each worker's end as it reaps it, with its exit status (``-N`` for signal N,
  as ``subprocess`` has it);
- ending a worker is asked of the template: it alone may signal a pid without the risk that the pid
  has been reaped and reused.

The template ends when the server's end of the socket closes (the server stopped, or ended in any
way), and the kernel ends its workers with it (``lifetime.end_with_parent``): a worker stuck in C
code that holds the interpreter ends too. The template itself is never stuck: it only waits on the
socket, so its end is seen at once, and it is started by whichever server thread first needs a
worker, which may end before the server does, so the kernel cannot be asked to tie it to that.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback
from typing import IO, Any

from lance_iceberg_ns.server.settings import SMALLEST_DATA_WORKER_MEMORY_MB
from lance_iceberg_ns.server.worker import READY, load, main

FORKING_MODULE = __name__ if __name__ != "__main__" else "lance_iceberg_ns.server.forking"
START_SECONDS = 120.0  # how long the template may take to import what workers run (a loaded host)
STOP_SECONDS = 5.0  # how long the template may take to end once its socket is closed
_MESSAGE_BYTES = 4096
_STARTED_WORKER_FAILED = 70  # a fork's exit status when it could not become a worker


# --- in the server ----------------------------------------------------------------------------------


class Forked:
    """A worker forked by the template, seen from the server: its pipes, and what ``subprocess.Popen``
    offers of a child (``pid``, ``returncode``, ``kill``, ``wait``)."""

    def __init__(self, template: Template, pid: int, stdin: IO[bytes], stdout: IO[bytes], stderr: IO[bytes]) -> None:
        self.pid = pid
        self.stdin: IO[bytes] | None = stdin
        self.stdout: IO[bytes] | None = stdout
        self.stderr: IO[bytes] | None = stderr
        self.returncode: int | None = None
        self._template = template
        self._ended = threading.Event()

    def kill(self) -> None:
        if not self._ended.is_set():
            self._template.kill(self.pid)

    def wait(self, timeout: float | None = None) -> int | None:
        """Its exit status once the template has reaped it; ``subprocess.TimeoutExpired`` after ``timeout``."""
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"data worker {self.pid}", timeout or 0)
        return self.returncode

    def poll(self) -> int | None:
        return self.returncode

    @property
    def ended(self) -> bool:
        """Whether it has ended: reaped by the template, or gone with it (``returncode`` then None)."""
        return self._ended.is_set()

    def end(self, returncode: int | None) -> None:
        self.returncode = returncode
        self._ended.set()


class Template:
    """The template process of this server process, and its socket: ``start`` forks a worker."""

    _current: Template | None = None
    _creating = threading.Lock()

    @classmethod
    def running(cls) -> Template:
        """The template, started (again) when there is none or it has ended; OSError or EOFError
        when it cannot start."""
        with cls._creating:
            if cls._current is None or not cls._current.alive():
                if cls._current is not None:
                    cls._current.stop()
                cls._current = cls()
            return cls._current

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", FORKING_MODULE],
                stdin=theirs.fileno(),
                start_new_session=True,  # a Ctrl-C or a signal to the server's group is the server's to handle
            )
        finally:
            theirs.close()
        self._socket = ours
        self._lock = threading.Lock()  # one start at a time: its answer is the next "started"
        self._answers: list[dict[str, Any]] = []
        self._answered = threading.Condition()
        self._workers: dict[int, Forked] = {}
        self._ended_early: dict[int, int | None] = {}  # ends reported before their start was answered
        self._ended = False
        ours.settimeout(START_SECONDS)
        try:
            ready = self._receive()
        except (OSError, ValueError):
            ready = None
        if ready is None or ready.get("kind") != READY:
            self.stop()
            raise EOFError("the data workers' template ended before it was ready")
        ours.settimeout(None)
        threading.Thread(target=self._read, name="data-worker-template", daemon=True).start()

    def alive(self) -> bool:
        return not self._ended and self.process.poll() is None

    def start(self, memory_bytes: int) -> Forked:
        """A worker forked with this memory ceiling, its pipes connected to this process."""
        stdin_read, stdin_write = os.pipe()
        stdout_read, stdout_write = os.pipe()
        stderr_read, stderr_write = os.pipe()
        try:
            with self._lock:
                message = json.dumps({"kind": "start", "memory_bytes": memory_bytes}).encode()
                socket.send_fds(self._socket, [message], [stdin_read, stdout_write, stderr_write])
                answer = self._next_answer()
                if answer.get("kind") != "started":
                    raise OSError(f"the data workers' template could not fork: {answer.get('error')}")
                forked = Forked(
                    self,
                    int(answer["pid"]),
                    open(stdin_write, "wb", buffering=0),  # noqa: SIM115  (the worker's to close)
                    open(stdout_read, "rb", buffering=0),  # noqa: SIM115
                    open(stderr_read, "rb"),  # noqa: SIM115
                )
                with self._answered:
                    if forked.pid in self._ended_early:  # reaped before this thread got here
                        forked.end(self._ended_early.pop(forked.pid))
                    elif self._ended:  # the template is gone, and the worker with it
                        forked.end(None)
                    else:
                        self._workers[forked.pid] = forked
            stdin_write = stdout_read = stderr_read = -1  # the worker's now
            return forked
        finally:
            for end in (stdin_read, stdout_write, stderr_write, stdin_write, stdout_read, stderr_read):
                if end >= 0:
                    with contextlib.suppress(OSError):
                        os.close(end)

    def kill(self, pid: int) -> None:
        with contextlib.suppress(OSError):
            self._socket.send(json.dumps({"kind": "kill", "pid": pid}).encode())

    def stop(self) -> None:
        """Close the socket: the template ends, and its workers with it."""
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()
        try:
            self.process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _receive(self) -> dict[str, Any] | None:
        message = self._socket.recv(_MESSAGE_BYTES)
        return json.loads(message) if message else None

    def _next_answer(self) -> dict[str, Any]:
        with self._answered:
            if not self._answered.wait_for(lambda: self._answers or self._ended, START_SECONDS):
                raise OSError(f"the data workers' template did not fork within {START_SECONDS:g} s")
            if not self._answers:
                raise EOFError("the data workers' template ended")
            return self._answers.pop(0)

    def _read(self) -> None:
        """Reports from the template: each worker's end, and the answers to starts."""
        try:
            while (message := self._receive()) is not None:
                if message.get("kind") == "ended":
                    with self._answered:
                        forked = self._workers.pop(int(message["pid"]), None)
                        if forked is None:
                            self._ended_early[int(message["pid"])] = message.get("returncode")
                    if forked is not None:
                        forked.end(message.get("returncode"))
                else:
                    with self._answered:
                        self._answers.append(message)
                        self._answered.notify_all()
        except (OSError, ValueError):
            pass
        with self._answered:
            self._ended = True
            self._answered.notify_all()
        with self._answered:
            gone = list(self._workers.values())
        for forked in gone:  # they end with the template, unreaped by us
            forked.end(None)


def start_worker(memory_bytes: int) -> Forked:
    """A data worker with this memory ceiling, forked from the template (started first if need be)."""
    return Template.running().start(memory_bytes)


def stop_template() -> None:
    with Template._creating:
        if Template._current is not None:
            Template._current.stop()
            Template._current = None


# --- in the template -----------------------------------------------------------------------------------


def serve_forks() -> None:
    """The template: load what workers run, then fork one for each start the server asks for,
    until the server's end of the socket (this process's stdin) closes."""
    import warnings

    control = socket.socket(fileno=os.dup(0))
    with open(os.devnull, "rb") as nothing:
        os.dup2(nothing.fileno(), 0)
    warnings.filterwarnings("ignore", message="lance is not fork-safe")  # see the module's docstring
    _, most = resource.getrlimit(resource.RLIMIT_DATA)  # loaded within the smallest ceiling a worker may have:
    smallest = SMALLEST_DATA_WORKER_MEMORY_MB << 20  # what reserves address space on import then reserves less
    resource.setrlimit(
        resource.RLIMIT_DATA, (smallest if most == resource.RLIM_INFINITY else min(smallest, most), most)
    )
    load()
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    live: set[int] = set()
    control.send(json.dumps({"kind": READY}).encode())
    while True:
        readable, _, _ = select.select([control.fileno(), wake_read], [], [])
        if wake_read in readable:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_read, 1024)
            _reap(control, live)
        if control.fileno() not in readable:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(control, _MESSAGE_BYTES, 3)
        except OSError:
            data, fds = b"", []
        if not data:
            return  # the server is gone: so are the workers, once they see it
        message = json.loads(data)
        if message["kind"] == "kill":
            if int(message["pid"]) in live:  # not yet reaped: the pid is still that worker's
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(message["pid"]), signal.SIGKILL)
        elif message["kind"] == "start":
            _fork(control, (wake_read, wake_write), fds, int(message["memory_bytes"]), live)


def _fork(control: socket.socket, wake: tuple[int, int], fds: list[int], memory_bytes: int, live: set[int]) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    template = os.getpid()
    try:
        pid = os.fork()
    except OSError as exc:
        for fd in fds:
            os.close(fd)
        control.send(json.dumps({"kind": "failed", "error": exc.strerror}).encode())
        return
    if pid == 0:
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            control.close()
            for fd in wake:
                os.close(fd)
            os.setsid()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            for fd in fds:
                if fd > 2:
                    os.close(fd)
            main(memory_bytes, template)
        except BaseException as exc:  # said on its stderr, which the server relays, unless the server is gone
            if not isinstance(exc, ConnectionError):
                traceback.print_exc()
                sys.stderr.flush()
            os._exit(_STARTED_WORKER_FAILED)
        os._exit(0)
    for fd in fds:
        os.close(fd)
    live.add(pid)
    control.send(json.dumps({"kind": "started", "pid": pid}).encode())


def _reap(control: socket.socket, live: set[int]) -> None:
    while live:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        live.discard(pid)
        returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        control.send(json.dumps({"kind": "ended", "pid": pid, "returncode": returncode}).encode())


if __name__ == "__main__":
    with contextlib.suppress(ConnectionError):  # the server went first: nothing to say to anybody
        serve_forks()
