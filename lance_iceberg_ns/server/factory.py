"""The app as a process manager or a uvicorn worker builds it: from settings, never from argv.

``serve --workers N`` hands uvicorn an ``AppFactory``: the settings travel to each worker process
through the pipe uvicorn starts it with, so that neither the bearer tokens nor the catalog's
secrets appear on a command line or in an environment of their own making. For a process manager
of your own (gunicorn with uvicorn's worker class, say), ``create_app_from_env`` reads the same
settings as ``lance-iceberg-ns serve`` does from ``LANCE_ICEBERG_*`` and ``LANCE_ICEBERG_NS_*``
(``ServeSettings.from_environment``):

    gunicorn -k uvicorn.workers.UvicornWorker -w 4 -b 0.0.0.0:2333 \\
        'lance_iceberg_ns.server:create_app_from_env()'
    uvicorn --factory lance_iceberg_ns.server:create_app_from_env --workers 4
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from lance_namespace.errors import LanceNamespaceError
from starlette.applications import Starlette
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess
from uvicorn.supervisors.multiprocess import SIGNALS

from lance_iceberg_ns.server.connections import Connections
from lance_iceberg_ns.server.guard import DEFAULT_MAX_HEAD_BYTES, read_deadline_protocol
from lance_iceberg_ns.server.lifetime import end_with_parent
from lance_iceberg_ns.server.settings import ServeSettings, ServeSettingsError


@dataclass(frozen=True)
class AppFactory:
    """``create_app`` for ``settings``, called in each worker (uvicorn's ``factory=True``); a
    worker that cannot build it ends with uvicorn's failed-start code."""

    settings: ServeSettings
    supervisor: int = field(default_factory=os.getpid)  # the process that made it: the supervisor

    def __call__(self) -> Starlette:
        _end_with_the_supervisor(self.supervisor)
        with _startup_failure_ends_the_worker():
            return self.build()

    def build(self) -> Starlette:
        """The app, in this process (one server process: its errors reach the command)."""
        from lance_iceberg_ns.server.app import create_app

        return create_app(**self.settings.app_options())


def _end_with_the_supervisor(supervisor: int) -> None:
    """Have the kernel send this server process SIGTERM (a graceful stop) when the process that
    started it ends, however it ends: a supervisor killed outright (SIGKILL) left its server
    processes serving on the port, which the next start could then not take. Nothing in the process
    that made the factory (``create_app_from_env`` under gunicorn's or uvicorn's own workers, one
    server process)."""
    if supervisor != os.getpid():
        end_with_parent(supervisor, signal.SIGTERM)


@contextmanager
def _startup_failure_ends_the_worker() -> Iterator[None]:
    """A worker that cannot build the app (its environment broken, the metrics directory gone)
    would fail the same way every time it is started again: it logs why and ends with the exit code
    that uvicorn's and gunicorn's supervisors both take for a failed start (3), so that they stop
    instead of starting it again forever."""
    try:
        yield
    except Exception as exc:
        explained = isinstance(exc, (ServeSettingsError, LanceNamespaceError))  # its message says it all
        logging.getLogger(__name__).error("This worker could not build the app: %s", exc, exc_info=not explained)
        raise SystemExit(STARTUP_FAILURE) from None


@dataclass(frozen=True)
class DeadlineProtocolFactory:
    """The guard's HTTP protocol for uvicorn's ``http=``, in a form that pickles to worker
    processes (the protocol class itself is made at run time)."""

    read_timeout: float
    max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES
    connections: Connections = field(default_factory=Connections)  # each process its own

    def __call__(self, **arguments: Any) -> asyncio.Protocol:
        return read_deadline_protocol(self.read_timeout, self.max_head_bytes, self.connections)(**arguments)


class Supervisor(Multiprocess):
    """uvicorn's supervisor of ``serve --workers N``, ending as one server process ends once its
    workers have stopped: after Ctrl-C ``interrupted`` (exit 130), after SIGTERM or SIGQUIT by that signal,
    and when a worker could not build the app (uvicorn then stops every worker rather than start it
    again) with one line and exit 1. uvicorn's own returns as if the server had finished its work
    (exit 0). It opens the port only once a worker can answer on it, and sees at once a worker that
    has ended, even one it was waiting for."""

    stopped_by: int | None = None

    def __init__(self, config: Any, sockets: list[socket.socket], opened: Callable[[], None] = lambda: None) -> None:
        """``sockets`` bound, and left for the first worker to open (``listen``): ``opened`` is
        called once the port takes connections, so that clients meet a closed port, not a hang,
        while the workers import the app."""
        self._host_handlers = {sig: signal.getsignal(sig) for sig in SIGNALS}  # uvicorn's replace them
        super().__init__(config, sockets)
        if self._host_handlers.get(signal.SIGQUIT) == signal.SIG_IGN:
            # ignored, not handled, so that the workers inherit it (exec resets a handled signal
            # to its default, and a worker then ended on a SIGQUIT that one server process ignores)
            signal.signal(signal.SIGQUIT, signal.SIG_IGN)
        self._opened = opened
        self._open = False

    def run(self) -> None:
        try:
            super().run()
        finally:  # the process may go on (serve called in process): its own handlers again
            for sig, handler in self._host_handlers.items():
                if handler is not None:  # None: not set from Python, nothing to put back
                    signal.signal(sig, handler)

    def keep_subprocess_alive(self) -> None:
        """uvicorn's health check of each worker, told at once of a worker that has ended, and the
        port announced once a worker has opened it."""
        for process in self.processes:
            # The supervisor keeps no copy of a worker's end of the pipe it asks "alive?" on: a
            # worker that ends while its answer is awaited (still importing, say) then ends the
            # wait at once (EOF), where it held the supervisor, and every restart, for the
            # whole timeout. The worker got its own copy when it was started.
            process.child_conn.close()
        self._announce_once_open()
        super().keep_subprocess_alive()
        self._announce_once_open()

    def _announce_once_open(self) -> None:
        if not self._open and any(_listening(sock) for sock in self.sockets):
            self._open = True
            self._opened()

    def handle_int(self) -> None:
        self.stopped_by = self.stopped_by or signal.SIGINT
        super().handle_int()

    def handle_term(self) -> None:
        self.stopped_by = self.stopped_by or signal.SIGTERM
        super().handle_term()

    def handle_quit(self) -> None:
        """SIGQUIT (Ctrl-\\) stops the server, as it stops one server process: uvicorn's supervisor
        ignores it, and started again the workers that it had killed. Unless it was ignored where
        the server started, as one server process then ignores it."""
        if self._host_handlers.get(signal.SIGQUIT) == signal.SIG_IGN:
            return
        self.stopped_by = self.stopped_by or signal.SIGQUIT
        logging.getLogger("uvicorn.error").info("Received SIGQUIT, exiting.")  # as uvicorn says the others
        self.should_exit.set()

    def end_as_stopped(self) -> None:
        """Raise what stopped it again, now that the workers are gone and the metrics cleaned up."""
        stopped_by = self.stopped_by or next((sig for sig in self.signal_queue if sig in STOPPING), None)
        if stopped_by is None and any(process.exitcode == STARTUP_FAILURE for process in self.processes):
            raise WorkerFailedToStart()
        if stopped_by == signal.SIGINT:
            raise KeyboardInterrupt
        if stopped_by is not None:
            signal.signal(stopped_by, signal.SIG_DFL)
            signal.raise_signal(stopped_by)


def _listening(sock: socket.socket) -> bool:
    """Whether a worker has opened ``sock`` (asyncio's server calls ``listen`` once the app is built)."""
    return bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))


