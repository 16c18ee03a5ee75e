"""``/healthz`` and ``/readyz``: whether the process answers, and whether the catalog behind it does.

Both need no bearer token (an orchestrator's probe carries none) and so say nothing but a status
and, when not ready, one line from a fixed vocabulary: never the catalog's URL (it may hold a
user and password), a property or an exception's text. ``/readyz`` asks the catalog's
``GET /v1/config`` (at most once a second, however many probes come, on a thread of its own: a
probe that comes while the catalog is being asked gets the last answer at once, so a flood of
probes never holds a thread another request needs, nor waits on a slow catalog): ready when it answers
without a server error. A 401 or 403 counts as ready: the catalog answers, and whether a caller's
credentials are good is each request's own answer (the bridge may log in with OAuth2, which a
probe does not). A catalog that does not answer in time, refuses the connection or answers 5xx
is not ready (503).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import anyio.to_thread
import requests
from starlette.types import ASGIApp, Receive, Scope, Send

HEALTH_PATHS = frozenset({"/healthz", "/readyz"})
PROBE_TIMEOUT_SECONDS = 2.0
PROBE_EVERY_SECONDS = 1.0


@dataclass(frozen=True)
class Readiness:
    ready: bool
    reason: str = ""


class CatalogProbe:
    """Asks the catalog's ``/v1/config`` whether it answers; the answer is kept a second."""

    def __init__(self, endpoint: str, auth_token: str | None = None, timeout: float = PROBE_TIMEOUT_SECONDS) -> None:
        self._url = endpoint.rstrip("/") + "/v1/config"
        self._headers = {"Authorization": f"Bearer {auth_token}"} if auth_token else {}
        self._timeout = timeout
        self._lock = threading.Lock()
        self._last: tuple[float, Readiness] | None = None

    def __repr__(self) -> str:
        return "CatalogProbe()"  # the URL and the token stay out of every repr

    def check(self) -> Readiness:
        """The catalog's answer, asked at most once a second (callers that come meanwhile take it)."""
        with self._lock:  # one probe at a time; the others take its answer
            if self._last is not None and time.monotonic() - self._last[0] < PROBE_EVERY_SECONDS:
                return self._last[1]
            readiness = self.ask()
            self._last = (time.monotonic(), readiness)
            return readiness

    def last(self) -> Readiness | None:
        """The last answer while it is fresh, else None (the catalog is due to be asked)."""
        last = self._last
        if last is not None and time.monotonic() - last[0] < PROBE_EVERY_SECONDS:
            return last[1]
        return None

    def latest(self) -> Readiness:
        """The last answer however old, for a caller that must not wait for a new one."""
        last = self._last
        return last[1] if last is not None else Readiness(False, "the Iceberg catalog has not answered yet")

    def ask(self) -> Readiness:
        """Ask the catalog now (``check`` keeps the answer a second)."""
        try:
            answer = requests.get(self._url, headers=self._headers, timeout=self._timeout, allow_redirects=False)
        except requests.Timeout:
            return Readiness(False, f"the Iceberg catalog did not answer /v1/config within {self._timeout:g} s")
        except requests.RequestException as exc:
            return Readiness(False, f"the Iceberg catalog is unreachable ({type(exc).__name__})")
        if answer.status_code >= 500:
            return Readiness(False, f"the Iceberg catalog answered /v1/config with HTTP {answer.status_code}")
        return Readiness(True)


class HealthRoutes:
    """Answers ``GET /healthz`` and ``GET /readyz`` before the guard (no token needed); every other
    request goes on to the app."""

    def __init__(
        self, app: ASGIApp, probe: CatalogProbe | None, workers_ready: Callable[[], bool] | None = None
    ) -> None:
        self.app = app
        self.probe = probe  # None: nothing behind the server to ask (a namespace given in process)
        self.workers_ready = workers_ready  # None: data work runs in this process
        self._asking = False  # a thread is asking the catalog (read and set on the event loop only)
        self._limiter = anyio.CapacityLimiter(1)  # its own: never one of the routes' threads

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path not in HEALTH_PATHS or scope.get("method") not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        if path == "/healthz":
            await _answer(send, 200, {"status": "ok"})
            return
        readiness = Readiness(True) if self.probe is None else await self._readiness(self.probe)
        if readiness.ready and self.workers_ready is not None and not self.workers_ready():
            readiness = Readiness(False, "data workers starting")
        if readiness.ready:
            await _answer(send, 200, {"status": "ready"})
        else:
            await _answer(send, 503, {"status": "not ready", "reason": readiness.reason})

    async def _readiness(self, probe: CatalogProbe) -> Readiness:
        """The fresh answer; else, unless a thread is asking already, ask on the probe's own thread;
        while one asks, every other probe gets the last answer at once."""
        fresh = probe.last()
        if fresh is not None:
            return fresh
        if self._asking:
            return probe.latest()
        self._asking = True
        try:
            return await anyio.to_thread.run_sync(probe.check, limiter=self._limiter)
        finally:
            self._asking = False


async def _answer(send: Send, status: int, body: dict[str, str]) -> None:
    content = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(content)).encode())]
    headers.append((b"cache-control", b"no-store"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})
