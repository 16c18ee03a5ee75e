"""A Lance REST Namespace server in front of any ``LanceNamespace`` (by default the Iceberg
bridge), so that every Lance client — pylance's ``RestNamespace``, lancedb in any language, the
lance-spark connector — uses tables stored in the Iceberg catalog. Needs the ``server`` extra.

Importing the package loads nothing of that extra: the command line reads the server's settings
(``settings``) before any command runs, and each name below loads its module on first use.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lance_iceberg_ns.server.settings import DEFAULT_MAX_CONNECTIONS, DEFAULT_REQUEST_READ_TIMEOUT, ServeSettings

if TYPE_CHECKING:
    import uvicorn
    from lance_namespace import LanceNamespace

    from lance_iceberg_ns.server.app import create_app
    from lance_iceberg_ns.server.endpoints import DEFAULT_DELIMITER, parse_path_id
    from lance_iceberg_ns.server.factory import create_app_from_env

# Imported when first used: the app's modules make the metrics as they load, which must not happen
# while a worker of ``serve --workers`` unpickles its settings (see ``factory.AppFactory``).
_LAZY = {
    "create_app": "lance_iceberg_ns.server.app",
    "DEFAULT_DELIMITER": "lance_iceberg_ns.server.endpoints",
    "parse_path_id": "lance_iceberg_ns.server.endpoints",
    "create_app_from_env": "lance_iceberg_ns.server.factory",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "DEFAULT_DELIMITER",
    "RunningServer",
    "ServeSettings",
    "create_app",
    "create_app_from_env",
    "parse_path_id",
    "serve_in_background",
]


@dataclass
class RunningServer:
    """A server running in a background thread; ``uri`` is what Lance clients connect to."""

    uri: str
    port: int
    _server: uvicorn.Server = field(repr=False)
    _thread: threading.Thread = field(repr=False)

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def serve_in_background(
    namespace: LanceNamespace | None = None,
    *,
    properties: Mapping[str, str] | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    auth_tokens: Sequence[str] = (),
    forward_bearer_token: bool = False,
    startup_timeout: float = 30.0,
    request_read_timeout: float = DEFAULT_REQUEST_READ_TIMEOUT,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    **app_options: Any,
) -> RunningServer:
    """Serve the namespace from a thread (for tests and notebooks); ``port=0`` picks a free one.
    A client has ``request_read_timeout`` seconds to send a whole request (see ``guard``), and at
    most ``max_connections`` are kept open (see ``connections``)."""
    import uvicorn

    from lance_iceberg_ns.server.app import create_app
    from lance_iceberg_ns.server.connections import Connections
    from lance_iceberg_ns.server.guard import read_deadline_protocol

    app = create_app(
        namespace,
        properties=properties,
        auth_tokens=auth_tokens,
        forward_bearer_token=forward_bearer_token,
        **app_options,
    )
    protocol = read_deadline_protocol(request_read_timeout, connections=Connections(max_connections))
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", lifespan="off", access_log=False, http=protocol
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="lance-rest-namespace", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"The Lance REST server did not start on {host}:{port}")
        time.sleep(0.01)
    bound_port = server.servers[0].sockets[0].getsockname()[1]
    return RunningServer(f"http://{host}:{bound_port}", bound_port, server, thread)
