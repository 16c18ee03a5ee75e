"""The audit log writes a request's start line before its operation runs, so that a request that
ends the process (an abort inside pylance, say) still leaves a line saying who asked for what."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from lance_namespace import CreateNamespaceResponse, LanceNamespace

from lance_iceberg_ns.server import serve_in_background
from lance_iceberg_ns.server.logs import AUDIT_LOGGER

from ..helpers import server_text_log


class BlockingNamespace(LanceNamespace):
    """A backend whose create_namespace reads the audit log as it stands when the operation
    starts, then waits until the test lets it go."""

    def __init__(self, written: io.StringIO) -> None:
        self.written = written
        self.seen_at_start: str | None = None
        self.running = threading.Event()
        self.go_on = threading.Event()

    def namespace_id(self) -> str:
        return "BlockingNamespace"

    def create_namespace(self, request: Any) -> CreateNamespaceResponse:  # type: ignore[override]
        self.seen_at_start = self.written.getvalue()
        self.running.set()
        if not self.go_on.wait(timeout=30):
            raise RuntimeError("never let go")
        return CreateNamespaceResponse()


@pytest.fixture
def audit_text() -> Iterator[io.StringIO]:
    """The audit logger written as ``serve`` writes it in the text format."""
    with server_text_log(AUDIT_LOGGER) as written:
        yield written


def test_the_start_line_is_written_before_the_operation_runs_and_the_outcome_after(audit_text: io.StringIO) -> None:
    namespace = BlockingNamespace(audit_text)
    with serve_in_background(namespace) as running:
        answered: dict[str, requests.Response] = {}
        asking = threading.Thread(
            target=lambda: answered.setdefault(
                "answer",
                requests.post(
                    f"{running.uri}/v1/namespace/wh$db/create", json={}, headers={"X-Request-ID": "r-1"}, timeout=60
                ),
            )
        )
        asking.start()
        try:
            assert namespace.running.wait(timeout=30)
            while_running = audit_text.getvalue()
        finally:
            namespace.go_on.set()
            asking.join(timeout=60)
    assert answered["answer"].status_code == 200
    assert namespace.seen_at_start is not None
    started = namespace.seen_at_start.splitlines()  # as the operation began
    line = r"\S+ \S+ INFO lance_iceberg_ns\.audit \[r-1\] create_namespace \['wh', 'db'\] by anonymous from [\d.:]+"
    assert len(started) == 1 and re.fullmatch(rf"{line}: started", started[0]), started
    assert while_running.splitlines() == started  # no outcome while the operation runs
    ended = audit_text.getvalue().splitlines()
    assert len(ended) == 2 and ended[0] == started[0], ended
    assert re.fullmatch(rf"{line}: ok in [\d.]+ ms", ended[1]), ended


ABORTING_SERVER = textwrap.dedent(
    """
    import logging.config, os, sys, time
    from lance_namespace import LanceNamespace
    from lance_iceberg_ns.server import serve_in_background
    from lance_iceberg_ns.server.logs import log_config

    class AbortingNamespace(LanceNamespace):
        def namespace_id(self):
            return "AbortingNamespace"

        def create_namespace(self, request):
            os.abort()  # as a native library's panic ends the process: no Python cleanup at all

    running = serve_in_background(AbortingNamespace())
    logging.config.dictConfig(log_config("json"))
    print(running.uri, flush=True)
    time.sleep(120)
    """
)


def test_a_request_that_ends_the_process_leaves_its_start_line() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", ABORTING_SERVER], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        uri = process.stdout.readline().strip()
        assert uri.startswith("http://"), uri
        with pytest.raises(requests.ConnectionError):
            requests.post(f"{uri}/v1/namespace/wh$db/create", json={}, headers={"X-Request-ID": "doomed"}, timeout=60)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode != 0
    audited = [line for line in map(_json_or_none, stderr.splitlines()) if line and line.get("logger") == AUDIT_LOGGER]
    assert len(audited) == 1, stderr
    (start,) = audited
    assert (start["event"], start["operation"], start["table_id"], start["request_id"]) == (
        "start",
        "create_namespace",
        "['wh', 'db']",
        "doomed",
    )
    assert start["principal"] == "anonymous" and start["message"].endswith(": started")


def _json_or_none(line: str) -> dict[str, Any] | None:
    try:
        parsed = json.loads(line)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def test_a_forwarded_address_that_is_no_address_cannot_pass_for_more_of_the_line(audit_text: io.StringIO) -> None:
    """Behind a trusted proxy (loopback here) the client's address is what the proxy forwarded,
    which its own client may have written: anything but an address is shown quoted."""
    namespace = BlockingNamespace(audit_text)
    namespace.go_on.set()
    forged = "10.0.0.7:1: ok in 2.0 ms   (admin session) x"
    with serve_in_background(namespace) as running:
        for sent in (forged, "198.51.100.2"):
            answer = requests.post(
                f"{running.uri}/v1/namespace/wh$db/create", json={}, headers={"X-Forwarded-For": sent}, timeout=60
            )
            assert answer.status_code == 200
    lines = audit_text.getvalue().splitlines()
    assert len(lines) == 4, lines
    assert all(f"by anonymous from {forged[:64]!r}:0: " in line for line in lines[:2]), lines
    assert all("by anonymous from 198.51.100.2:0: " in line for line in lines[2:]), lines
