"""Attacks on the REST server: input built to be slow, requests sent slowly or never finished,
secrets in its configuration, and the catalog's own paths. The server must keep answering
everyone else, refuse with a 4xx, and show no secret and no internal path.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
import requests

from lance_iceberg_ns.errors import public_message

from .helpers import ipc
from .liveness import ServedProcess, answered_while, served_in_subprocess

# Strings that made the old message cleaning backtrack: each is repeated to about 200 KB.
ADVERSARIAL_UNITS = ["a-", "/a", "a.", "a.B", " ", "\t ", 'File "', "at ", ", ", "a:", "<a", "aError.", "E(", "a.rs:1"]


@pytest.mark.timeout(60)  # each took hours before; linear cleaning takes milliseconds
@pytest.mark.parametrize("unit", ADVERSARIAL_UNITS)
def test_public_message_cleans_adversarial_input_and_cuts_it_short(unit: str) -> None:
    echoed = "x/" + unit * (200_000 // len(unit))
    message = public_message(f"A table location must be an absolute path, not '{echoed}'")
    assert message.startswith("A table location must be")
    assert len(message) <= 2048


def test_public_message_cuts_long_words_and_keeps_short_ones() -> None:
    location = "s3://bucket/" + "a" * 5000
    message = public_message(f"No Lance dataset at {location} (table wh.db.t)")
    assert message.startswith("No Lance dataset at s3://bucket/aaa") and message.endswith("aaa (table wh.db.t)")
    assert "…" in message and len(message) < 400
    assert public_message("No Lance dataset at /data/lake/wh/db/t") == "No Lance dataset at /data/lake/wh/db/t"


def test_public_message_still_drops_internals() -> None:
    java = (
        "load wh.db.t: org.apache.iceberg.exceptions.NoSuchTableException: Table does not exist: db.t"
        "\n\tat org.apache.iceberg.rest.CatalogHandlers.loadTable(CatalogHandlers.java:123)"
    )
    assert public_message(java) == "load wh.db.t: Table does not exist: db.t"
    rust = "Not found: t/_versions, /home/runner/work/lance/rust/lance-table/src/io/commit.rs:653:26"
    assert public_message(rust) == "Not found: t/_versions"
    python = "boom\n  File \"/srv/app/x.py\", line 3, in run\nKeyError: 'k'"
    assert public_message(python) == "boom\n'k'"
    assert public_message("ValueError(<foo.Bar object at 0x7f00aa>)") == "()"
    assert public_message("Table wh.db.ParseError not found") == "Table wh.db.ParseError not found"


# --- the server under attack, in its own process --------------------------------------------------

READ_TIMEOUT = 2.0  # seconds: the served process's --request-read-timeout


@dataclass
class Served:
    process: ServedProcess
    namespace: str  # "<warehouse>$db", holding a table "t" with rows

    @property
    def uri(self) -> str:
        return self.process.uri


@pytest.fixture(scope="module")
def served(catalog_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("attacked")
    warehouse = f"wh_{uuid.uuid4().hex[:10]}"
    extra = ["--request-read-timeout", str(READ_TIMEOUT)]
    with served_in_subprocess(catalog_server.endpoint, str(root), warehouse, extra_args=extra) as process:
        namespace = f"{warehouse}$db"
        assert requests.post(f"{process.uri}/v1/namespace/{namespace}/create", json={}).status_code == 200
        rows = pa.table({"id": list(range(10)), "text": [f"word{i}" for i in range(10)]})
        created = requests.post(f"{process.uri}/v1/table/{namespace}$t/create", data=ipc(rows), headers=ARROW)
        assert created.status_code == 200, created.text
        yield Served(process, namespace)


ARROW = {"content-type": "application/vnd.apache.arrow.stream"}
JSON = {"content-type": "application/json"}


def _deep_boolean_query(depth: int) -> str:
    """A query body whose full-text query is ``depth`` boolean queries, one inside the next."""
    match = '{"match": {"terms": "word1", "column": "text"}}'
    query = '{"boolean": {"should": [], "must_not": [], "must": [' * depth + match + "]}}" * depth
    return '{"k": 5, "vector": {}, "full_text_query": {"structured_query": {"query": ' + query + "}}}"


SLOW_INPUTS = {
    "location of 60,000 characters": ("declare", {"location": "x/" + "a-" * 30_000}),
    "location of 1 MB": ("declare", {"location": "/" + "a." * 500_000}),
    "numeric filter of 30 KB": ("query", {"k": 5, "vector": {}, "filter": "id > " + " + ".join(["1"] * 7_500)}),
    "filter of 30 KB digits": ("query", {"k": 5, "vector": {}, "filter": "id = " + "1" * 30_000}),
    "filter of 1 MB": ("query", {"k": 5, "vector": {}, "filter": "id = " + "1" * 1_000_000}),
    "boolean query 100,000 deep": ("query", _deep_boolean_query(100_000)),
}


@pytest.mark.parametrize("case", SLOW_INPUTS, ids=list(SLOW_INPUTS))
def test_input_built_to_be_slow_gets_its_4xx_while_others_are_answered(served: Served, case: str) -> None:
    route, body = SLOW_INPUTS[case]
    table = "t" if route == "query" else "new_table"
    url = f"{served.uri}/v1/table/{served.namespace}${table}/{route}"
    data = body if isinstance(body, str) else json.dumps(body)
    answer = answered_while(served.process, lambda: requests.post(url, data=data, headers=JSON, timeout=60))
    assert 400 <= answer.status_code < 500, answer.text[:300]
    assert len(answer.json()["error"]) <= 2048  # the echoed input is cut short


def test_a_boolean_query_nested_too_deep_is_refused_before_it_is_parsed(served: Served) -> None:
    url = f"{served.uri}/v1/table/{served.namespace}$t/query"
    refused = requests.post(url, data=_deep_boolean_query(100_000), headers=JSON, timeout=60)
    assert refused.status_code == 400 and "nested too deeply" in refused.json()["error"]
    shallow = requests.post(url, data=_deep_boolean_query(3), headers=JSON, timeout=60)
    assert shallow.status_code == 200, shallow.text[:300]  # a query nested a few levels is answered


@pytest.mark.parametrize("length", [60_000, 1_000_000])
def test_a_huge_table_name_gets_its_4xx_while_others_are_answered(served: Served, length: int) -> None:
    url = f"{served.uri}/v1/table/{served.namespace}${'n' * length}/declare"
    answer = answered_while(served.process, lambda: requests.post(url, json={}, timeout=60))
    assert answer.status_code in (400, 414, 431), answer.text[:300]
    assert len(answer.text) < 4096  # neither the message nor the instance echoes the name whole


# --- slow and half-sent requests ------------------------------------------------------------------


def _connect(served: Served) -> socket.socket:
    host, port = served.uri.removeprefix("http://").rsplit(":", 1)
    connection = socket.create_connection((host, int(port)), timeout=30)
    return connection


def _until_closed(connection: socket.socket) -> tuple[float, bytes]:
    """How long the server took to close ``connection`` and what it answered before."""
    started, answer = time.monotonic(), b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := connection.recv(65536):
            answer += chunk
    connection.close()
    return time.monotonic() - started, answer


HEAD = b"POST /v1/namespace/x/exists HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
HALF_SENT = {
    "nothing": b"",
    "half a head": HEAD,
    "half a body": HEAD + b"Content-Length: 100\r\n\r\n{",
}


@pytest.mark.parametrize("case", HALF_SENT, ids=list(HALF_SENT))
def test_a_half_sent_request_is_cut_off_after_the_read_timeout(served: Served, case: str) -> None:
    def half_send() -> tuple[float, bytes]:
        connection = _connect(served)
        connection.sendall(HALF_SENT[case])
        return _until_closed(connection)

    waited, answer = answered_while(served.process, half_send)
    assert READ_TIMEOUT - 0.5 < waited < READ_TIMEOUT + 5
    if case != "nothing":
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["code"] == 13


def test_a_request_trickled_byte_by_byte_is_cut_off(served: Served) -> None:
    def trickle() -> float:
        connection = _connect(served)
        started = time.monotonic()
        with contextlib.suppress(OSError):
            for byte in HEAD + b"X-Padding: " + b"p" * 10_000:
                connection.send(bytes([byte]))
                time.sleep(0.02)
        connection.close()
        return time.monotonic() - started

    assert answered_while(served.process, trickle) < READ_TIMEOUT + 5  # not the 200 s trickling takes


def test_many_half_sent_requests_do_not_starve_others(served: Served) -> None:
    def hold_200() -> list[bytes]:
        connections = [_connect(served) for _ in range(200)]
        for connection in connections:
            connection.sendall(HALF_SENT["half a body"])
        return [_until_closed(connection)[1] for connection in connections]

    answers = answered_while(served.process, hold_200)
    assert all(answer.startswith(b"HTTP/1.1 408 ") for answer in answers)


def test_a_head_too_large_is_refused_at_once(served: Served) -> None:
    connection = _connect(served)
    connection.sendall(b"GET /v1/table/" + b"a" * 200_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    waited, answer = _until_closed(connection)
    assert answer.startswith(b"HTTP/1.1 431 ") and waited < READ_TIMEOUT


def test_a_request_sent_slowly_within_the_timeout_is_answered(served: Served) -> None:
    body = json.dumps({"id": [served.namespace.split("$")[0]]}).encode()
    connection = _connect(served)
    connection.sendall(HEAD + f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n".encode())
    for byte in body:  # a byte every 20 ms: the whole body well within the timeout
        time.sleep(0.02)
        connection.send(bytes([byte]))
    _, answer = _until_closed(connection)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
