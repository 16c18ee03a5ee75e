"""The ASGI application: any ``LanceNamespace`` over the Lance REST Namespace API.

Each route of ``routes.ROUTES`` becomes one FastAPI endpoint whose signature is built from the
operation's request model, so FastAPI validates the input and ``/openapi.json`` describes it.
Every failure leaves as the spec's error body ``{"error", "code", "detail", "instance"}`` with the
status of the spec's code-to-HTTP table: namespace errors, malformed or ill-typed input, unknown
routes, oversized bodies, missing or ambiguous credentials and anything unexpected alike. Every
body is built by ``error_body``: its message without build paths or internal class names
(``errors.public_message``), its detail the Lance error type of its code.
"""

from __future__ import annotations

import hmac
import inspect
import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Union, get_args, get_origin
from urllib.parse import unquote, unquote_plus

import lance_namespace
from fastapi import Body, FastAPI, Path, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from lance_namespace import LanceNamespace, QueryTableResponse
from lance_namespace.errors import (
    ErrorCode,
    InvalidInputError,
    LanceNamespaceError,
    UnauthenticatedError,
    from_error_code,
)
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lance_iceberg_ns.data.ipc import QueryAnswer
from lance_iceberg_ns.errors import http_status_for, public_message
from lance_iceberg_ns.limits import check_request_bounds
from lance_iceberg_ns.server.routes import ROUTES, Route

logger = logging.getLogger(__name__)

DEFAULT_DELIMITER = "$"
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_DATA_BODY_BYTES = 256 * 1024 * 1024  # Arrow IPC bodies of the data routes (create, insert, merge)
ARROW_STREAM = "application/vnd.apache.arrow.stream"
# The routes whose bodies are Arrow IPC data, as one pattern over request paths.
_DATA_ROUTES = re.compile(
    "|".join(f"^{re.escape(route.path).replace(re.escape('{id}'), '[^/]+')}$" for route in ROUTES if route.arrow_body)
)
ARROW_FILE = "application/vnd.apache.arrow.file"
_OPEN_PATHS = frozenset({"/openapi.json"})  # served without credentials: it holds no data


def error_body(message: str, code: int, instance: str) -> dict[str, Any]:
    """The spec's error body, the one shape of every error answer: the message as a remote caller
    may see it, the code, the Lance error type of the code (``TableNotFoundError``) as detail."""
    detail = type(from_error_code(int(code), "")).__name__
    return {"error": public_message(message), "code": int(code), "detail": detail, "instance": instance}


def error_response(message: str, code: int, instance: str, status: int | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, code, instance), status_code=status or http_status_for(code))


def parse_path_id(raw: str, delimiter: str) -> list[str]:
    """``a$b$c`` → ``["a", "b", "c"]``; the delimiter alone is the root namespace ``[]``."""
    if not delimiter:
        raise InvalidInputError("The delimiter must not be empty")
    if raw == delimiter:
        return []
    return raw.split(delimiter)


def _path_parameter(http_request: Request, route: Route, name: str, decoded: str) -> str:
    """The path parameter ``name`` (``id``, ``index_name``), form-decoded as Lance's clients
    encode it: the generated Rust clients (pylance's ``RestNamespace``, lancedb) send a space as
    ``+``, and every generated client escapes a ``+`` in a name as ``%2B``. The path Starlette
    decoded cannot tell those two apart, so the segment is read from the raw path (when the
    server gives one)."""
    raw_path = http_request.scope.get("raw_path")
    if not raw_path:
        return decoded
    from_end = route.path.split("/")[::-1].index(f"{{{name}}}")
    segments = raw_path.decode("latin-1").split("/")
    segment = segments[-1 - from_end] if from_end < len(segments) else ""
    if unquote(segment) != decoded:  # not the segment routed on (an escaped "/" moved them)
        return decoded
    try:
        return unquote_plus(segment, errors="strict")
    except UnicodeDecodeError:
        raise InvalidInputError(f"The {name} in the path is not UTF-8") from None


def _identifier(arguments: dict[str, Any], body_id: Any) -> list[str]:
    """The request's identifier: the path's, form-decoded as Lance's clients encode it. The path
    read with ``+`` as a plus sign (RFC 3986, as curl sends it) is taken instead when the body
    names exactly that identifier, or when the delimiter itself has a ``+``. Otherwise the path
    wins over the body (DuckDB's Lance extension puts only the table's name there)."""
    delimiter = arguments["delimiter"]
    as_sent = parse_path_id(arguments.get("id_as_sent", arguments["id"]), delimiter)
    if body_id == as_sent or "+" in delimiter:
        return as_sent
    return parse_path_id(arguments["id"], delimiter)


