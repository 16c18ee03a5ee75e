"""What a request must pass before any route runs: a valid bearer token when the server requires
one, a body within its cap and within what the server may hold at once, and the whole request read
in time with a head of bounded size; and what its answer must pass: room among the bodies the
server holds, and a client that reads it. So no caller reaches a namespace unauthenticated, and no
body, answer, slow client or huge head can exhaust the server's memory or connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hmac
import json
import re
import socket
import struct
import termios
from collections.abc import Sequence

from lance_namespace.errors import ErrorCode, UnauthenticatedError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from lance_iceberg_ns.limits import DEFAULT_MAX_DATA_BYTES, data_bytes_allowed
from lance_iceberg_ns.server.capacity import HeldBytes
from lance_iceberg_ns.server.connections import Connections
from lance_iceberg_ns.server.responses import error_body, error_response
from lance_iceberg_ns.server.routes import ROUTES
from lance_iceberg_ns.server.settings import DEFAULT_REQUEST_READ_TIMEOUT

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_DATA_BODY_BYTES = DEFAULT_MAX_DATA_BYTES  # Arrow IPC bodies of the data routes (create, insert, merge)
DEFAULT_MAX_HELD_BYTES = 4 * DEFAULT_MAX_DATA_BODY_BYTES  # request and answer bodies held at once
FREE_BYTES = 64 * 1024  # a body or an answer this small is not counted among those held (a head's size)
ANSWER_TAKEN_BYTES = 64 * 1024  # what a client must take of its answer each read timeout, or be cut off
ANSWER_PART_BYTES = 1 << 20  # an answer is sent in parts of this size, each once the client took the last
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
    answer with the spec's error body. Every body and answer is counted among those the server
    holds (``HeldBytes``) while its request runs: 503 when one would not fit. An answer goes out
    in parts, each sent once the client has taken the last (a client that takes none for the read
    timeout is cut off, ``ReadDeadlineProtocol``), so that it stays counted until it is out."""

    def __init__(
        self,
        app: ASGIApp,
        auth_tokens: Sequence[str],
        max_body_bytes: int,
        max_data_body_bytes: int,
        max_held_bytes: int = DEFAULT_MAX_HELD_BYTES,
    ) -> None:
        self.app = app
        self.auth_tokens = [token.encode() for token in auth_tokens]
        self.max_body_bytes = max_body_bytes
        self.max_data_body_bytes = max_data_body_bytes
        largest = max(max_data_body_bytes, max_body_bytes)
        self.held = HeldBytes(max(max_held_bytes, largest), largest)  # one largest body fits

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
        client = scope["client"][0] if scope.get("client") else ""  # as the data threads tell clients apart
        request = _Held(self.held, client)
        size = int(declared) if declared.isdigit() and int(declared) > FREE_BYTES else 0
        if not self.held.fits(size, client):  # refused before it is read; counted as it arrives
            await self._busy(scope, receive, send, size, client)
            return
        try:
            with data_bytes_allowed(self.max_data_body_bytes):  # what an Arrow body may decompress to, too
                await self.app(scope, request.receive(receive, limit), request.send(send, scope))
        finally:
            self.held.give_back(request.taken, client)

    def _authorized(self, token: str | None) -> bool:
        if token is None:
            return False
        presented = token.encode()
        return any(hmac.compare_digest(presented, allowed) for allowed in self.auth_tokens)

    @staticmethod
    async def _too_large(scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        message = f"The request body exceeds {limit} bytes"
        response = error_response(message, ErrorCode.INVALID_INPUT, scope.get("path", ""), status=413)
        await response(scope, receive, send)

    async def _busy(self, scope: Scope, receive: Receive, send: Send, size: int, client: str) -> None:
        message = self.held.refusal(size, client)
        await error_response(message, ErrorCode.SERVICE_UNAVAILABLE, scope.get("path", ""))(scope, receive, send)


class _Held:
    """What one request holds among the server's bodies: its body, counted as it arrives (a length
    declared and never sent holds nothing), and its answer (taken as it starts). A body or an
    answer of at most ``FREE_BYTES`` is not counted: like a request's head, it costs a connection
    no more than that, and a catalog request always has room."""

    def __init__(self, held: HeldBytes, client: str) -> None:
        self.held = held
        self.client = client
        self.body_counted = FREE_BYTES  # the body's bytes taken already, or free
        self.taken = 0

    def take(self, size: int) -> bool:
        if not self.held.take(size, self.client):
            return False
        self.taken += max(size, 0)
        return True

    def receive(self, receive: Receive, limit: int) -> Receive:
        """``receive``, refusing a body beyond ``limit`` (413) or beyond the room left (503)."""
        seen = 0

        async def capped_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge()
                if seen > self.body_counted:  # arrived past what is counted
                    if not self.take(seen - self.body_counted):
                        raise NoRoomToHold(self.held.refusal(seen - self.body_counted, self.client))
                    self.body_counted = seen
            return message

        return capped_receive

    def send(self, send: Send, scope: Scope) -> Send:
        """``send``, taking room for the answer as it starts (a 503 in its place when there is none)
        and sending its body in parts of ``ANSWER_PART_BYTES``."""
        refused = False

        async def held_send(message: Message) -> None:
            nonlocal refused
            if refused:
                return  # the answer's body, after the 503 sent in its place
            if message["type"] == "http.response.start":
                length = next((value for key, value in message.get("headers", ()) if key == b"content-length"), b"")
                size = int(length) if length.isdigit() and int(length) > FREE_BYTES else 0
                if not self.take(size):
                    refused = True
                    answer = error_response(
                        self.held.refusal(size, self.client), ErrorCode.SERVICE_UNAVAILABLE, scope.get("path", "")
                    )
                    await answer(scope, _nothing_more, send)
                    return
                await send(message)
                return
            body = message.get("body", b"")
            if message["type"] != "http.response.body" or len(body) <= ANSWER_PART_BYTES:
                await send(message)
                return
            view, more = memoryview(body), message.get("more_body", False)
            for start in range(0, len(view), ANSWER_PART_BYTES):
                last = start + ANSWER_PART_BYTES >= len(view)
                part = view[start : start + ANSWER_PART_BYTES]
                await send({"type": "http.response.body", "body": part, "more_body": more or not last})

        return held_send


async def _nothing_more() -> Message:
    return {"type": "http.disconnect"}


class BodyTooLarge(StarletteHTTPException):
    """A streamed body went past the limit (an HTTPException, which FastAPI lets through while it
    reads a body, where any other failure would become a 400)."""

    def __init__(self) -> None:
        super().__init__(413, "The request body is too large")


class NoRoomToHold(StarletteHTTPException):
    """A streamed body went past the room left among the bodies the server holds: 503."""

    def __init__(self, message: str) -> None:
        super().__init__(503, message)


DEFAULT_MAX_HEAD_BYTES = 64 * 1024
BODY_BYTES_PER_SECOND = 1024 * 1024  # a body is given this rate on top of the read timeout


class ReadDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol with what it lacks against slow and oversized requests, which reach
    no ASGI middleware before their head is read: each request must be read in full within
    ``read_timeout`` seconds of its first byte (and a second more per MiB of the body it declares),
    and its head (request line and headers) may be at most ``max_head_bytes``. A client that
    trickles a request or stops half way is answered 408 and cut off, a head too large 431, and a
    connection that sends nothing is closed; none of them holds anything but a socket meanwhile.
    And an answer must be taken: a client that takes less than ``ANSWER_TAKEN_BYTES`` of it in
    ``read_timeout`` seconds while the server waits to send more, or not all of it within
    ``read_timeout`` and a second more per MiB, is cut off, so that its answer is let go."""

    read_timeout = DEFAULT_REQUEST_READ_TIMEOUT
    max_head_bytes = DEFAULT_MAX_HEAD_BYTES
    open_connections: Connections | None = None  # the process's open connections, and their cap

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        self._taking: asyncio.TimerHandle | None = None  # for the client to take some of its answer
        self._answering: object = None  # the request cycle whose answer the client is taking
        self._answer_by = 0.0  # when it must have taken all of it
        self._head_bytes = 0
        self._reading = False  # a request has begun and is not read in full
        self._head_read = False
        self._refused = False
        super().connection_made(transport)
        if self.open_connections is not None and not self.open_connections.opened(self, transport):
            return  # no room, and none to make: closed
        self._read_by(self.loop.time() + self.read_timeout)  # a connection that sends nothing

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self.open_connections is not None:
            self.open_connections.begun(self)
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
        if self.open_connections is not None:
            self.open_connections.head_read(self)
        declared = dict(self.headers).get(b"content-length", b"")
        if declared.isdigit() and self._deadline is not None:
            self._read_by(self._deadline.when() + int(declared) / BODY_BYTES_PER_SECOND)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._reading = False
        if self.open_connections is not None:
            self.open_connections.body_read(self)
        self._stop_deadline()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.open_connections is not None and not self._reading:
            self.open_connections.done(self)
        answered_early = self._reading and self._head_read and self.cycle is not None and self.cycle.response_complete
        if answered_early and self._deadline is not None:  # refused (401, 413) before its body was read:
            self._read_by(min(self._deadline.when(), self.loop.time() + self.read_timeout))  # no allowance for it

    def connection_lost(self, exc: Exception | None) -> None:
        if self.open_connections is not None:
            self.open_connections.closed(self)
        self._stop_deadline()
        self._stop_taking_deadline()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        self._stop_taking_deadline()
        if self.cycle is not self._answering:  # the answer's first wait: by when it must all be taken
            self._answering = self.cycle
            size = getattr(self.cycle, "expected_content_length", 0)
            self._answer_by = self.loop.time() + self.read_timeout + size / BODY_BYTES_PER_SECOND
        self._taking_from(self._unsent())

    def resume_writing(self) -> None:
        self._stop_taking_deadline()
        super().resume_writing()

    def _taking_from(self, buffered: int) -> None:
        """Cut the client off unless, within ``read_timeout``, it takes ``ANSWER_TAKEN_BYTES`` of
        the ``buffered`` answer bytes waiting for it (or all of them), and takes the whole answer
        within ``read_timeout`` and a second per MiB of it (as a body must be sent)."""

        def check() -> None:
            now = self._unsent()
            if buffered - now >= min(ANSWER_TAKEN_BYTES, buffered) and self.loop.time() < self._answer_by:
                self._taking_from(now)
            else:
                self._cut_off()

        wait = min(self.read_timeout, max(self._answer_by - self.loop.time(), 0.0))
        self._taking = self.loop.call_later(wait, check)

    def _cut_off(self) -> None:
        """Close the connection at once, dropping what the system still holds to send (a reset,
        not a close that would go on sending it), and let the app's send return: the answer is let go."""
        sock = self.transport.get_extra_info("socket")
        with contextlib.suppress(OSError, AttributeError, ValueError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    def _unsent(self) -> int:
        """The answer bytes not yet taken by the client: those waiting in the transport, and in the
        system's send queue for the socket (where Linux tells it), which may hold megabytes."""
        unsent = self.transport.get_write_buffer_size()
        sock = self.transport.get_extra_info("socket")
        with contextlib.suppress(OSError, AttributeError, ValueError):
            queued = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
            unsent += struct.unpack("i", queued)[0]
        return unsent

    def _stop_taking_deadline(self) -> None:
        if self._taking is not None:
            self._taking.cancel()
            self._taking = None

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
    read_timeout: float = DEFAULT_REQUEST_READ_TIMEOUT,
    max_head_bytes: int = DEFAULT_MAX_HEAD_BYTES,
    connections: Connections | None = None,
) -> type[ReadDeadlineProtocol]:
    """The HTTP protocol class to hand uvicorn (``http=``) for these limits, counting its
    connections among ``connections`` (a process's: see ``connections``) when given."""
    limits = {"read_timeout": read_timeout, "max_head_bytes": max_head_bytes, "open_connections": connections}
    return type("ReadDeadlineProtocol", (ReadDeadlineProtocol,), limits)
