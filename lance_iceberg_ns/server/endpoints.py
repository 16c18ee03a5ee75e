"""One endpoint per route, and the namespace that answers each caller.

Each endpoint takes the bare request: in a worker thread (the data routes' own or the catalog's, see
``capacity``) it reads the path and the query string, reads the identifier as Lance's clients encode
it, parses the body, builds the request (validated once, by the operation's request model) and calls
the caller's namespace. ``/openapi.json`` describes each route from a signature built from the same
model (``documented_endpoint``), so that the documentation and the fields read agree.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Union, get_args, get_origin
from urllib.parse import unquote, unquote_plus

import lance_namespace
import pydantic_core
from fastapi import Body, Path, Query, Request
from fastapi.responses import Response
from lance_namespace import LanceNamespace
from lance_namespace.errors import InvalidInputError, UnauthenticatedError
from pydantic import BaseModel, StrictStr, TypeAdapter, ValidationError

from lance_iceberg_ns.cache import RecentlyUsed
from lance_iceberg_ns.data import request_arrived
from lance_iceberg_ns.data.datasets import OpensADataset, opened_elsewhere
from lance_iceberg_ns.jobs.adoption import answer_after_adopting
from lance_iceberg_ns.limits import check_json_depth, check_request_bounds
from lance_iceberg_ns.operation import as_operated
from lance_iceberg_ns.server.capacity import WorkerThreads
from lance_iceberg_ns.server.guard import bearer_token
from lance_iceberg_ns.server.isolation import Abandonment, Isolated
from lance_iceberg_ns.server.logs import record_audited_ids
from lance_iceberg_ns.server.responses import ARROW_STREAM, render_result, validation_summary
from lance_iceberg_ns.server.routes import Route

DEFAULT_DELIMITER = "$"
# a read's JSON body of at most this size is parsed on the event loop (a query's vector of a few
# thousand floats, its filter: well under a millisecond), and its worker's answer awaited there
READ_ON_LOOP_BYTES = 64 << 10
_BODY_IDENTIFIER = TypeAdapter(list[StrictStr] | None)  # an identifier a JSON body names: strings only

Resolve = Callable[[Request], LanceNamespace]  # the namespace that answers a request's caller


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


def _body_identifier(body_id: Any) -> list[str] | None:
    """The identifier a JSON body names, if any: a list of strings, whichever identifier the
    request then acts on (the path's may win, see ``_identifier``); InvalidInputError otherwise."""
    try:
        return _BODY_IDENTIFIER.validate_python(body_id)
    except ValidationError as exc:
        located = [{**error, "loc": ("id", *error.get("loc", ()))} for error in exc.errors()]
        raise InvalidInputError(validation_summary(located)) from None


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


def _close(namespace: LanceNamespace) -> None:
    getattr(namespace, "close", lambda: None)()


class NamespacesByToken:
    """One bridge namespace per caller bearer token, for forwarding callers' tokens to the
    Iceberg catalog; the least recently used are closed beyond ``capacity``."""

    def __init__(self, properties: Mapping[str, str], capacity: int = 64) -> None:
        self._properties = dict(properties)
        self._namespaces: RecentlyUsed[str, LanceNamespace] = RecentlyUsed(capacity, on_evict=_close)
        self._creating = threading.Lock()  # one namespace per token, however many callers race

    def get(self, token: str) -> LanceNamespace:
        namespace = self._namespaces.get(token)
        if namespace is not None:
            return namespace
        from lance_iceberg_ns import IcebergLanceNamespace

        with self._creating:
            namespace = self._namespaces.get(token)
            if namespace is None:
                namespace = IcebergLanceNamespace(**{**self._properties, "auth_token": token})
                self._namespaces.keep(token, namespace)
        return namespace


def namespace_resolver(
    namespace: LanceNamespace | None, properties: Mapping[str, str] | None, forward_bearer_token: bool
) -> Resolve:
    """How each request finds its namespace: the caller's own (its bearer token forwarded to the
    Iceberg catalog), or the one namespace served to everybody."""
    if forward_bearer_token:
        if properties is None:
            raise ValueError("forward_bearer_token needs the bridge properties")
        by_token = NamespacesByToken(properties)

        def resolve(request: Request) -> LanceNamespace:
            token = bearer_token(request.headers.getlist("authorization"))
            if token is None:
                raise UnauthenticatedError("A bearer token is required: it is forwarded to the Iceberg catalog")
            return by_token.get(token)

        return resolve
    if namespace is None:
        if properties is None:
            raise ValueError("create_app needs a namespace or the bridge properties")
        from lance_iceberg_ns import IcebergLanceNamespace

        namespace = IcebergLanceNamespace(**properties)
    fixed = namespace

    def resolve_fixed(request: Request) -> LanceNamespace:
        return fixed

    return resolve_fixed


def arrow_body_doc() -> dict[str, Any]:
    """What ``/openapi.json`` says of a request body of Arrow IPC stream bytes."""
    return {
        "requestBody": {
            "required": False,
            "content": {ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}}},
        }
    }