def _unwrap(annotation: Any) -> Any:
    """``Optional[Annotated[int, Strict]]`` → ``int``."""
    while True:
        origin = get_origin(annotation)
        if origin is Union:
            annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
        elif origin is not None and hasattr(annotation, "__metadata__"):  # Annotated[...]
            annotation = get_args(annotation)[0]
        else:
            return annotation


def _is_map(annotation: Any) -> bool:
    return get_origin(_unwrap(annotation)) is dict


def _plain_type(annotation: Any) -> Any:
    """The type a query-string value converts to, from a request model's field annotation;
    maps travel as JSON text."""
    inner = _unwrap(annotation)
    if get_origin(inner) is list:
        return list[_plain_type(get_args(inner)[0])]  # type: ignore[misc]
    if _is_map(inner):
        return str
    return inner


class NamespacesByToken:
    """One bridge namespace per caller bearer token, for forwarding callers' tokens to the
    Iceberg catalog; the least recently used are closed beyond ``capacity``."""

    def __init__(self, properties: Mapping[str, str], capacity: int = 64) -> None:
        self._properties = dict(properties)
        self._capacity = capacity
        self._namespaces: OrderedDict[str, LanceNamespace] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, token: str) -> LanceNamespace:
        from lance_iceberg_ns import IcebergLanceNamespace

        with self._lock:
            namespace = self._namespaces.pop(token, None)
            if namespace is None:
                namespace = IcebergLanceNamespace(**{**self._properties, "auth_token": token})
            self._namespaces[token] = namespace
            evicted = []
            while len(self._namespaces) > self._capacity:
                evicted.append(self._namespaces.popitem(last=False)[1])
        for old in evicted:
            getattr(old, "close", lambda: None)()
        return namespace


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


def create_app(
    namespace: LanceNamespace | None = None,
    *,
    properties: Mapping[str, str] | None = None,
    auth_tokens: Sequence[str] = (),
    forward_bearer_token: bool = False,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_data_body_bytes: int = DEFAULT_MAX_DATA_BODY_BYTES,
    share_static_credentials: bool = False,
) -> FastAPI:
    """The Lance REST Namespace API over ``namespace``, or over an ``IcebergLanceNamespace`` made
    from ``properties``.

    ``auth_tokens``: bearer tokens the server requires (none: open). ``forward_bearer_token``: use
    each caller's bearer token as the Iceberg catalog token (needs ``properties``).
    ``max_body_bytes`` caps JSON bodies, ``max_data_body_bytes`` the Arrow IPC bodies of the data
    routes (413 beyond either, checked as the body streams in).
    ``share_static_credentials``: also answer clients with the secret ``storage.*`` options the
    bridge is configured with; by default they get the catalog's vended credentials, or none.
    """
    namespace, properties = _for_clients(namespace, properties, share_static_credentials)
    if forward_bearer_token:
        if properties is None:
            raise ValueError("forward_bearer_token needs the bridge properties")
        by_token = NamespacesByToken(properties)

        def resolve(request: Request) -> LanceNamespace:
            token = bearer_token(request.headers.getlist("authorization"))
            if token is None:
                raise UnauthenticatedError("A bearer token is required: it is forwarded to the Iceberg catalog")
            return by_token.get(token)

    else:
        if namespace is None:
            if properties is None:
                raise ValueError("create_app needs a namespace or the bridge properties")
            from lance_iceberg_ns import IcebergLanceNamespace

            namespace = IcebergLanceNamespace(**properties)
        fixed = namespace

        def resolve(request: Request) -> LanceNamespace:
            return fixed

    app = FastAPI(
        title="Lance REST Namespace",
        description="Lance tables, stored in an Iceberg REST catalog",
        version="1.0.0",
        docs_url=None,
        redoc_url=None,
    )
    for route in ROUTES:
        app.add_api_route(
            route.path,
            _endpoint(route, resolve),
            methods=[route.method],
            name=route.operation,
            operation_id=route.operation,
            responses={400: {"description": "Invalid input"}, 404: {"description": "Not found"}},
            openapi_extra=_arrow_body_doc() if route.arrow_body else None,
        )
    _install_error_handlers(app)
    app.add_middleware(
        GuardMiddleware,
        auth_tokens=list(auth_tokens),
        max_body_bytes=max_body_bytes,
        max_data_body_bytes=max_data_body_bytes,
    )
    return app


def _for_clients(
    namespace: LanceNamespace | None, properties: Mapping[str, str] | None, share_static_credentials: bool
) -> tuple[LanceNamespace | None, Mapping[str, str] | None]:
    """The bridge (or its properties) as it answers remote clients: sharing the static storage
    credentials only when the operator said so."""
    from lance_iceberg_ns import IcebergLanceNamespace

    share = {"share_static_credentials": "true" if share_static_credentials else "false"}
    if properties is not None:
        properties = {**properties, **share}
    if isinstance(namespace, IcebergLanceNamespace) and namespace.settings.share_static_credentials != (
        share_static_credentials
    ):
        namespace = IcebergLanceNamespace(**{**namespace.properties, **share})
    return namespace, properties


