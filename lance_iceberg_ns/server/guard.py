"""What a request must pass before any route runs: a valid bearer token when the server requires
one, a body within its cap, and the whole request read in time with a head of bounded size, so
that no caller reaches a namespace unauthenticated and no body, slow client or huge head can
exhaust the server's memory or connections.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
from collections.abc import Sequence

from lance_namespace.errors import ErrorCode, UnauthenticatedError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from lance_iceberg_ns.limits import DEFAULT_MAX_DATA_BYTES, data_bytes_allowed
from lance_iceberg_ns.server.responses import error_body, error_response
from lance_iceberg_ns.server.routes import ROUTES
from lance_iceberg_ns.server.settings import DEFAULT_REQUEST_READ_TIMEOUT

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_DATA_BODY_BYTES = DEFAULT_MAX_DATA_BYTES  # Arrow IPC bodies of the data routes (create, insert, merge)
# The routes whose bodies are Arrow IPC data, as one pattern over request paths.
_DATA_ROUTES = re.compile(
    "|".join(f"^{re.escape(route.path).replace(re.escape('{id}'), '[^/]+')}$" for route in ROUTES if route.arrow_body)
)
_OPEN_PATHS = frozenset({"/openapi.json"})  # served without credentials: it holds no data


def bearer_token(authorizations: Sequence[str]) -> str | None:
    """The bearer token of a request's ``Authorization`` headers, or None without one. Two or more
    headers are ``UnauthenticatedError``: components that read the first and components that read
    the last would each see another caller."""
    if len(authorizations) > 1:
        raise UnauthenticatedError("A request may carry one Authorization header, not several")
    authorization = authorizations[0] if authorizations else ""
    if authorization[:7].lower() == "bearer ":
        return authorization[7:].strip() or None
    return None


class GuardMiddleware:
    """Checks the bearer token (when tokens are configured) and caps the request body, before any
    route runs (data routes, whose bodies are Arrow IPC, have a cap of their own); both failures
    answer with the spec's error body."""

    def __init__(self, app: ASGIApp, auth_tokens: Sequence[str], max_body_bytes: int, max_data_body_bytes: int) -> None:
        self.app = app
        self.auth_tokens = [token.encode() for token in auth_tokens]
        self.max_body_bytes = max_body_bytes
        self.max_data_body_bytes = max_data_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
        authorizations = [value.decode("latin-1") for key, value in scope["headers"] if key.lower() == b"authorization"]
        try:
            token = bearer_token(authorizations)
        except UnauthenticatedError as exc:  # ambiguous whether or not tokens are checked here
            await error_response(str(exc), ErrorCode.UNAUTHENTICATED, path)(scope, receive, send)
            return
        if self.auth_tokens and path not in _OPEN_PATHS and not self._authorized(token):
            message = "A valid bearer token is required (Authorization: Bearer <token>)"
            await error_response(message, ErrorCode.UNAUTHENTICATED, path)(scope, receive, send)
            return
        limit = self.max_data_body_bytes if _DATA_ROUTES.match(path) else self.max_body_bytes
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await self._too_large(scope, receive, send, limit)
            return
        with data_bytes_allowed(self.max_data_body_bytes):  # what an Arrow body may decompress to, too
            await self.app(scope, self._capped(receive, limit), send)

    def _authorized(self, token: str | None) -> bool:
        if token is None:
            return False
        presented = token.encode()
        return any(hmac.compare_digest(presented, allowed) for allowed in self.auth_tokens)

    @staticmethod
    def _capped(receive: Receive, limit: int) -> Receive:
        seen = 0

        async def capped_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge()
            return message

        return capped_receive

    @staticmethod
    async def _too_large(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        message = f"The request body exceeds {limit} bytes"
        response = error_response(message, ErrorCode.INVALID_INPUT, scope.get("path", ""), status=413)
        await response(scope, receive, send)


class BodyTooLarge(StarletteHTTPException):
    """A streamed body went past the limit (an HTTPException, which FastAPI lets through while it
    reads a body, where any other failure would become a 400)."""

    def __init__(self) -> None:
        super().__init__(413, "The request body is too large")


DEFAULT_MAX_HEAD_BYTES = 64 * 1024
BODY_BYTES_PER_SECOND = 1024 * 1024  # a body is given this rate on top of the read timeout


class ReadDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol with what it lacks against slow and oversized requests, which reach
    no ASGI middleware before their head is read: each request must be read in full within
    ``read_timeout`` seconds of its first byte (and a second more per MiB of the body it declares),
    and its head (request line and headers) may be at most ``max_head_bytes``. A client that
    trickles a request or stops half way is answered 408 and cut off, a head too large 431, and a
    connection that sends nothing is closed; none of them holds anything but a socket meanwhile."""

    read_timeout = DEFAULT_REQUEST_READ_TIMEOUT
    max_head_bytes = DEFAULT_MAX_HEAD_BYTES

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._reading = False  # a request has begun and is not read in full
        self._head_read = False
        self._refused = False
        super().connection_made(transport)
        self._read_by(self.loop.time() + self.read_timeout)  # a connection that sends nothing

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes, self._reading, self._head_read = 0, True, False
        if self._deadline is None:
            self._read_by(self.loop.time() + self.read_timeout)

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value))
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._head_read = True
        declared = dict(self.headers).get(b"content-length", b"")
        if declared.isdigit() and self._deadline is not None:
            self._read_by(self._deadline.when() + int(declared) / BODY_BYTES_PER_SECOND)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._reading = False
        self._stop_deadline()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        answered_early = self._reading and self._head_read and self.cycle is not None and self.cycle.response_complete
        if answered_early and self._deadline is not None:  # refused (401, 413) before its body was read:
            self._read_by(min(self._deadline.when(), self.loop.time() + self.read_timeout))  # no allowance for it

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_deadline()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        if not self._refused:  # a head refused as too large has its answer already
            super().send_400_response(msg)

    def _count_head(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > self.max_head_bytes:
            self._refuse(431, f"The request line and headers exceed {self.max_head_bytes} bytes")
            raise _HeadTooLarge()  # stops the parser; uvicorn's own answer is suppressed above

    def _read_by(self, when: float) -> None:
        self._stop_deadline()
        self._deadline = self.loop.call_at(when, self._expired)

    def _stop_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        waiting = self.cycle if self._head_read else None  # the app, waiting for the rest of the body
        if not self._reading or (waiting is not None and waiting.response_started):
            self.transport.close()  # no request begun, or its answer is out: nobody to answer
            return
        if waiting is not None:
            waiting.disconnected = True  # what uvicorn does when a client leaves: the app stops
            waiting.message_event.set()
        self._refuse(408, f"The request was not read within {self.read_timeout:g} seconds")

    def _refuse(self, status: int, message: str) -> None:
        self._refused = True
        path = self.scope.get("path", "") if self._head_read else ""
        body = json.dumps(error_body(message, ErrorCode.INVALID_INPUT, path)).encode()
        head = f"content-type: application/json\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
        self.transport.write(STATUS_LINE[status] + head.encode() + body)
        self.transport.close()


class _HeadTooLarge(Exception):
    """Raised from a parser callback to stop reading a head that is too large."""


def read_deadline_protocol(
    read_timeout: float = DEFAULT_REQUEST_READ_TIMEOUT, max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES
) -> type[ReadDeadlineProtocol]:
    """The HTTP protocol class to hand uvicorn (``http=``) for these limits."""
    limits = {"read_timeout": read_timeout, "max_head_bytes": max_head_bytes}
    return type("ReadDeadlineProtocol", (ReadDeadlineProtocol,), limits)