def _parameters(route: Route, model: type[BaseModel]) -> list[inspect.Parameter]:
    """The parameters ``/openapi.json`` documents for ``route``: the path, the query string and
    the JSON body (what ``_QueryString`` and ``_build_request`` read)."""
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
    return parameters


def documented_endpoint(route: Route) -> Callable[..., Awaitable[Response]]:
    """What ``/openapi.json`` says of ``route``: its JSON body described by the request model.
    Never called; the endpoint that serves the route reads the body itself (``serving_endpoint``)."""
    model: type[BaseModel] = getattr(lance_namespace, route.model)

    async def documented(**arguments: Any) -> Response:
        raise NotImplementedError(route.operation)

    documented.__signature__ = inspect.Signature(_parameters(route, model))  # type: ignore[attr-defined]
    documented.__name__ = route.operation
    return documented


def serving_endpoint(
    route: Route, resolve: Resolve, threads: WorkerThreads, isolated: Isolated | None = None
) -> Callable[[Request], Awaitable[Response]]:
    """An endpoint for ``route``, served without FastAPI's parameter machinery (the request model
    validates everything once, ``_build_request``). The body is read here; everything else
    (reading the path and the query string, parsing and validating the body, the operation, the
    answer) runs in a worker thread, so that no request's work holds up the event loop and every
    other client; but a read with a small JSON body (``READ_ON_LOOP_BYTES``) that a worker process
    answers is parsed, handed over and awaited on the event loop, holding a data thread's place
    and no thread. A data request finding its queue full is refused before its body is read.
    With ``isolated``, every request that opens a dataset runs in a worker process (``isolation``):
    a data route's, and a catalog route's that asks for what only the dataset knows (parsed on a
    catalog thread, then answered from a data thread). A read's worker is ended if its client goes
    away while it runs (``isolation.Abandonment``)."""
    model: type[BaseModel] = getattr(lance_namespace, route.model)
    query = _QueryString(route, model)

    def parsed(http_request: Request, body: bytes) -> tuple[BaseModel, LanceNamespace, Any]:
        """The request model, the namespace that answers it, and the request as operated (a bare
        name placed): both recorded for the audit line."""
        arguments = query.arguments(http_request)
        if "id" in arguments:  # kept as sent too: the body may name it that way (see _identifier)
            arguments["id_as_sent"] = arguments["id"]
            arguments["id"] = _path_parameter(http_request, route, "id", arguments["id"])
        if "index_name" in arguments:
            arguments["index_name"] = _path_parameter(http_request, route, "index_name", arguments["index_name"])
        if route.json_body:
            arguments["body"] = json_body(body)
        request = _build_request(route, model, arguments)
        record_audited_ids(http_request.scope, request)  # the audit line names what was acted on
        namespace = resolve(http_request)
        operated = as_operated(namespace, route.operation, request)
        record_audited_ids(http_request.scope, operated)  # a bare name placed
        return request, namespace, operated

    def answer(http_request: Request, body: bytes, abandonment: Abandonment | None) -> Response | _DataOfACatalogRoute:
        request, namespace, operated = parsed(http_request, body)
        if isolated is not None and route.opens_data(request):
            if not route.reads_or_writes_data:  # on a catalog thread: to a data thread first
                return _DataOfACatalogRoute(request)
            return isolated_answer(http_request, request, body, abandonment)
        if isolated is None:
            return in_process(namespace, request, operated.id, body)
        try:  # a catalog request that turns out to open a dataset (versions to adopt, say) is a data worker's
            with opened_elsewhere():
                return in_process(namespace, request, operated.id, body)
        except OpensADataset:
            return _DataOfACatalogRoute(request)

    def in_process(namespace: LanceNamespace, request: BaseModel, table_id: list[str], body: bytes) -> Response:
        method = getattr(namespace, route.operation)
        if not getattr(method, "checks_request_bounds", False):  # the bridge's operations check them themselves
            check_request_bounds(request)  # for whichever other namespace is behind the server
        run = lambda: method(request, body) if route.arrow_body else method(request)  # noqa: E731
        # what a writer by location did through this server is seen first
        result = (
            answer_after_adopting(namespace, table_id, run, route.answers_again) if route.names_one_table else run()
        )
        if route.response_field and isinstance(result, BaseModel):
            result = getattr(result, route.response_field)  # the body is one field of the response
        return render_result(result)

    def isolated_answer(
        http_request: Request, request: BaseModel, body: bytes, abandonment: Abandonment | None = None
    ) -> Response:
        assert isolated is not None
        token = bearer_token(http_request.headers.getlist("authorization"))
        return isolated.answer(route, request, body, token, abandonment)

    async def read_on_loop(http_request: Request, body: bytes, abandonment: Abandonment | None) -> Response:
        """A read (``routes.ONLY_READING``) with a small JSON body, parsed and handed to its worker
        process on the event loop, its answer awaited there: no thread taken, none to wake (the
        request's parse is bounded by the body's size, ``READ_ON_LOOP_BYTES``)."""
        assert isolated is not None
        request, _, _ = parsed(http_request, body)
        token = bearer_token(http_request.headers.getlist("authorization"))
        return await isolated.answer_on_loop(route, request, token, abandonment)

    on_loop = isolated is not None and route.only_reads and route.reads_or_writes_data and not route.arrow_body

    async def endpoint(http_request: Request) -> Response:
        client = http_request.client.host if http_request.client else ""
        threads.check_room(route, client=client)
        arrived = request_arrived.set(time.monotonic())  # a read may take the catalog's answers asked since
        try:
            body = await http_request.body() if route.json_body or route.arrow_body else b""
            gone = functools.partial(_disconnected, http_request)
            abandonment = Abandonment() if isolated is not None and route.only_reads else None
            abandon = abandonment.abandon if abandonment is not None else None
            if on_loop and len(body) <= READ_ON_LOOP_BYTES:
                read = threads.run_on_loop(route, read_on_loop, http_request, body, abandonment, client=client,
                                           gone=gone, abandon=abandon)  # fmt: skip
                return await read
            answered = await threads.run(
                route, answer, http_request, body, abandonment, client=client, gone=gone, abandon=abandon
            )
            if isinstance(answered, _DataOfACatalogRoute):  # with isolated, set
                return await threads.run(
                    route, isolated_answer, http_request, answered.request, body, data=True, client=client, gone=gone
                )
            return answered
        finally:  # the app may run in its caller's own task (httpx's ASGI transport): leave no stale moment
            request_arrived.reset(arrived)

    endpoint.__name__ = route.operation
    return endpoint


