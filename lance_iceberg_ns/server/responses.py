"""What the server answers: a namespace's result as JSON or Arrow IPC, and every failure as the
spec's error body.

Every failure leaves as ``{"error", "code", "detail", "instance"}`` with the status of the spec's
code-to-HTTP table: namespace errors, malformed or ill-typed input, unknown routes, oversized
bodies, missing or ambiguous credentials and anything unexpected alike. Every body is built by
``error_body``: its message without build paths or internal class names
(``errors.public_message``), its detail the Lance error type of its code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

from fastapi.encoders import jsonable_encoder
from lance_namespace import QueryTableResponse
from lance_namespace.errors import ErrorCode, LanceNamespaceError, from_error_code
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lance_iceberg_ns.data.ipc import QueryAnswer
from lance_iceberg_ns.errors.codes import http_status_for
from lance_iceberg_ns.errors.translation import is_panic, public_message

logger = logging.getLogger(__name__)

ARROW_STREAM = "application/vnd.apache.arrow.stream"
ARROW_FILE = "application/vnd.apache.arrow.file"
_LONGEST_INSTANCE = 512
_LONGEST_INLINE_MESSAGE = 4096  # longer messages are cleaned in a worker thread
_MOST_FIELD_ERRORS = 10


def error_body(message: str, code: int, instance: str) -> dict[str, Any]:
    """The spec's error body, the one shape of every error answer: the message as a remote caller
    may see it, the code, the Lance error type of the code (``TableNotFoundError``) as detail."""
    detail = type(from_error_code(int(code), "")).__name__
    if len(instance) > _LONGEST_INSTANCE:  # the request's path, as long as its sender made it
        instance = instance[: _LONGEST_INSTANCE - 1] + "…"
    return {"error": public_message(message), "code": int(code), "detail": detail, "instance": instance}


RETRY_AFTER_SECONDS = 1  # told with every 503: the server (or its catalog) is busy or away for now


def error_response(message: str, code: int, instance: str, status: int | None = None) -> JSONResponse:
    status = status or http_status_for(code)
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)} if status == 503 else None
    return JSONResponse(error_body(message, code, instance), status_code=status, headers=headers)


async def answer_error(message: str, code: int, instance: str, status: int | None = None) -> JSONResponse:
    """``error_response``, built in a worker thread when the message is long (it may echo a large
    input), so that cleaning it never holds up the event loop."""
    if len(message) + len(instance) <= _LONGEST_INLINE_MESSAGE:
        return error_response(message, code, instance, status)
    return await run_in_threadpool(error_response, message, code, instance, status)


def render_result(result: Any) -> Response:
    """An operation's answer as HTTP: no body, Arrow IPC bytes (a query's rows), or JSON."""
    if result is None:
        return Response(status_code=200)
    if isinstance(result, QueryTableResponse | QueryAnswer):  # query results travel as Arrow IPC file bytes
        data: Any = result.data or b""  # the model also admits str and tuples; namespaces answer bytes
        return Response(bytes(data), media_type=ARROW_FILE)
    if isinstance(result, BaseModel):
        to_dict = getattr(result, "to_dict", None)
        content = to_dict() if callable(to_dict) else result.model_dump(by_alias=True, exclude_none=True)
        return JSONResponse(jsonable_encoder(content))  # times (an index's created_at) as ISO 8601
    if isinstance(result, bytes | bytearray):
        return Response(bytes(result), media_type=ARROW_STREAM)
    return JSONResponse(result)


def validation_summary(errors: Sequence[Any]) -> str:
    """What was wrong with the input, field by field (the first few), without echoing the values."""
    parts = []
    for error in errors[:_MOST_FIELD_ERRORS]:
        location = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        parts.append(f"{location or 'body'}: {error.get('msg', 'invalid')}")
    if len(errors) > _MOST_FIELD_ERRORS:
        parts.append(f"and {len(errors) - _MOST_FIELD_ERRORS} more")
    return "Invalid request: " + "; ".join(parts)


def install_error_handlers(app: Starlette) -> None:
    """Answer every failure of ``app`` as a Lance error response."""
    app.add_exception_handler(LanceNamespaceError, _namespace_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(ClientDisconnect, _gone)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)


async def _namespace_error(request: Request, exc: LanceNamespaceError) -> JSONResponse:
    code = int(getattr(exc, "code", ErrorCode.INTERNAL))
    return await answer_error(str(exc), code, request.url.path, getattr(exc, "http_status", None))  # 413: limits


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    if exc.status_code in (404, 405):  # no such operation at this path or with this method
        message = f"No route for {request.method} {request.url.path}"
        answer = await answer_error(message, ErrorCode.UNSUPPORTED, request.url.path, status=exc.status_code)
        if exc.status_code == 405:
            answer.headers["Allow"] = ", ".join(allowed_methods(request))
        return answer
    code = ErrorCode.SERVICE_UNAVAILABLE if exc.status_code == 503 else ErrorCode.INVALID_INPUT
    return await answer_error(str(exc.detail), code, request.url.path, exc.status_code)


def allowed_methods(request: Request) -> list[str]:
    """The methods the app's routes accept at the request's path (RFC 9110's ``Allow``): those of
    every route at the path, where Starlette names only the first one's."""
    methods: set[str] = set()
    for route in getattr(request.app.router, "routes", ()):
        if isinstance(route, Route) and route.methods and route.matches(request.scope)[0] != Match.NONE:
            methods.update(route.methods)
    return sorted(methods)


async def _gone(request: Request, exc: ClientDisconnect) -> Response:
    return Response(status_code=400)  # nobody to answer: the client left, or was cut off (guard.py)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("Unexpected failure in %s %s", request.method, request.url.path)
    return error_response("Internal error", ErrorCode.INTERNAL, request.url.path)


# How long a request the server's graceful stop cut off has to send its answer, and so how long
# the server's shutdown step waits for such answers
CUT_OFF_ANSWERS_SECONDS = 2.0


class EveryFailureAnswered:
    """What no exception handler takes (they take Exception): a BaseException such as a Rust panic
    in pylance (pyo3's PanicException) still answers the spec's error body, unless the answer has
    begun; a panic is the input's doing (InvalidInput), anything else Internal; so does a request
    the server's graceful stop cut off (Internal: its outcome is unknown), before the server's
    shutdown step ends (``_lifespan``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._in_flight = 0  # requests being answered

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
        elif scope["type"] != "http":
            await self.app(scope, receive, send)
        else:
            self._in_flight += 1
            try:
                await self._answered(scope, receive, send)
            finally:
                self._in_flight -= 1

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app's startup and shutdown, as uvicorn runs them. The shutdown step follows the
        graceful stop: it first lets the requests cut off send their answers (for up to
        ``CUT_OFF_ANSWERS_SECONDS``). A forced stop (Ctrl-C twice) skips that step and cancels the
        app's wait for it, which is no failure: Starlette would report it, and uvicorn log it as a
        traceback."""
        forced = False

        async def receiving() -> Message:
            nonlocal forced
            try:
                message = await receive()
            except asyncio.CancelledError:
                forced = True
                raise
            if message["type"] == "lifespan.shutdown":
                deadline = time.monotonic() + CUT_OFF_ANSWERS_SECONDS
                while self._in_flight and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
            return message

        held: list[Message] = []  # a shutdown failure reported after the cancel: sent unless it is the cancel

        async def sending(message: Message) -> None:
            if forced and message["type"] == "lifespan.shutdown.failed":
                held.append(message)
            else:
                await send(message)

        try:
            await self.app(scope, receiving, sending)
        except asyncio.CancelledError:
            if not forced:
                raise
            return
        except BaseException:
            for message in held:  # the app's own cleanup failed
                await send(message)
            raise

    async def _answered(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:
            if started:
                raise
            # uvicorn cancels what outlasts --graceful-timeout, and ends the process at once:
            # whatever the request was doing may or may not have happened
            logger.warning("Cut off by the server's stop (--graceful-timeout): %s", scope.get("path", ""))
            message = "The server stopped before the request finished: whether it took effect is unknown"
            answer = error_response(message, ErrorCode.INTERNAL, scope.get("path", ""))(scope, receive, send)
            # The connection may be gone, or its client not reading: nobody to tell. Then uvicorn
            # closes it, and this task ends however the stop ends (a task left waiting on the
            # client would hold the process at its exit).
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(answer, CUT_OFF_ANSWERS_SECONDS)
        except (KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        except BaseException as exc:
            if started:
                raise
            logger.error("Unexpected failure in %s", scope.get("path", ""), exc_info=exc)
            panic = is_panic(exc)
            message = "pylance could not process the request" if panic else "Internal error"
            code = ErrorCode.INVALID_INPUT if panic else ErrorCode.INTERNAL
            await error_response(message, code, scope.get("path", ""))(scope, receive, send)
