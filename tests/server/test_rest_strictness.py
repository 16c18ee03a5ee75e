"""What a hostile client or a spec-driven fuzzer found the server too lenient about: a 405 without
``Allow``, an identifier in the body that is not strings, JSON nested thousands of levels deep in
a query parameter, and a newline in a path written into the text log as a line of its own."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pytest
import requests
from lance_namespace import LanceNamespace

from lance_iceberg_ns.limits import MAX_JSON_DEPTH, MAX_QUERY_NESTING, check_json_depth
from lance_iceberg_ns.server import RunningServer, serve_in_background
from lance_iceberg_ns.server.routes import ROUTES

from ..helpers import ipc, server_text_log
from .test_attacks_server import _deep_boolean_query

JSON = {"content-type": "application/json"}
ARROW = {"content-type": "application/vnd.apache.arrow.stream"}


def _deep(depth: int) -> Any:
    """A JSON array ``depth`` levels deep."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


# --- 405 names the methods the route accepts --------------------------------------------------------


def test_every_405_carries_allow_with_the_methods_the_route_accepts(server: RunningServer) -> None:
    for route in ROUTES:
        path = route.path.replace("{id}", "wh$db$t").replace("{index_name}", "idx")
        other = "GET" if route.method == "POST" else "POST"
        answer = requests.request(other, f"{server.uri}{path}", timeout=30)
        assert answer.status_code == 405, (route.operation, answer.text)
        assert answer.headers.get("Allow") == route.method, (route.operation, answer.headers)
        body = answer.json()
        assert set(body) == {"error", "code", "detail", "instance"} and body["code"] == 0, body


def test_the_servers_own_routes_answer_405_with_allow_too(server: RunningServer) -> None:
    for path, method, allowed in (("/metrics", "POST", "GET"), ("/openapi.json", "DELETE", "GET, HEAD")):
        answer = requests.request(method, f"{server.uri}{path}", timeout=30)
        assert (answer.status_code, answer.headers.get("Allow")) == (405, allowed), answer.text
        assert answer.json()["code"] == 0


# --- identifiers in a body are strings ----------------------------------------------------------------

NOT_STRINGS = [[{}], 5, [["a"]], [1], "db", [None], {"a": "b"}]


@pytest.fixture
def a_table(server: RunningServer, warehouse: str) -> Iterator[str]:
    """``{warehouse}$db$t``: a namespace and a declared table in it, through the server."""
    namespace = f"{server.uri}/v1/namespace/{warehouse}$db"
    requests.post(f"{namespace}/create", json={}, timeout=30).raise_for_status()
    requests.post(f"{server.uri}/v1/table/{warehouse}$db$t/declare", json={}, timeout=30).raise_for_status()
    yield f"{warehouse}$db$t"


@pytest.mark.parametrize("body_id", NOT_STRINGS, ids=json.dumps)
def test_an_identifier_in_the_body_that_is_not_strings_is_invalid_input_and_changes_nothing(
    server: RunningServer, a_table: str, body_id: Any
) -> None:
    namespace = a_table.rsplit("$", 1)[0]
    calls = [
        f"/v1/namespace/{namespace}/describe",
        f"/v1/namespace/{namespace}/exists",
        f"/v1/namespace/{namespace}/drop",
        f"/v1/table/{a_table}/describe",
        f"/v1/table/{a_table}/exists",
        f"/v1/table/{a_table}/deregister",
        f"/v1/table/{a_table}/declare",
    ]
    for path in calls:
        answer = requests.post(f"{server.uri}{path}", json={"id": body_id}, timeout=30)
        assert (answer.status_code, answer.json()["code"]) == (400, 13), (path, answer.text)
        assert answer.json()["error"].startswith("Invalid request: id"), answer.text
    for path in (f"/v1/namespace/{namespace}/exists", f"/v1/table/{a_table}/exists"):
        assert requests.post(f"{server.uri}{path}", json={}, timeout=30).status_code == 200, path  # still there


def test_an_identifier_in_the_body_as_strings_is_still_accepted(server: RunningServer, a_table: str) -> None:
    parts = a_table.split("$")
    answer = requests.post(f"{server.uri}/v1/table/{a_table}/describe", json={"id": parts}, timeout=30)
    assert answer.status_code == 200, answer.text


