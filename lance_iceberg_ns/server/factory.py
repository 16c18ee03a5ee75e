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
    uvicorn's own returns as if the server had finished its work (exit 0)."""

    stopped_by: int | None = None

    def handle_int(self) -> None:
        self.stopped_by = self.stopped_by or signal.SIGINT
        super().handle_int()

    def handle_term(self) -> None:
        self.stopped_by = self.stopped_by or signal.SIGTERM
        super().handle_term()

    def end_as_stopped(self) -> None:
        """Raise what stopped it again, now that the workers are gone and the metrics cleaned up."""
        if self.stopped_by == signal.SIGINT:
            raise KeyboardInterrupt
        if self.stopped_by == signal.SIGTERM:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)


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