async def _disconnected(http_request: Request) -> None:
    """Returns once the client has gone away (its body already read, only that is left to hear)."""
    while (await http_request.receive())["type"] != "http.disconnect":
        pass


@dataclass(frozen=True)
class _DataOfACatalogRoute:
    """A request of a catalog route that opens a dataset (``Route.opens_data``, or found to open
    one as it ran: ``datasets.opened_elsewhere``), parsed on a catalog thread, to be answered in a
    data worker from a data thread."""

    request: BaseModel


class _QueryString:
    """A route's path parameters and query string as its request's fields: each query value
    converted to the field's plain type (``limit=10`` an int, ``on=a&on=b`` a list), as
    ``/openapi.json`` documents them (``_parameters``)."""

    def __init__(self, route: Route, model: type[BaseModel]) -> None:
        self._path = [name for name in ("id", "index_name") if f"{{{name}}}" in route.path]
        types = {field: _plain_type(model.model_fields[field].annotation) for field in route.query}
        self._fields = {field: TypeAdapter(plain) for field, plain in types.items()}
        self._lists = {field for field, plain in types.items() if get_origin(plain) is list}

    def arguments(self, http_request: Request) -> dict[str, Any]:
        """InvalidInputError for a value that does not convert (naming the parameter)."""
        arguments: dict[str, Any] = {name: http_request.path_params[name] for name in self._path}
        given = http_request.query_params
        for field in ("delimiter", *self._fields):  # one value, or a list given as one parameter each
            if field not in self._lists and len(given.getlist(field)) > 1:
                raise InvalidInputError(f"The query parameter {field!r} takes one value, and was given more than one")
        arguments["delimiter"] = given.get("delimiter", DEFAULT_DELIMITER)
        for field, adapter in self._fields.items():
            value: Any = given.getlist(field) if field in self._lists else given.get(field)
            if value is None or value == []:
                continue
            try:
                arguments[field] = adapter.validate_python(value)
            except ValidationError as exc:
                located = [{**error, "loc": ("query", field, *error.get("loc", ()))} for error in exc.errors()]
                raise InvalidInputError(validation_summary(located)) from None
        return arguments