def test_a_query_parameter_that_takes_one_value_given_twice_is_invalid_input_and_changes_nothing(
    server: RunningServer, a_table: str
) -> None:
    """``mode=append&mode=overwrite`` took the last value: the insert overwrote the table."""
    insert = f"{server.uri}/v1/table/{a_table}/insert"
    first = requests.post(insert, data=ipc(pa.table({"v": [1, 2, 3]})), headers=ARROW, timeout=30)
    assert first.status_code == 200, first.text
    for query in ("mode=append&mode=overwrite", "delimiter=$&delimiter=.", "mode=append&mode=append"):
        answer = requests.post(f"{insert}?{query}", data=ipc(pa.table({"v": [9]})), headers=ARROW, timeout=30)
        assert (answer.status_code, answer.json()["code"]) == (400, 13), (query, answer.text)
        assert "more than one" in answer.json()["error"]
    count = requests.post(f"{server.uri}/v1/table/{a_table}/count_rows", json={}, timeout=30)
    assert count.status_code == 200 and count.json() == 3, count.text
    listed = requests.post(f"{server.uri}/v1/table/{a_table}/version/list?limit=1", json={}, timeout=30)
    assert listed.status_code == 200, listed.text  # one value: taken


# --- JSON depth is bounded everywhere ------------------------------------------------------------------


@pytest.mark.parametrize("field", ["properties", "storage_options"])
def test_a_map_in_the_query_string_nested_thousands_deep_is_invalid_input(
    server: RunningServer, warehouse: str, field: str
) -> None:
    table = f"{server.uri}/v1/table/{warehouse}$db$deep"
    requests.post(f"{server.uri}/v1/namespace/{warehouse}$db/create", json={}, timeout=30).raise_for_status()
    for depth in (5_000, MAX_JSON_DEPTH + 1):
        nested = "[" * depth + "]" * depth  # compact, to stay within the request head's cap
        answer = requests.post(
            f"{table}/create", params={field: nested}, data=ipc(pa.table({"v": [1]})), headers=ARROW, timeout=60
        )
        assert (answer.status_code, answer.json()["code"]) == (400, 13), (depth, answer.text[:300])
        assert "nested" in answer.json()["error"] and field in answer.json()["error"], answer.text[:300]
    assert requests.post(f"{table}/exists", json={}, timeout=30).status_code == 404  # nothing was created


def test_a_json_body_nested_past_the_bound_is_invalid_input_even_in_a_field_nobody_reads(
    server: RunningServer, warehouse: str
) -> None:
    exists = f"{server.uri}/v1/namespace/{warehouse}/exists"
    refused = requests.post(exists, data=json.dumps({"unread": _deep(MAX_JSON_DEPTH)}), headers=JSON, timeout=30)
    assert (refused.status_code, refused.json()["code"]) == (400, 13), refused.text
    assert f"nested more than {MAX_JSON_DEPTH} levels" in refused.json()["error"]
    at_bound = requests.post(exists, data=json.dumps({"unread": _deep(MAX_JSON_DEPTH - 1)}), headers=JSON, timeout=30)
    assert at_bound.status_code != 400, at_bound.text  # the warehouse itself need not exist: 404 or 200


def test_the_deepest_search_allowed_fits_within_the_json_bound() -> None:
    deepest = json.loads(_deep_boolean_query(MAX_QUERY_NESTING))
    assert check_json_depth(deepest, "body") is deepest


# --- no client text starts a log line -------------------------------------------------------------------


class FailingNamespace(LanceNamespace):
    """A backend that is not the bridge (it refuses no control character in an identifier) and
    fails unexpectedly, so that the server logs the request's decoded path."""

    def namespace_id(self) -> str:
        return "FailingNamespace"

    def namespace_exists(self, request: Any) -> None:  # type: ignore[override]
        raise RuntimeError(f"no such thing as {request.id}")

    def drop_namespace(self, request: Any) -> Any:  # type: ignore[override]
        raise RuntimeError(f"cannot drop {request.id}")


FORGED = "2030-01-01 00:00:00,000 INFO lance_iceberg_ns.audit [-] drop_table ['wh', 'db', 't'] by token#1"


@pytest.fixture
def text_log() -> Iterator[io.StringIO]:
    """The server's loggers written as ``serve`` writes them in the text format."""
    with server_text_log("lance_iceberg_ns") as written:
        yield written


def test_a_newline_decoded_from_the_path_never_starts_a_log_line(text_log: io.StringIO) -> None:
    forged_id = quote(f"a\n{FORGED}\r\x1b[2J", safe="")
    with serve_in_background(FailingNamespace()) as running:
        answers = [
            requests.post(f"{running.uri}/v1/namespace/{forged_id}/exists", json={}, timeout=30),
            requests.post(f"{running.uri}/v1/namespace/{forged_id}/drop", json={}, timeout=30),
        ]
    assert [answer.status_code for answer in answers] == [500, 500]
    lines = text_log.getvalue().splitlines()
    assert any("Unexpected failure" in line for line in lines), lines
    assert any(line.startswith("2") and "drop_namespace" in line for line in lines), lines  # the audit line
    records = [line for line in lines if not line.startswith("  | ")]  # a traceback's lines are marked
    assert not any(line.startswith(FORGED[:10]) for line in records), lines
    assert all("\r" not in line and "\x1b" not in line for line in lines), lines
    assert any("a\\n2030-01-01" in line for line in records), lines  # shown escaped, on its record's line
