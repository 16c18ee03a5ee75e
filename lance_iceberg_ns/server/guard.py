"""What a request must pass before any route runs: a valid bearer token when the server requires
one, and a body within its cap, so that no caller reaches a namespace unauthenticated and no body
can exhaust the server's memory.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Sequence

from lance_namespace.errors import ErrorCode, UnauthenticatedError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lance_iceberg_ns.limits import DEFAULT_MAX_DATA_BYTES, data_bytes_allowed
from lance_iceberg_ns.server.responses import error_response
from lance_iceberg_ns.server.routes import ROUTES

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