def json_body(raw: bytes) -> Any:
    """A request's JSON body (None when empty), read by pydantic's Rust parser, which refuses
    nesting deeper than about 200 levels as it reads, then held to ``MAX_JSON_DEPTH``: no deep
    body reaches a recursion in Python (``json``, pydantic) or in pylance."""
    if not raw or raw.isspace():
        return None
    return _parsed_json(raw, "The request body")


def _parsed_json(raw: bytes | str, what: str) -> Any:
    """JSON a client sent (``what`` names it in the error), nested at most ``MAX_JSON_DEPTH``
    levels deep; InvalidInputError otherwise."""
    try:
        value = pydantic_core.from_json(raw)
    except ValueError as exc:
        if "recursion limit" in str(exc):
            raise InvalidInputError(f"{what} is nested too deeply") from None
        raise InvalidInputError(f"{what} is not valid JSON: {exc}") from None
    return check_json_depth(value, what)


def _build_request(route: Route, model: type[BaseModel], arguments: dict[str, Any]) -> BaseModel:
    """The operation's request: the JSON body, then the query fields and the path's identifier."""
    body = arguments.get("body")
    if route.body_field:  # the body is one field of the request
        data: dict[str, Any] = {route.body_field: body}
    elif body is None:
        data = {}
    elif isinstance(body, dict):
        data = dict(body)
    else:
        raise InvalidInputError("The request body must be a JSON object")
    if "id" in arguments:
        data["id"] = _identifier(arguments, _body_identifier(data.get("id")))
    if "index_name" in arguments:
        data["index_name"] = arguments["index_name"]
    for field in route.query:
        value = arguments.get(field)
        if value is not None and _is_map(model.model_fields[field].annotation):
            value = _parsed_json(value, f"Query parameter {field!r}")
        if value is not None:
            data[field] = value
    try:
        request = model.model_validate(data)
    except ValidationError as exc:
        raise InvalidInputError(validation_summary(exc.errors())) from None
    return request
