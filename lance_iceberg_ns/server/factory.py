"""The app as a process manager or a uvicorn worker builds it: from settings, never from argv.

``serve --workers N`` hands uvicorn an ``AppFactory``: the settings travel to each worker process
through the pipe uvicorn starts it with, so that neither the bearer tokens nor the catalog's
secrets appear on a command line or in an environment of their own making. For a process manager
of your own (gunicorn with uvicorn's worker class, say), ``create_app_from_env`` reads the same
settings as ``lance-iceberg-ns serve`` does from ``LANCE_ICEBERG_*`` and ``LANCE_ICEBERG_NS_*``:

    gunicorn -k uvicorn.workers.UvicornWorker -w 4 -b 0.0.0.0:2333 \\
        'lance_iceberg_ns.server:create_app_from_env()'
    uvicorn --factory lance_iceberg_ns.server:create_app_from_env --workers 4
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from uvicorn.supervisors import Multiprocess

from lance_iceberg_ns.server.guard import DEFAULT_MAX_HEAD_BYTES, read_deadline_protocol


@dataclass(frozen=True)
class ServeSettings:
    """Everything ``create_app`` is built from, secrets included (kept out of ``repr``)."""

    properties: Mapping[str, str] = field(repr=False)
    auth_tokens: tuple[str, ...] = field(default=(), repr=False)
    forward_bearer_token: bool = False
    max_data_body_bytes: int | None = None
    share_static_credentials: bool = False
    data_threads: int | None = None

    def app_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "properties": dict(self.properties),
            "auth_tokens": list(self.auth_tokens),
            "forward_bearer_token": self.forward_bearer_token,
            "share_static_credentials": self.share_static_credentials,
        }
        if self.max_data_body_bytes is not None:
            options["max_data_body_bytes"] = self.max_data_body_bytes
        if self.data_threads is not None:
            options["data_threads"] = self.data_threads
        return options


@dataclass(frozen=True)
class AppFactory:
    """``create_app`` for ``settings``, called in each worker (uvicorn's ``factory=True``)."""

    settings: ServeSettings

    def __call__(self) -> Starlette:
        from lance_iceberg_ns.server.app import create_app

        return create_app(**self.settings.app_options())


@dataclass(frozen=True)
class DeadlineProtocolFactory:
    """The guard's HTTP protocol for uvicorn's ``http=``, in a form that pickles to worker
    processes (the protocol class itself is made at run time)."""

    read_timeout: float
    max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES

    def __call__(self, **arguments: Any) -> asyncio.Protocol:
        return read_deadline_protocol(self.read_timeout, self.max_head_bytes)(**arguments)


class Supervisor(Multiprocess):
    """uvicorn's supervisor of ``serve --workers N``, ending as one server process ends once its
    workers have stopped: after Ctrl-C ``interrupted`` (exit 130), after SIGTERM by that signal.
    uvicorn's own returns as if the server had finished its work (exit 0).

    A worker that fails before it ever served (it could not import or build the app: its
    environment is broken, the metrics directory gone) would fail the same way on every restart,
    and uvicorn would start it again forever, a traceback each time: that stops the server, which
    then fails as one process that cannot start does (``failed_to_start``). A worker that served
    and then died, or one killed by a signal (the OOM killer), is started again, as uvicorn does."""

    stopped_by: int | None = None
    failed_to_start: int | None = None  # the exit code of a worker that failed before it served

    def __init__(self, config: Any, sockets: list[Any]) -> None:
        super().__init__(config, sockets)
        self._served: set[int | None] = set()  # the workers (pids) seen serving

    def keep_subprocess_alive(self) -> None:
        for process in self.processes:
            if process.pid not in self._served and process.is_ready(timeout=0.05):
                self._served.add(process.pid)
        before = list(self.processes)
        super().keep_subprocess_alive()  # starts a new worker for each that ended (uvicorn's own failure code aside)
        for process in before:
            if process.pid not in self._served and process.exitcode is not None and process.exitcode > 0:
                self.failed_to_start = process.exitcode  # its own error; one killed by a signal is started again
                self.should_exit.set()  # the supervisor stops its workers, the one just started too
                return

    def handle_int(self) -> None:
        self.stopped_by = self.stopped_by or signal.SIGINT
        super().handle_int()

    def handle_term(self) -> None:
        self.stopped_by = self.stopped_by or signal.SIGTERM
        super().handle_term()

    def end_as_stopped(self) -> None:
        """Raise what stopped it again, now that the workers are gone and the metrics cleaned up."""
        if self.failed_to_start is not None and self.stopped_by is None:
            raise WorkerFailedToStart(self.failed_to_start)
        if self.stopped_by == signal.SIGINT:
            raise KeyboardInterrupt
        if self.stopped_by == signal.SIGTERM:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)


class WorkerFailedToStart(RuntimeError):
    """A worker of ``serve --workers N`` failed before it served (its own error is in the log above)."""

    def __init__(self, exit_code: int) -> None:
        super().__init__(f"A worker failed before it served (exit code {exit_code}; its error is above): not serving")


def create_app_from_env() -> Starlette:
    """The app configured as ``lance-iceberg-ns serve`` would be from the environment alone
    (``LANCE_ICEBERG_*`` for the bridge, ``LANCE_ICEBERG_NS_*`` for the server, including
    ``LANCE_ICEBERG_NS_CONFIG_FILE``); the bridge's and the audit log's lines go to stderr in
    ``LANCE_ICEBERG_NS_LOG_FORMAT``."""
    import logging.config

    from lance_iceberg_ns.cli.serving import settings_from_environment
    from lance_iceberg_ns.server.logs import log_config

    settings, log_format = settings_from_environment()
    config = log_config(log_format)
    config["loggers"] = {"lance_iceberg_ns": config["loggers"]["lance_iceberg_ns"]}  # the host's own stay
    config["loggers"]["lance_iceberg_ns.audit"] = {"level": "INFO"}
    config.pop("root")
    logging.config.dictConfig(config)
    return AppFactory(settings)()
