"""What the server's observability costs each request: the request ID, the metrics by operation
and, for an operation that changes something, the audit line (``server/observability.py``,
``server/health.py``), around an app that answers at once; the best of ``--repeat`` runs of
``--requests`` requests each, in microseconds per request.

    .venv/bin/python bench/server_observability.py [--requests 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from typing import Any

from lance_iceberg_ns.server.health import HealthRoutes
from lance_iceberg_ns.server.observability import RequestContext

PATHS = {
    "a read (describe_table)": "/v1/table/wh$db$t/describe",
    "an audited write (drop_table)": "/v1/table/wh$db$t/drop",
}


async def answer_at_once(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


async def send(message: Any) -> None:
    pass


def scope(path: str) -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"authorization", b"Bearer token")],
        "client": ("127.0.0.1", 5555),
    }


async def microseconds_per_request(app: Any, path: str, requests: int) -> float:
    started = time.perf_counter()
    for _ in range(requests):
        await app(scope(path), receive, send)
    return (time.perf_counter() - started) / requests * 1e6


async def measure(requests: int, repeat: int) -> None:
    audit = logging.getLogger("lance_iceberg_ns.audit")  # written, to a handler that drops it
    audit.setLevel(logging.INFO)
    audit.addHandler(logging.NullHandler())
    audit.propagate = False
    observed = RequestContext(HealthRoutes(answer_at_once, None), auth_tokens=["token"])
    for label, path in PATHS.items():
        bare = min([await microseconds_per_request(answer_at_once, path, requests) for _ in range(repeat)])
        wrapped = min([await microseconds_per_request(observed, path, requests) for _ in range(repeat)])
        print(f"{label}: {wrapped - bare:.1f} us added per request ({bare:.1f} bare, {wrapped:.1f} observed)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    arguments = parser.parse_args()
    asyncio.run(measure(arguments.requests, arguments.repeat))


if __name__ == "__main__":
    main()
