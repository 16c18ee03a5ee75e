"""What an operator sees of a running server: Prometheus metrics, a request ID on every request and
log line, and two audit lines (``logs.AuditedRequest``) for every operation that changes
something: one before its work, one with its outcome.

``RequestContext`` wraps the whole app (the guard included, so refused requests count too). Each
request is named by its Lance operation (``describe_table``), found from its method and path in
``routes.ROUTES``, never by its raw path: metric labels stay bounded whatever paths clients send
(an unknown path is ``unknown``). Catalog round trips are counted as the bridge reports them
(``lance_iceberg_ns.catalog.round_trips``).

With several worker processes, set ``PROMETHEUS_MULTIPROC_DIR`` (``serve --workers`` does) and
``/metrics`` adds up every worker's counts (prometheus-client's multiprocess mode).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from urllib.parse import parse_qs, unquote_plus

import requests
from lance_namespace.errors import ServiceUnavailableError, UnauthenticatedError
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client import multiprocess as prometheus_multiprocess
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lance_iceberg_ns.cache import RecentlyUsed
from lance_iceberg_ns.catalog import round_trips
from lance_iceberg_ns.server.endpoints import DEFAULT_DELIMITER
from lance_iceberg_ns.server.guard import bearer_token
from lance_iceberg_ns.server.health import PROBE_TIMEOUT_SECONDS
from lance_iceberg_ns.server.logs import AUDITED_REQUEST, AuditedRequest, request_id
from lance_iceberg_ns.server.routes import ROUTES, Route

UNKNOWN_OPERATION = "unknown"
# Served beside the Lance routes; each is its own label.
OWN_PATHS = {"/healthz": "healthz", "/readyz": "readyz", "/metrics": "metrics", "/openapi.json": "openapi"}
# Operations that only read: every other one changes something and is audited (a new route is
# audited unless it is added here).
READ_ONLY_OPERATIONS = frozenset(
    {
        "list_namespaces",
        "describe_namespace",
        "namespace_exists",
        "list_tables",
        "list_all_tables",
        "describe_table",
        "table_exists",
        "count_table_rows",
        "query_table",
        "explain_table_query_plan",
        "analyze_table_query_plan",
        "get_table_stats",
        "list_table_indices",
        "describe_table_index_stats",
        "list_table_versions",
        "describe_table_version",
        "list_table_tags",
        "get_table_tag_version",
        "list_table_branches",
        "describe_transaction",
    }
)
AUDITED_OPERATIONS = frozenset(route.operation for route in ROUTES) - READ_ONLY_OPERATIONS

REQUEST_ID_HEADER = "x-request-id"
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:+/=-]{1,128}")
_LONGEST_ERROR_BODY = 16 * 1024  # read for the error code; error bodies are a few hundred bytes

disable_created_metrics()  # no *_created series beside every counter: they double what is scraped
REQUESTS = Counter(
    "lance_iceberg_ns_requests", "Requests answered, by Lance operation", ["operation"]
)  # exported as lance_iceberg_ns_requests_total
ERRORS = Counter(
    "lance_iceberg_ns_request_errors",
    "Requests answered with an HTTP error status, by operation and status",
    ["operation", "status"],
)
LATENCY = Histogram(
    "lance_iceberg_ns_request_duration_seconds",
    "Time from a request's arrival to the end of its answer, by operation",
    ["operation"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
CATALOG_REQUESTS = Counter(
    "lance_iceberg_ns_catalog_requests",
    "HTTP requests sent to the Iceberg catalog, by method and outcome (2xx..5xx, or failed: no answer)",
    ["method", "outcome"],
)
CATALOG_LATENCY = Histogram(
    "lance_iceberg_ns_catalog_request_duration_seconds",
    "Time an Iceberg catalog request took, retries included",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
METRIC_NAMES = (
    "lance_iceberg_ns_requests_total",
    "lance_iceberg_ns_request_errors_total",
    "lance_iceberg_ns_request_duration_seconds",
    "lance_iceberg_ns_catalog_requests_total",
    "lance_iceberg_ns_catalog_request_duration_seconds",
)
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH"})


def _count_catalog_request(method: str, status: int | None, seconds: float) -> None:
    outcome = "failed" if status is None else f"{min(max(status // 100, 1), 5)}xx"
    CATALOG_REQUESTS.labels(method if method in _METHODS else "other", outcome).inc()
    CATALOG_LATENCY.observe(seconds)


round_trips.observe(_count_catalog_request)


def _pattern(route: Route) -> re.Pattern[str]:
    pattern = re.escape(route.path)
    for parameter in ("id", "index_name"):
        pattern = pattern.replace(re.escape(f"{{{parameter}}}"), f"(?P<{parameter}>[^/]+)")
    return re.compile(f"^{pattern}$")


_ROUTE_PATTERNS = tuple((route, _pattern(route)) for route in ROUTES)


def route_of(method: str, path: str) -> tuple[str, re.Match[str] | None]:
    """The Lance operation a request asks for (``unknown`` for no route), and its path match."""
    if path in OWN_PATHS:
        return OWN_PATHS[path], None
    for route, pattern in _ROUTE_PATTERNS:
        if route.method == method and (match := pattern.match(path)):
            return route.operation, match
    return UNKNOWN_OPERATION, None


def _path_ids(scope: Scope, match: re.Match[str] | None) -> list[str] | None:
    """The identifier a request's path names, for the audit lines of a request refused before its
    endpoint parsed it (``record_audited_ids`` names what was acted on otherwise)."""
    if match is None or "id" not in match.groupdict():
        return None
    return _path_id(match, scope.get("query_string", b""), scope.get("raw_path"))


def _path_id(match: re.Match[str], query_string: bytes, raw_path: bytes | None) -> list[str]:
    segment = match["id"]
    if raw_path:  # the segment as sent, decoded as the endpoints decode it (a '+' is a space)
        raw_segments = raw_path.decode("latin-1").split("?", 1)[0].split("/")
        from_end = match.string[match.end("id") :].count("/")
        if from_end < len(raw_segments):
            segment = unquote_plus(raw_segments[-1 - from_end], errors="replace")
    given = parse_qs(query_string.decode("latin-1")).get("delimiter", [DEFAULT_DELIMITER])
    delimiter = given[-1] or DEFAULT_DELIMITER  # the last, as FastAPI reads a repeated parameter
    return [] if segment == delimiter else segment.split(delimiter)


class RequestContext:
    """The outermost middleware: a request ID (the caller's ``X-Request-ID`` when it is short and
    plain, else a new one) for the request's log lines and its answer's header; the request's
    count, error count and duration by operation; and, for operations that change something, its
    audit lines (``AuditedRequest``): who (the token's position among the configured ones, never
    the token; else ``anonymous``), from where, what, and how it ended."""

    def __init__(self, app: ASGIApp, auth_tokens: Sequence[str] = (), forward_bearer_token: bool = False) -> None:
        self.app = app
        self.auth_tokens = [token.encode() for token in auth_tokens]
        self.forward_bearer_token = forward_bearer_token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = scope.get("headers", [])
        incoming = next((value for key, value in headers if key.lower() == REQUEST_ID_HEADER.encode()), b"")
        given = incoming.decode("latin-1")
        the_id = given if _SANE_REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        context = request_id.set(the_id)
        operation, match = route_of(scope.get("method", ""), scope.get("path", ""))
        audited = None
        if operation in AUDITED_OPERATIONS:  # its start line comes once its endpoint has read what it names
            audited = AuditedRequest(operation, self._principal(scope), _client(scope), _path_ids(scope, match))
            scope[AUDITED_REQUEST] = audited
        answer = {"status": 500}
        error_body = bytearray()

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", the_id.encode())]}
            elif message["type"] == "http.response.body" and answer["status"] >= 400 and not error_body:
                error_body.extend(message.get("body", b"")[:_LONGEST_ERROR_BODY])  # the error's one body
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            status = answer["status"]
            REQUESTS.labels(operation).inc()
            if status >= 400:
                ERRORS.labels(operation, str(status)).inc()
            took = time.perf_counter() - started
            LATENCY.labels(operation).observe(took)
            if audited is not None:
                audited.ended(status, _error_code(bytes(error_body)) if status >= 400 else None, took)
            request_id.reset(context)

    def _principal(self, scope: Scope) -> str:
        authorizations = [value.decode("latin-1") for key, value in scope["headers"] if key.lower() == b"authorization"]
        try:
            token = bearer_token(authorizations)
        except Exception:  # ambiguous headers: the guard refused the request
            return "anonymous"
        if token is None:
            return "anonymous"
        presented = token.encode()
        for position, allowed in enumerate(self.auth_tokens, start=1):
            if hmac.compare_digest(presented, allowed):
                return f"token#{position}"
        if self.forward_bearer_token:
            return "forwarded-token"
        return "unauthenticated" if self.auth_tokens else "anonymous"  # an open server: a token means nothing


def _client(scope: Scope) -> str:
    """The client's address and port as log lines show them. Behind a trusted proxy the address is
    what the proxy forwarded (``X-Forwarded-For``), which a client of the proxy may have written:
    anything but an IP address is shown escaped, quoted and cut short, so that it cannot pass for
    more of the line."""
    client = scope.get("client")
    if not client:
        return "-"
    host = str(client[0])
    try:
        ipaddress.ip_address(host)
    except ValueError:
        host = repr(host[:64])
    return f"{host}:{client[1]}"


def _error_code(body: bytes) -> int | None:
    try:
        code = json.loads(body).get("code")
    except (ValueError, AttributeError):
        return None
    return code if isinstance(code, int) else None


def metrics_endpoint(request: Request) -> Response:
    """``GET /metrics``: Prometheus' text format, every worker's counts added up in multiprocess
    mode."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        prometheus_multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)


