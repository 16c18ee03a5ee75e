"""The ASGI application: any ``LanceNamespace`` over the Lance REST Namespace API.

Only the wiring lives here, so that what a server serves and how it is guarded are decided in one
place: one endpoint per entry of ``routes.ROUTES`` (``endpoints``), the spec's error body for
every failure (``responses``), the credentials and body caps checked first (``guard``), and
around them the health checks (``health``), metrics, request IDs and audit log (``observability``).

The app is a bare Starlette app: every endpoint reads its own request, so FastAPI's request
machinery and the layers it adds around every call (its body limit, telemetry and exit stack)
would only cost time on each query. FastAPI still writes ``/openapi.json``, from routes that
document each operation's request model (``endpoints.documented_endpoint``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fastapi import APIRouter
from fastapi.openapi.utils import get_openapi
from lance_namespace import LanceNamespace
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from lance_iceberg_ns.server.capacity import WorkerThreads, default_worker_memory_mb
from lance_iceberg_ns.server.endpoints import arrow_body_doc, documented_endpoint, namespace_resolver, serving_endpoint
from lance_iceberg_ns.server.guard import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_DATA_BODY_BYTES,
    DEFAULT_MAX_HELD_BYTES,
    GuardMiddleware,
)
from lance_iceberg_ns.server.health import CatalogProbe, HealthRoutes
from lance_iceberg_ns.server.isolation import Isolated, Recipe
from lance_iceberg_ns.server.logs import forget_secrets_in_logs
from lance_iceberg_ns.server.observability import RequestContext, forwarded_token_metrics_endpoint, metrics_endpoint
from lance_iceberg_ns.server.responses import EveryFailureAnswered, install_error_handlers
from lance_iceberg_ns.server.routes import ROUTES
from lance_iceberg_ns.server.settings import (
    DEFAULT_DATA_REQUEST_SECONDS,
    DEFAULT_DATA_THREADS,
)

TITLE = "Lance REST Namespace"
DESCRIPTION = "Lance tables, stored in an Iceberg REST catalog"


def create_app(
    namespace: LanceNamespace | None = None,
    *,
    properties: Mapping[str, str] | None = None,
    auth_tokens: Sequence[str] = (),
    forward_bearer_token: bool = False,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_data_body_bytes: int = DEFAULT_MAX_DATA_BODY_BYTES,
    max_held_bytes: int = DEFAULT_MAX_HELD_BYTES,
    share_static_credentials: bool = False,
    data_threads: int = DEFAULT_DATA_THREADS,
    data_isolation: bool = True,
    data_worker_memory_mb: int | None = None,
    data_request_timeout: float = DEFAULT_DATA_REQUEST_SECONDS,
    server_processes: int = 1,
) -> Starlette:
    """The Lance REST Namespace API over ``namespace``, or over an ``IcebergLanceNamespace`` made
    from ``properties``.

    ``auth_tokens``: bearer tokens the server requires (none: open). ``forward_bearer_token``: use
    each caller's bearer token as the Iceberg catalog token (needs ``properties``).
    ``max_body_bytes`` caps JSON bodies, ``max_data_body_bytes`` the Arrow IPC bodies of the data
    routes (413 beyond either, checked as the body streams in). ``max_held_bytes``: the request and
    answer bodies the server holds at once (at least one largest body); a request beyond it is 503.
    ``share_static_credentials``: also answer clients with the secret ``storage.*`` options the
    bridge is configured with; by default they get the catalog's vended credentials, or none.
    ``data_threads``: how many requests that read or write data run at once (beyond it they wait;
    503 when four times as many wait); catalog requests have threads of their own (``capacity``).
    ``data_isolation``: run each data request in a worker process of its own at the time, with a
    memory ceiling of ``data_worker_memory_mb`` MiB, ended after ``data_request_timeout`` seconds
    (``isolation``); a namespace other than the
    bridge itself, which a worker cannot rebuild, is served in process. ``server_processes``: how
    many processes serve this app side by side (``serve --workers``); when no ceiling is given, the
    default is shared among all their data threads.

    Besides the Lance routes: ``/healthz`` and ``/readyz`` (no token needed, ``health``) and
    ``/metrics`` (Prometheus, behind the token like every route, ``observability``; with
    ``forward_bearer_token`` and no ``auth_tokens``, a bearer token the catalog accepts).
    """
    namespace, properties = _for_clients(namespace, properties, share_static_credentials)
    resolve = namespace_resolver(namespace, properties, forward_bearer_token)
    probe = _catalog_probe(namespace, properties, forward_bearer_token)
    forget_secrets_in_logs(auth_tokens)
    threads = WorkerThreads(data_threads)
    recipe = Recipe.of(namespace, properties, forward_bearer_token) if data_isolation else None
    memory_mb = (
        data_worker_memory_mb
        if data_worker_memory_mb is not None
        else default_worker_memory_mb(data_threads, server_processes)
    )
    isolated = Isolated(recipe, memory_mb, data_threads, data_request_timeout) if recipe is not None else None
    app = Starlette()
    app.router.redirect_slashes = False  # a redirect would be built from the client's Host header
    documented = APIRouter()
    for route in ROUTES:
        app.router.routes.append(_served(route.path, serving_endpoint(route, resolve, threads, isolated), route.method))
        documented.add_api_route(
            route.path,
            documented_endpoint(route),
            methods=[route.method],
            name=route.operation,
            operation_id=route.operation,
            responses={400: {"description": "Invalid input"}, 404: {"description": "Not found"}},
            openapi_extra=arrow_body_doc() if route.arrow_body else None,
        )
    metrics: Callable[[Request], Response] = metrics_endpoint
    if forward_bearer_token and not auth_tokens and properties is not None:  # no token of its own to ask for
        metrics = forwarded_token_metrics_endpoint(str(properties["endpoint"]))
    app.router.routes.append(_served("/metrics", metrics, "GET"))
    app.router.routes.append(Route("/openapi.json", _openapi_endpoint(documented), include_in_schema=False))
    install_error_handlers(app)
    app.add_middleware(
        GuardMiddleware,
        auth_tokens=list(auth_tokens),
        max_body_bytes=max_body_bytes,
        max_data_body_bytes=max_data_body_bytes,
        max_held_bytes=max_held_bytes,
    )
    workers_ready = isolated.workers.any_ready if isolated is not None else None
    app.add_middleware(HealthRoutes, probe=probe, workers_ready=workers_ready)  # outside the guard: no token
    app.add_middleware(EveryFailureAnswered)  # probes too; inside the request's context (its ID in the log)
    app.add_middleware(RequestContext, auth_tokens=list(auth_tokens), forward_bearer_token=forward_bearer_token)
    app.add_middleware(WithoutTrailingSlashes)
    return app


class WithoutTrailingSlashes:
    """A path with trailing slashes is served as the path without them, as the reference server
    does (``/v1/table/t/describe/`` is ``describe``). Never redirected: Starlette would build
    the new URL from the client's own ``Host`` header, which makes a redirect anywhere."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if len(path) > 1 and path.endswith("/") and scope["type"] == "http":
            raw_path = scope.get("raw_path")
            scope = {**scope, "path": path.rstrip("/") or "/"}
            if raw_path:
                scope["raw_path"] = raw_path.rstrip(b"/") or b"/"
        await self.app(scope, receive, send)