def _arrow_body_doc() -> dict[str, Any]:
    return {
        "requestBody": {
            "required": False,
            "content": {ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}}},
        }
    }


def _endpoint(route: Route, resolve: Callable[[Request], LanceNamespace]) -> Callable[..., Awaitable[Response]]:
    """An endpoint for ``route`` with a signature FastAPI can read (and document)."""
    model: type[BaseModel] = getattr(lance_namespace, route.model)
    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [inspect.Parameter("http_request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Request)]
    if "{id}" in route.path:
        identifier = Path(
            description="The identifier, its parts joined by the delimiter; the delimiter alone is the root"
        )
        parameters.append(inspect.Parameter("id", keyword, annotation=str, default=identifier))
    if "{index_name}" in route.path:
        parameters.append(inspect.Parameter("index_name", keyword, annotation=str, default=Path()))
    parameters.append(inspect.Parameter("delimiter", keyword, annotation=str, default=Query(DEFAULT_DELIMITER)))
    for field in route.query:
        query_type = _plain_type(model.model_fields[field].annotation)
        parameters.append(inspect.Parameter(field, keyword, annotation=query_type | None, default=Query(None)))
    if route.json_body:
        body_type: Any = model.model_fields[route.body_field].annotation if route.body_field else model
        parameters.append(inspect.Parameter("body", keyword, annotation=Union[body_type, None], default=Body(None)))  # noqa: UP007

    async def endpoint(http_request: Request, **arguments: Any) -> Response:
        if "id" in arguments:  # kept as sent too: the body may name it that way (see _identifier)
            arguments["id_as_sent"] = arguments["id"]
            arguments["id"] = _path_parameter(http_request, route, "id", arguments["id"])
        if "index_name" in arguments:
            arguments["index_name"] = _path_parameter(http_request, route, "index_name", arguments["index_name"])
        request = _build_request(route, model, arguments)
        namespace = resolve(http_request)
        method = getattr(namespace, route.operation)
        if route.arrow_body:
            data = await http_request.body()
            result = await run_in_threadpool(method, request, data)
        else:
            result = await run_in_threadpool(method, request)
        if route.response_field and isinstance(result, BaseModel):
            result = getattr(result, route.response_field)  # the body is one field of the response
        return _render(result)

    endpoint.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    endpoint.__name__ = route.operation
    return endpoint


def _build_request(route: Route, model: type[BaseModel], arguments: dict[str, Any]) -> BaseModel:
    """The operation's request: the JSON body, then the query fields and the path's identifier."""
    body = arguments.get("body")
    if route.body_field:  # the body is one field of the request
        data: dict[str, Any] = {route.body_field: body}
    elif isinstance(body, BaseModel):
        data = body.model_dump(by_alias=True, exclude_none=True)
    else:
        data = {}
    if "id" in arguments:
        data["id"] = _identifier(arguments, data.get("id"))
    if "index_name" in arguments:
        data["index_name"] = arguments["index_name"]
    for field in route.query:
        value = arguments.get(field)
        if value is not None and _is_map(model.model_fields[field].annotation):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise InvalidInputError(f"Query parameter {field!r} must be a JSON object") from exc
        if value is not None:
            data[field] = value
    try:
        request = model.model_validate(data)
    except ValidationError as exc:
        raise InvalidInputError(_validation_summary(exc.errors())) from None
    check_request_bounds(request)  # for whichever namespace is behind the server
    return request


def _render(result: Any) -> Response:
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


def _validation_summary(errors: Sequence[Any]) -> str:
    """What was wrong with the input, field by field, without echoing the values."""
    parts = []
    for error in errors:
        location = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        parts.append(f"{location or 'body'}: {error.get('msg', 'invalid')}")
    return "Invalid request: " + "; ".join(parts)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(LanceNamespaceError)
    async def namespace_error(request: Request, exc: LanceNamespaceError) -> JSONResponse:
        code = int(getattr(exc, "code", ErrorCode.INTERNAL))
        return error_response(str(exc), code, request.url.path)

    @app.exception_handler(RequestValidationError)
    async def invalid_input(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(_validation_summary(exc.errors()), ErrorCode.INVALID_INPUT, request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code in (404, 405):  # no such operation at this path or with this method
            message = f"No route for {request.method} {request.url.path}"
            return error_response(message, ErrorCode.UNSUPPORTED, request.url.path, status=exc.status_code)
        return error_response(str(exc.detail), ErrorCode.INVALID_INPUT, request.url.path, exc.status_code)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("Unexpected failure in %s %s", request.method, request.url.path)
        return error_response("Internal error", ErrorCode.INTERNAL, request.url.path)