# How long the catalog's verdict on a bearer token is trusted for /metrics, for how many tokens,
# and how many tokens unknown to that memory may be checked with the catalog: a burst, then one a
# second (a flood of made-up tokens costs the catalog at most that, however many there are).
TOKEN_VERDICT_SECONDS = 30.0
TOKEN_VERDICTS_KEPT = 1024
TOKEN_CHECK_BURST = 10
TOKEN_CHECKS_PER_SECOND = 1.0


class CatalogTokenChecks:
    """Whether the Iceberg catalog accepts a bearer token (its ``/v1/config`` answers neither
    401 nor 403), asked at most once per token per ``TOKEN_VERDICT_SECONDS``, and for tokens it
    was not asked about lately at most ``TOKEN_CHECK_BURST`` at once and ``TOKEN_CHECKS_PER_SECOND``
    after that; beyond that a check is refused (ServiceUnavailableError) without asking. Tokens
    are remembered by their SHA-256, never as given."""

    def __init__(self, catalog_endpoint: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._url = catalog_endpoint.rstrip("/") + "/v1/config"
        self._verdicts: RecentlyUsed[bytes, bool] = RecentlyUsed(
            TOKEN_VERDICTS_KEPT, ttl_seconds=TOKEN_VERDICT_SECONDS, clock=clock
        )
        self._clock = clock
        self._lock = threading.Lock()
        self._budget = float(TOKEN_CHECK_BURST)
        self._budget_at = clock()

    def check(self, token: str) -> None:
        """Raises UnauthenticatedError when the catalog refuses ``token``, ServiceUnavailableError
        when it cannot be asked (no answer, or too many checks just now)."""
        key = hashlib.sha256(token.encode()).digest()
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._ask(token, key)
        if not verdict:
            raise UnauthenticatedError("The Iceberg catalog does not accept this bearer token")

    def _ask(self, token: str, key: bytes) -> bool:
        if not self._spend():
            raise ServiceUnavailableError("Too many bearer tokens to check with the Iceberg catalog: try again shortly")
        try:
            answer = requests.get(
                self._url,
                headers={"Authorization": f"Bearer {token}"},
                timeout=PROBE_TIMEOUT_SECONDS,
                allow_redirects=False,
            )
        except requests.RequestException:
            raise ServiceUnavailableError(
                "The Iceberg catalog did not answer: the bearer token cannot be checked"
            ) from None
        accepted = answer.status_code not in (401, 403)
        if answer.status_code < 300 or not accepted:  # a verdict, not a catalog in trouble
            self._verdicts.keep(key, accepted)
        return accepted

    def _spend(self) -> bool:
        """Take one check from the budget, refilled at ``TOKEN_CHECKS_PER_SECOND`` up to the burst."""
        with self._lock:
            now = self._clock()
            refill = (now - self._budget_at) * TOKEN_CHECKS_PER_SECOND
            self._budget = min(float(TOKEN_CHECK_BURST), self._budget + refill)
            self._budget_at = now
            if self._budget < 1:
                return False
            self._budget -= 1
            return True


def forwarded_token_metrics_endpoint(catalog_endpoint: str) -> Callable[[Request], Response]:
    """``GET /metrics`` for a server that forwards each caller's bearer token to the catalog and
    has no token of its own: like every Lance route, it needs a bearer token, one the catalog
    accepts (``CatalogTokenChecks``)."""
    checks = CatalogTokenChecks(catalog_endpoint)

    def metrics_for_a_catalog_token(request: Request) -> Response:
        token = bearer_token(request.headers.getlist("authorization"))
        if token is None:
            raise UnauthenticatedError("A bearer token is required: it is checked with the Iceberg catalog")
        checks.check(token)
        return metrics_endpoint(request)

    return metrics_for_a_catalog_token
