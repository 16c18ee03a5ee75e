"""Attacks on the REST server: input built to be slow, requests sent slowly or never finished,
secrets in its configuration, and the catalog's own paths. The server must keep answering
everyone else, refuse with a 4xx, and show no secret and no internal path.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
import requests
from lance_namespace import LanceNamespace

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.errors.translation import public_message

from ..helpers import ipc, other_client
from ..liveness import Served, ServedProcess, answered_while, served_in_subprocess
from ..stubs import OAuthRecordingStub

if TYPE_CHECKING:
    from lance_iceberg_ns.server import RunningServer

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


def test_public_message_still_drops_tracebacks_and_object_reprs() -> None:
    # Java stack frames and Rust source paths: tests/test_units.py
    python = "boom\n  File \"/srv/app/x.py\", line 3, in run\nKeyError: 'k'"
    assert public_message(python) == "boom\n'k'"
    assert public_message("ValueError(<foo.Bar object at 0x7f00aa>)") == "()"
    assert public_message("Table wh.db.ParseError not found") == "Table wh.db.ParseError not found"


# --- the server under attack, in its own process --------------------------------------------------

READ_TIMEOUT = 2.0  # seconds: the served process's --request-read-timeout


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
        yield Served(process, namespace, Path(created.json()["location"].removeprefix("file://")))


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


@pytest.mark.parametrize("slashes", ["/", "//"])
def test_a_path_with_trailing_slashes_is_served_as_the_route_never_redirected(served: Served, slashes: str) -> None:
    """As the reference server does; Starlette's redirect would name the client's own Host."""
    evil = {"Host": "evil.example"}
    described = requests.post(
        f"{served.uri}/v1/table/{served.namespace}$t/describe{slashes}", json={}, headers=evil, allow_redirects=False
    )
    assert described.status_code == 200, described.text
    assert described.json()["location"].endswith(".lance")
    counted = requests.post(
        f"{served.uri}/v1/table/{served.namespace}$t/count_rows{slashes}", json={}, allow_redirects=False
    )
    assert counted.status_code == 200 and counted.json() == 10
    missing = requests.post(
        f"{served.uri}/v1/table/{served.namespace}$nope/describe{slashes}", json={}, headers=evil, allow_redirects=False
    )
    assert missing.status_code == 404 and missing.json()["code"] == 4
    unknown = requests.get(f"{served.uri}/v1/nothing/here{slashes}", headers=evil, allow_redirects=False)
    assert unknown.status_code == 404 and "location" not in unknown.headers
    assert all("evil.example" not in answer.text for answer in (described, missing, unknown))


def test_a_request_sent_slowly_within_the_timeout_is_answered(served: Served) -> None:
    body = json.dumps({"id": [served.namespace.split("$")[0]]}).encode()
    connection = _connect(served)
    connection.sendall(HEAD + f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n".encode())
    for byte in body:  # a byte every 20 ms: the whole body well within the timeout
        time.sleep(0.02)
        connection.send(bytes([byte]))
    _, answer = _until_closed(connection)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]


# --- tokens kept off the command line -------------------------------------------------------------

SERVER_TOKEN = "server-tok-7c1e"


def _command_line(served: ServedProcess) -> str:
    return Path(f"/proc/{served.process.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def _status_with(served: ServedProcess, token: str | None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.post(f"{served.uri}/v1/namespace/{served.warehouse}/exists", json={}, headers=headers).status_code


@pytest.mark.parametrize("given", ["environment", "file", "command line"])
def test_the_server_takes_its_tokens_from_the_environment_or_a_file_off_the_command_line(
    catalog_server: Any, tmp_path: Path, given: str
) -> None:
    other = "second-tok-93d0"
    token_file = tmp_path / "tokens"
    token_file.write_text(f"{SERVER_TOKEN}\n\n  {other}  \n")
    options: dict[str, Any] = {
        "environment": {"env": {"LANCE_ICEBERG_NS_AUTH_TOKEN": f"{SERVER_TOKEN}, {other}\n"}},
        "file": {"extra_args": ["--auth-token-file", str(token_file)]},
        "command line": {"extra_args": ["--auth-token", SERVER_TOKEN, "--auth-token", other]},
    }[given]
    with served_in_subprocess(catalog_server.endpoint, str(tmp_path), "wh", **options) as served:
        assert _status_with(served, SERVER_TOKEN) == _status_with(served, other) == 200
        assert _status_with(served, None) == _status_with(served, "guessed") == 401
        shown = SERVER_TOKEN in _command_line(served)
    assert shown == (given == "command line")  # what `ps` shows every user of the machine


def test_an_empty_or_missing_token_file_stops_the_server_from_starting(tmp_path: Path) -> None:
    from lance_iceberg_ns.server.settings import ServeSettingsError, bearer_tokens

    empty = tmp_path / "empty"
    empty.write_text("\n \n")
    for path in (empty, tmp_path / "missing"):
        with pytest.raises(ServeSettingsError, match="--auth-token-file"):
            bearer_tokens((), str(path), environ={})
    environ = {"LANCE_ICEBERG_NS_AUTH_TOKEN": "a,b\nc,,"}
    assert bearer_tokens(("given",), None, environ) == ("given", "a", "b", "c")


def test_a_catalog_token_read_from_a_file_is_sent_to_the_catalog(tmp_path: Path) -> None:
    from lance_iceberg_ns.cli import main

    token_file = tmp_path / "catalog-token"
    token_file.write_text("catalog-tok-51aa\n")
    stub = OAuthRecordingStub()
    try:
        arguments = ["--endpoint", stub.endpoint, "--property-file", f"auth_token={token_file}"]
        assert main([*arguments, "namespaces", "list", "wh", "--json"]) == 0
    finally:
        stub.close()
    assert stub.authorizations == ["Bearer catalog-tok-51aa"]


# --- secrets leave only by allowlist --------------------------------------------------------------

SSE_KEY = "c3NlLWN1c3RvbWVyLWtleS1TRUNSRVQtMDAwMDAwMDA="
PROXY_TOKEN = "proxy-tok-SECRET-4b2"
NEW_KIND_OF_SECRET = "novel-SECRET-8f8f"  # under a name no deny-list knows
STATIC = {
    "storage.region": "eu-1",
    "storage.allow_http": "true",
    "storage.aws_sse_customer_key_base64": SSE_KEY,
    "storage.proxy_url": f"http://{PROXY_TOKEN}@proxy.example:3128",
    "storage.aws_endpoint": f"http://minio:{PROXY_TOKEN}@minio.example:9000",
    "storage.endpoint": f"{PROXY_TOKEN}@minio.example:9000",  # no scheme
    "storage.aws_endpoint_url": "http://minio.example:9000",
    "storage.tls_pinning_material": NEW_KIND_OF_SECRET,
}


def test_callers_see_only_allowlisted_options_and_no_url_with_a_user() -> None:
    from lance_iceberg_ns.storage.options import StorageOptions

    signed = {"azure_storage_endpoint": f"https://acct.blob.example/?sv=1&sig={PROXY_TOKEN}"}
    options = StorageOptions({**{key.removeprefix("storage."): value for key, value in STATIC.items()}, **signed})
    shown = {"region": "eu-1", "allow_http": "true", "aws_endpoint_url": "http://minio.example:9000"}
    assert options.for_caller() == shown
    assert options.for_caller({"aws_session_token": "vended"}) == {**shown, "aws_session_token": "vended"}


def test_every_static_storage_value_not_allowlisted_is_redacted() -> None:
    from lance_iceberg_ns.config.settings import Settings

    settings = Settings.from_properties({"endpoint": "https://svc:pa55word@catalog.example", **STATIC})
    text = " ".join(value for value in STATIC.values()) + " https://svc:pa55word@catalog.example"
    redacted = settings.redact(text)
    for secret in (SSE_KEY, PROXY_TOKEN, NEW_KIND_OF_SECRET, "pa55word"):
        assert secret not in redacted and secret not in repr(settings)
    assert "eu-1 true" in redacted and "minio.example:9000" in redacted  # what is safe stays readable


def test_the_server_never_answers_or_logs_a_static_secret(catalog_server: Any, tmp_path: Path) -> None:
    warehouse = f"wh_{uuid.uuid4().hex[:10]}"
    with served_in_subprocess(
        catalog_server.endpoint, str(tmp_path), warehouse, properties=STATIC, extra_args=["--debug"]
    ) as served:
        namespace = f"{served.uri}/v1/namespace/{warehouse}$db"
        table = f"{served.uri}/v1/table/{warehouse}$db"
        answers = [
            requests.post(f"{namespace}/create", json={}),
            requests.post(f"{table}$declared/declare", json={}),
            requests.post(f"{table}$declared/describe", json={}),
            requests.post(f"{table}$written/create", data=ipc(pa.table({"id": [1]})), headers=ARROW),
            requests.post(f"{table}$written/describe", json={}),
            requests.post(f"{table}$missing/describe", json={}),
            requests.post(f"{table}$bad/declare", json={"location": f"http://{PROXY_TOKEN}@x/{SSE_KEY}"}),
        ]
        assert [answer.status_code for answer in answers[:5]] == [200] * 5, [a.text for a in answers]
        safe = {"region": "eu-1", "allow_http": "true", "aws_endpoint_url": "http://minio.example:9000"}
        assert answers[1].json()["storage_options"] == answers[2].json()["storage_options"] == safe
        assert 400 <= answers[6].status_code < 500
        logged = served.stderr()
    answered = " ".join(answer.text for answer in answers)
    for secret in (SSE_KEY, PROXY_TOKEN, NEW_KIND_OF_SECRET):
        assert secret not in answered and secret not in logged


# --- namespace answers name none of the catalog's files -------------------------------------------


def test_namespace_answers_keep_the_callers_properties_without_the_catalogs_paths(
    ns: IcebergLanceNamespace, warehouse: str, server: RunningServer
) -> None:
    catalog_sees = other_client(ns.settings.endpoint, warehouse)
    created = ns.create_namespace({"id": [warehouse, "db"], "properties": {"owner": "ana"}})
    assert "location" in catalog_sees.load_namespace_properties(("db",))  # the local catalog adds its own path
    assert created.properties == {"owner": "ana"}
    assert ns.describe_namespace({"id": [warehouse, "db"]}).properties == {"owner": "ana"}
    described = requests.post(f"{server.uri}/v1/namespace/{warehouse}$db/describe", json={})
    assert described.json()["properties"] == {"owner": "ana"}
    created_remotely = requests.post(f"{server.uri}/v1/namespace/{warehouse}$db$sub/create", json={})
    assert created_remotely.json().get("properties", {}) == {}
    assert ns.drop_namespace({"id": [warehouse, "db", "sub"]}).properties == {}
    assert ns.drop_namespace({"id": [warehouse, "db"]}).properties == {"owner": "ana"}


def test_a_body_refused_before_it_is_read_gets_no_time_for_its_declared_size(served: Served) -> None:
    """A huge declared body is refused at once (413); trickling it on is cut off after the plain
    timeout, not after the second per MiB a body the server would read is given."""

    def declare_100_mib_and_trickle() -> tuple[float, bytes]:
        connection = _connect(served)
        connection.sendall(HEAD + f"Content-Length: {100 * 1024 * 1024}\r\n\r\n".encode())
        started, answer = time.monotonic(), b""
        with contextlib.suppress(OSError):
            while time.monotonic() - started < 30:
                connection.send(b" ")
                connection.settimeout(0.2)
                with contextlib.suppress(TimeoutError):
                    chunk = connection.recv(65536)
                    if not chunk:
                        break
                    answer += chunk
        connection.close()
        return time.monotonic() - started, answer

    waited, answer = answered_while(served.process, declare_100_mib_and_trickle)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert waited < READ_TIMEOUT + 5


# --- slow data requests have worker threads of their own ------------------------------------------

SLOW_FILTER = "levenshtein(text, repeat('x', 280)) < 0"  # legal, and about 0.1 ms a row


def test_slow_data_requests_wait_for_their_own_threads_while_catalog_requests_are_answered(
    catalog_server: Any, tmp_path: Path
) -> None:
    """50 slow queries at once from one client (more than anyio's 40 shared threads): it holds one of
    the 2 data threads (the other is kept for other clients) with 4 waiting, the rest are refused at
    once with 503; a catalog request is answered within a second throughout."""
    warehouse = f"wh_{uuid.uuid4().hex[:10]}"
    extra = ["--data-threads", "2"]
    with served_in_subprocess(catalog_server.endpoint, str(tmp_path), warehouse, extra_args=extra) as process:
        table = f"{process.uri}/v1/table/{warehouse}$db$big"
        assert requests.post(f"{process.uri}/v1/namespace/{warehouse}$db/create", json={}).status_code == 200
        rows = pa.table({"text": ["lorem ipsum dolor sit amet " * 10 + str(i) for i in range(5_000)]})
        assert requests.post(f"{table}/create", data=ipc(rows), headers=ARROW).status_code == 200
        body: dict[str, Any] = {"k": 10, "vector": {}, "filter": SLOW_FILTER}

        def query(_: int) -> requests.Response:
            return requests.post(f"{table}/query", json=body, timeout=300)

        def fifty_at_once() -> list[requests.Response]:
            with ThreadPoolExecutor(50) as pool:
                return list(pool.map(query, range(50)))

        answers = answered_while(process, fifty_at_once)
        after = query(0)
    statuses = [answer.status_code for answer in answers]
    assert set(statuses) == {200, 503} and statuses.count(200) >= 1 + 4, statuses
    refused = [answer for answer in answers if answer.status_code == 503]
    assert all(answer.json()["code"] == 17 for answer in refused)
    assert all(answer.json()["detail"] == "ServiceUnavailableError" for answer in refused)
    assert all(answer.headers["Retry-After"] == "1" for answer in refused)  # when to come back
    assert max(answer.elapsed.total_seconds() for answer in refused) < 1  # refused at once, not queued
    assert after.status_code == 200  # and served again once the queue is drained


class BlockingNamespace(LanceNamespace):
    """A backend whose queries wait until released, to fill the data threads at will."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Semaphore(0)

    def namespace_id(self) -> str:
        return "BlockingNamespace"

    def namespace_exists(self, request: Any) -> None:  # type: ignore[override]
        return None

    def count_table_rows(self, request: Any) -> int:  # type: ignore[override]
        self.started.release()
        self.release.wait(60)
        return 1


def test_a_data_request_is_refused_with_503_once_four_per_thread_are_waiting() -> None:
    from lance_iceberg_ns.server import serve_in_background

    backend = BlockingNamespace()
    with serve_in_background(backend, data_threads=1) as running, ThreadPoolExecutor(8) as pool:
        count = f"{running.uri}/v1/table/a$b/count_rows"
        try:
            running_one = pool.submit(requests.post, count, json={}, timeout=60)
            assert backend.started.acquire(timeout=30)  # the one thread is taken
            waiting = [pool.submit(requests.post, count, json={}, timeout=60) for _ in range(4)]
            time.sleep(1)  # the four reach the queue: a local request takes milliseconds
            started = time.monotonic()
            refused = requests.post(count, json={}, timeout=5)
            refused_after = time.monotonic() - started
            catalog = requests.post(f"{running.uri}/v1/namespace/a/exists", json={}, timeout=5)
        finally:
            backend.release.set()
        answered = [running_one.result(), *(future.result() for future in waiting)]
        again = requests.post(count, json={}, timeout=60)
    assert (refused.status_code, refused.json()["code"], refused_after < 1) == (503, 17, True)
    assert "busy" in refused.json()["error"]
    assert catalog.status_code == 200  # the catalog's threads were free all along
    assert [answer.status_code for answer in answered] == [200] * 5
    assert again.status_code == 200


# --- careless use of the serve command ------------------------------------------------------------


@pytest.mark.parametrize("value", [" \n , ", ""])
def test_a_token_variable_set_but_holding_no_token_stops_the_server_from_starting(
    value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from lance_iceberg_ns.cli import main

    monkeypatch.setenv("LANCE_ICEBERG_NS_AUTH_TOKEN", value)
    assert main(["serve", "--endpoint", "http://127.0.0.1:9", "--root", "/tmp/x", "--port", "0"]) == 2
    assert "LANCE_ICEBERG_NS_AUTH_TOKEN is set but holds no token" in capsys.readouterr().err


def test_serve_on_port_0_prints_the_port_it_listens_on(catalog_server: Any, tmp_path: Path) -> None:
    arguments = ["serve", "--endpoint", catalog_server.endpoint, "--root", str(tmp_path), "--port", "0"]
    process = subprocess.Popen(
        [sys.executable, "-m", "lance_iceberg_ns.cli", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        printed = process.stdout.readline() if process.stdout else ""
        uri = printed.split(" on ", 1)[1].split()[0]
        assert not uri.endswith(":0"), printed
        assert requests.get(f"{uri}/openapi.json", timeout=10).status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_the_protect_help_names_every_protection_property() -> None:
    from lance_iceberg_ns.catalog.companions import ENGINE_PROTECTION
    from lance_iceberg_ns.cli import main
    from lance_iceberg_ns.cli.engine_commands import tables_protect

    assert main(["tables", "protect", "--help"]) == 0
    help_text = " ".join((tables_protect.help or "").split())
    assert all(f"{key}={value}" in help_text for key, value in ENGINE_PROTECTION.items())


class RecordingNamespace(LanceNamespace):
    """A backend of the server's that is not the bridge: it checks no bounds of its own."""

    def __init__(self) -> None:
        self.listed: list[Any] = []

    def namespace_id(self) -> str:
        return "RecordingNamespace"

    def list_tables(self, request: Any) -> Any:
        self.listed.append(request)
        return {"tables": []}


def test_the_server_checks_the_bounds_for_a_namespace_that_does_not() -> None:
    """The bridge's operations check a request's bounds themselves, so the server leaves them to
    it; any other namespace behind the server gets them checked by the server."""
    from lance_iceberg_ns.server import serve_in_background

    backend = RecordingNamespace()
    with serve_in_background(backend) as running:
        listing = f"{running.uri}/v1/namespace/a$b/table/list"
        refused = requests.get(listing, params={"limit": 10_001}, timeout=30)
        answered = requests.get(listing, params={"limit": 10}, timeout=30)
    assert (refused.status_code, answered.status_code) == (400, 200)
    assert [request.limit for request in backend.listed] == [10]


class RaisesStopIteration(LanceNamespace):
    """A backend whose operations raise StopIteration (a ``next()`` on an empty iterator)."""

    def namespace_id(self) -> str:
        return "RaisesStopIteration"

    def namespace_exists(self, request: Any) -> None:  # type: ignore[override]
        next(iter([]))

    def count_table_rows(self, request: Any) -> int:  # type: ignore[override]
        return int(next(iter([])))


def test_an_operation_that_raises_stop_iteration_is_answered_with_the_error_body() -> None:
    """A StopIteration cannot cross into an event loop's future: it is answered as any other
    failure (500, the spec's body), never left without an answer."""
    from lance_iceberg_ns.server import serve_in_background

    with serve_in_background(RaisesStopIteration()) as running:
        answers = [
            requests.post(f"{running.uri}/v1/namespace/a/exists", json={}, timeout=10),
            requests.post(f"{running.uri}/v1/table/a$b/count_rows", json={}, timeout=10),
        ]
    assert [(answer.status_code, answer.json()["code"]) for answer in answers] == [(500, 18), (500, 18)]


def test_a_process_serving_in_the_background_exits_while_a_request_still_runs(tmp_path: Path) -> None:
    """A notebook or test session that stops its server while a query still runs (a catalog that
    hangs) can exit: the worker threads never hold up the interpreter's exit."""
    script = tmp_path / "slow.py"
    script.write_text(
        "import threading, time, requests\n"
        "from lance_namespace import LanceNamespace\n"
        "from lance_iceberg_ns.server import serve_in_background\n"
        "class Slow(LanceNamespace):\n"
        "    def namespace_id(self): return 'slow'\n"
        "    def count_table_rows(self, request):\n"
        "        print('running', flush=True); time.sleep(120); return 1\n"
        "server = serve_in_background(Slow())\n"
        "threading.Thread(target=requests.post, args=(server.uri + '/v1/table/a$b/count_rows',),\n"
        "                 kwargs={'json': {}}, daemon=True).start()\n"
        "time.sleep(1)\n"
        "server.stop(timeout=2)\n"
    )
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=100)
    assert done.stdout.strip() == "running"  # the request was running when the server stopped
    assert time.monotonic() - started < 60, done.stderr