def _served(path: str, endpoint: Callable[[Request], Any], method: str) -> Route:
    served = Route(path, endpoint, methods=[method], include_in_schema=False)
    served.methods = {method}  # Starlette would answer HEAD beside GET; each route answers one method
    return served


def _openapi_endpoint(documented: APIRouter) -> Callable[[Request], Response]:
    """``/openapi.json`` (GET and HEAD): every route with its request model, from the documenting
    routes (the served ones read their bodies themselves); written once, on first request. Behind
    a proxy that mounts the app under a path (``root_path``), the document names that path as its
    server, as FastAPI's own would."""
    document: list[dict[str, Any]] = []

    def openapi(request: Request) -> Response:
        if not document:
            written = get_openapi(title=TITLE, version="1.0.0", description=DESCRIPTION, routes=documented.routes)
            document.append(written)
        root_path = request.scope.get("root_path", "").rstrip("/")
        return JSONResponse({**document[0], "servers": [{"url": root_path}]} if root_path else document[0])

    return openapi


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


def _catalog_probe(
    namespace: LanceNamespace | None, properties: Mapping[str, str] | None, forward_bearer_token: bool
) -> CatalogProbe | None:
    """What ``/readyz`` asks: the bridge's catalog (None for another namespace: nothing to ask).
    The bridge's secrets are registered for redaction from the server's log lines on the way."""
    from lance_iceberg_ns import IcebergLanceNamespace
    from lance_iceberg_ns.config.settings import Settings

    if properties is not None:
        settings = Settings.from_properties(properties)
    elif isinstance(namespace, IcebergLanceNamespace):
        settings = namespace.settings
    else:
        return None
    forget_secrets_in_logs(settings.secrets())
    return CatalogProbe(settings.endpoint, None if forward_bearer_token else settings.auth_token)
