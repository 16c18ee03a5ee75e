"""The connections one server process keeps open, at most ``max_connections`` of them.

Every connection costs a file descriptor, and a process has a fixed number: a client that opens
connections and sends nothing would otherwise use them all, after which the server can accept no
one (nor open a pipe to a data worker, nor a socket to the catalog). So a connection past the cap
makes room by closing another, oldest first among the first of these kinds that has one:

1. no request under way for ``GRACE_SECONDS`` (kept alive between requests, or opened and silent:
   an HTTP client opens another);
2. a request whose head is not all sent (a client's head comes in one packet: one that trickles
   it is the attack this guards against);
3. a request whose body is not all sent, by when its request began (a client that trickles
   bodies, small ones included, would otherwise hold every connection);
4. no request under way, however recent.

A connection whose request is read (its answer is being made or sent) is never closed to make
room; when every connection is such, the new one is closed.

The cap is the lower of ``max_connections`` and the process's file limit less what the server
needs besides (``RESERVED_FILES``); the soft file limit is first raised to the hard one.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from typing import Any

from lance_iceberg_ns.server.settings import DEFAULT_MAX_CONNECTIONS

logger = logging.getLogger(__name__)

GRACE_SECONDS = 1.0  # a connection just opened, or just answered, is let send its request
RESERVED_FILES = 512  # the catalog's sockets, the data workers' pipes, logs, the metrics directory
WARN_EVERY_SECONDS = 60.0


class Connections:
    """The open connections of one server process, in the order they may be closed to make room."""

    def __init__(self, max_connections: int = DEFAULT_MAX_CONNECTIONS) -> None:
        self.max_connections = max_connections
        self._cap: int | None = None  # worked out in the process that serves (see ``cap``)
        self._idle: dict[Any, float] = {}  # no request under way, by when they became so
        self._heading: dict[Any, None] = {}  # a request begun, its head not yet read
        self._uploading: dict[Any, None] = {}  # its head read, its body not yet
        self._members: set[Any] = set()
        self._closed_to_make_room = 0
        self._warned = 0.0

    def __getstate__(self) -> dict[str, Any]:  # to a worker process of ``serve --workers``: its own
        return {"max_connections": self.max_connections}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["max_connections"])  # type: ignore[misc]

    @property
    def cap(self) -> int:
        if self._cap is None:
            self._cap = max(1, min(self.max_connections, _files_allowed() - RESERVED_FILES))
        return self._cap

    @property
    def open(self) -> int:
        return len(self._members)

    @property
    def closed_to_make_room(self) -> int:
        return self._closed_to_make_room

    def opened(self, connection: Any, transport: asyncio.Transport) -> bool:
        """Count a new connection, closing another to make room past the cap; False (and the new
        one closed) when none may be closed."""
        if len(self._members) >= self.cap:
            oldest = self._to_close()
            self._warn()
            self._closed_to_make_room += 1
            if oldest is None:
                transport.abort()
                return False
            self.closed(oldest)  # uncounted at once: its transport reports its end later
            oldest.transport.abort()
        self._members.add(connection)
        self._idle[connection] = time.monotonic()
        return True

    def _to_close(self) -> Any:
        """The connection to close for room (see the module's docstring), or None."""
        oldest_idle = next(iter(self._idle.items()), None)
        if oldest_idle is not None and time.monotonic() - oldest_idle[1] >= GRACE_SECONDS:
            return oldest_idle[0]
        for waiting in (self._heading, self._uploading):
            if waiting:
                return next(iter(waiting))
        return oldest_idle[0] if oldest_idle is not None else None

    def begun(self, connection: Any) -> None:
        """A request began on the connection: it may still be closed until its head is read."""
        if self._idle.pop(connection, _ABSENT) is not _ABSENT:
            self._heading[connection] = None

    def head_read(self, connection: Any) -> None:
        """The request's head is read: its body may still be closed for room until it is read."""
        if self._heading.pop(connection, _ABSENT) is not _ABSENT:
            self._uploading[connection] = None

    def body_read(self, connection: Any) -> None:
        """The request is read in full: the connection is not closed for room until it is answered."""
        self._uploading.pop(connection, None)

    def done(self, connection: Any) -> None:
        """The connection's request is answered and no other is under way."""
        if connection in self._members and connection not in self._heading and connection not in self._uploading:
            self._idle.pop(connection, None)
            self._idle[connection] = time.monotonic()  # the newest idle: closed last

    def closed(self, connection: Any) -> None:
        self._members.discard(connection)
        self._idle.pop(connection, None)
        self._heading.pop(connection, None)
        self._uploading.pop(connection, None)

    def _warn(self) -> None:
        now = time.monotonic()
        if now - self._warned >= WARN_EVERY_SECONDS:
            self._warned = now
            logger.warning(
                "%d connections are open, the most this server keeps (--max-connections, and the file limit): "
                "the oldest idle ones are closed to make room",
                self.cap,
            )


_ABSENT = object()


def _files_allowed() -> int:
    """The files this process may open: the soft limit, first raised to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else 1 << 20