# The signals that stop the server; one still queued when a worker's failure stopped it wins.
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT)


class WorkerFailedToStart(RuntimeError):
    """A worker of ``serve --workers N`` could not build the app (its own error is in the log)."""

    def __init__(self) -> None:
        super().__init__("A worker could not build the app (its error is above): not serving")


def create_app_from_env() -> Starlette:
    """The app configured as ``lance-iceberg-ns serve`` would be from the environment alone
    (``LANCE_ICEBERG_*`` for the bridge, ``LANCE_ICEBERG_NS_*`` for the server, including
    ``LANCE_ICEBERG_NS_CONFIG_FILE``); the bridge's and the audit log's lines go to stderr in
    ``LANCE_ICEBERG_NS_LOG_FORMAT``. Settings or an app that cannot be made end the process with
    exit code 3 (SystemExit), which uvicorn's and gunicorn's supervisors take for a failed start."""
    import logging.config

    from lance_iceberg_ns.server.logs import log_config

    with _startup_failure_ends_the_worker():
        settings = ServeSettings.from_environment()
    config = log_config(settings.log_format)
    config["loggers"] = {"lance_iceberg_ns": config["loggers"]["lance_iceberg_ns"]}  # the host's own stay
    config["loggers"]["lance_iceberg_ns.audit"] = {"level": "INFO"}
    config.pop("root")
    logging.config.dictConfig(config)
    return AppFactory(settings)()
