"""The server in production: health checks, metrics, the audit log, JSON logs with request IDs,
configuration from variables and files, worker processes, a graceful stop, and the Docker image.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from lance_iceberg_ns.server import create_app_from_env, serve_in_background
from lance_iceberg_ns.server.health import PROBE_EVERY_SECONDS
from lance_iceberg_ns.server.observability import AUDITED_OPERATIONS, METRIC_NAMES, READ_ONLY_OPERATIONS
from lance_iceberg_ns.server.routes import ROUTES

from ..conftest import RequestCounter
from ..docker_fixture import docker_available
from ..helpers import data_workers_ready
from ..liveness import ServedProcess, answers, free_port, is_running, served_in_subprocess
from ..stubs import CONFIG_ANSWER, JsonHandler, StubServer

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "tok-" + "7" * 24
STORAGE_SECRET = "storage-secret-" + "9" * 16


class ScriptedCatalog(StubServer):
    """A fake catalog: ``/v1/config`` answers ``config_status`` after ``config_delay`` seconds
    (at once unless set); every namespace exists, one named ``slow`` answered after ``delay``
    seconds, every other at once."""

    def __init__(self, delay: float = 0.0) -> None:
        stub = self
        self.config_status, self.delay, self.config_delay = 200, delay, 0.0

        class Handler(JsonHandler):
            def answer(self) -> None:
                if self.path.startswith("/v1/config"):
                    time.sleep(stub.config_delay)
                    self.send_json(stub.config_status, CONFIG_ANSWER if stub.config_status < 400 else {})
                    return
                if "slow" in self.path:
                    time.sleep(stub.delay)
                if self.command == "GET":  # loadNamespaceMetadata: the namespace exists
                    self.send_json(200, {"namespace": self.path.rstrip("/").split("/")[-1:], "properties": {}})
                    return
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_DELETE = do_HEAD = answer

        self.start(Handler)


@pytest.fixture
def scripted_catalog() -> Iterator[ScriptedCatalog]:
    catalog = ScriptedCatalog()
    yield catalog
    catalog.close()


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus scrape, by name and labels."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def _catalog_total(samples: dict[Any, float]) -> float:
    return sum(value for (name, _), value in samples.items() if name == "lance_iceberg_ns_catalog_requests_total")


# --- health and readiness -----------------------------------------------------------------------


def test_healthz_and_readyz_answer_without_a_token_when_the_catalog_answers(endpoint: str, tmp_path: Path) -> None:
    properties = {"endpoint": endpoint, "root": str(tmp_path)}
    with serve_in_background(properties=properties, auth_tokens=[TOKEN]) as server:
        assert requests.get(f"{server.uri}/healthz", timeout=10).json() == {"status": "ok"}
        data_workers_ready()
        ready = requests.get(f"{server.uri}/readyz", timeout=10)
        assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
        assert requests.post(f"{server.uri}/v1/namespace/wh/exists", json={}, timeout=10).status_code == 401


def test_readyz_is_503_with_a_one_line_reason_that_leaks_nothing_when_the_catalog_is_dead(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    properties = {
        "endpoint": f"http://admin:pa55word-xyz@127.0.0.1:{port}",
        "root": str(tmp_path),
        "auth_token": "catalog-token-abcdef",
        "storage.aws_secret_access_key": STORAGE_SECRET,
    }
    with serve_in_background(properties=properties) as server:
        assert requests.get(f"{server.uri}/healthz", timeout=10).status_code == 200
        answer = requests.get(f"{server.uri}/readyz", timeout=10)
    assert answer.status_code == 503
    body = answer.json()
    assert body["status"] == "not ready" and "unreachable" in body["reason"] and "\n" not in body["reason"]
    for leaked in ("pa55word", "admin", str(port), "127.0.0.1", "catalog-token", STORAGE_SECRET, "aws"):
        assert leaked not in answer.text


def test_readyz_follows_the_catalog(scripted_catalog: ScriptedCatalog, tmp_path: Path) -> None:
    with serve_in_background(properties={"endpoint": scripted_catalog.endpoint, "root": str(tmp_path)}) as server:
        data_workers_ready()
        assert requests.get(f"{server.uri}/readyz", timeout=10).status_code == 200
        scripted_catalog.config_status = 503
        time.sleep(1.1)  # a probe's answer is kept a second
        failing = requests.get(f"{server.uri}/readyz", timeout=10)
        assert failing.status_code == 503 and "HTTP 503" in failing.json()["reason"]
        scripted_catalog.config_status = 200
        time.sleep(1.1)
        assert requests.get(f"{server.uri}/readyz", timeout=10).status_code == 200


def test_readyz_waits_for_a_data_worker(endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ready means a data request is answered at once: the first ones waited seconds for workers
    to import pylance after /readyz said ready."""
    from lance_iceberg_ns.server.isolation import DataWorkers

    starting = True
    monkeypatch.setattr(DataWorkers, "any_ready", lambda self: not starting)
    with serve_in_background(properties={"endpoint": endpoint, "root": str(tmp_path)}) as server:
        waiting = requests.get(f"{server.uri}/readyz", timeout=10)
        starting = False
        ready = requests.get(f"{server.uri}/readyz", timeout=10)
    assert (waiting.status_code, waiting.json()) == (503, {"status": "not ready", "reason": "data workers starting"})
    assert ready.status_code == 200


def _serve(*arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "lance_iceberg_ns.cli", "serve", *arguments]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})}, check=False
    )


def test_serve_fails_fast_when_the_catalog_does_not_answer(tmp_path: Path) -> None:
    endpoint = f"http://admin:pa55word-xyz@127.0.0.1:{free_port()}"
    started = time.monotonic()
    done = _serve("--endpoint", endpoint, "--root", str(tmp_path), "--port", "0", "--catalog-wait", "1")
    assert done.returncode == 5, done.stderr
    assert "unreachable" in done.stderr and "not serving" in done.stderr
    assert "pa55word" not in done.stderr + done.stdout
    assert time.monotonic() - started < 60


def test_serve_with_no_catalog_wait_starts_not_ready(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with served_in_subprocess(dead, str(tmp_path), "wh", extra_args=["--catalog-wait", "0"]) as served:
        assert requests.get(f"{served.uri}/healthz", timeout=10).status_code == 200
        assert requests.get(f"{served.uri}/readyz", timeout=10).status_code == 503


# --- metrics ------------------------------------------------------------------------------------


def test_metrics_count_requests_errors_latency_and_catalog_round_trips(
    endpoint: str, tmp_path: Path, warehouse: str, request_counter: RequestCounter
) -> None:
    properties = {"endpoint": endpoint, "root": str(tmp_path)}
    with serve_in_background(properties=properties, auth_tokens=[TOKEN]) as server:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert requests.get(f"{server.uri}/metrics", timeout=10).status_code == 401  # behind the token
        before = _samples(requests.get(f"{server.uri}/metrics", headers=auth, timeout=10).text)
        request_counter.reset()
        calls = [
            ("create_namespace", f"/v1/namespace/{warehouse}$db/create", 200),
            ("declare_table", f"/v1/table/{warehouse}$db$t/declare", 200),
            ("describe_table", f"/v1/table/{warehouse}$db$missing/describe", 404),
            ("unknown", f"/v1/no/such/{uuid.uuid4().hex}", 404),
        ]
        for _, path, status in calls:
            assert requests.post(f"{server.uri}{path}", json={}, headers=auth, timeout=30).status_code == status
        to_catalog = [url for _, url in request_counter.requests if _is_catalog_path(url)]
        after_text = requests.get(f"{server.uri}/metrics", headers=auth, timeout=10).text
    after = _samples(after_text)

    def delta(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    for operation, _, status in calls:
        assert delta("lance_iceberg_ns_requests_total", operation=operation) == 1
        assert delta("lance_iceberg_ns_request_duration_seconds_count", operation=operation) == 1
        if status >= 400:
            assert delta("lance_iceberg_ns_request_errors_total", operation=operation, status=str(status)) == 1
    assert delta("lance_iceberg_ns_request_errors_total", operation="create_namespace", status="200") == 0
    assert _catalog_total(after) - _catalog_total(before) == len(to_catalog) > 0
    assert "/v1/no/such" not in after_text  # labels are operations, never raw paths
    for name in METRIC_NAMES:
        assert name in after_text


def _is_catalog_path(url: str) -> bool:
    """An Iceberg REST path (``/v1/config``, ``.../namespaces...``), not one of the Lance server's."""
    path = url.split("?", 1)[0]
    return path.startswith("/v1/config") or "/namespaces" in path or "/transactions" in path or "/oauth" in path


# --- audit log ----------------------------------------------------------------------------------


def test_every_operation_that_changes_something_is_audited_and_no_read_is() -> None:
    operations = {route.operation for route in ROUTES}
    assert operations == AUDITED_OPERATIONS | READ_ONLY_OPERATIONS
    assert not AUDITED_OPERATIONS & READ_ONLY_OPERATIONS
    changing = {
        "create_namespace",
        "drop_namespace",
        "declare_table",
        "create_table",
        "drop_table",
        "register_table",
        "deregister_table",
        "rename_table",
        "restore_table",
        "insert_into_table",
        "merge_insert_into_table",
        "update_table",
        "delete_from_table",
        "create_table_index",
        "drop_table_index",
        "create_table_version",
        "batch_delete_table_versions",
        "batch_commit_tables",
        "alter_table_add_columns",
        "create_table_tag",
        "delete_table_branch",
    }
    assert changing <= AUDITED_OPERATIONS


def test_the_audit_log_says_who_did_what_and_how_it_ended_never_the_token(
    endpoint: str, tmp_path: Path, warehouse: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lance_iceberg_ns.audit")
    properties = {"endpoint": endpoint, "root": str(tmp_path)}
    with serve_in_background(properties=properties, auth_tokens=["first-token-aaaa", TOKEN]) as server:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for path in (f"/v1/namespace/{warehouse}$db/create", f"/v1/table/{warehouse}$db$t/declare"):
            requests.post(f"{server.uri}{path}", json={}, headers=auth, timeout=30).raise_for_status()
        requests.post(f"{server.uri}/v1/table/{warehouse}$db$t/describe", json={}, headers=auth, timeout=30)
        requests.post(f"{server.uri}/v1/table/{warehouse}$db$t/drop", headers=auth, timeout=30).raise_for_status()
        requests.post(f"{server.uri}/v1/table/{warehouse}$db$t/drop", headers=auth, timeout=30)  # gone: 404
        requests.post(f"{server.uri}/v1/table/{warehouse}$db$x/drop", timeout=30)  # no token: 401
    audited = [record for record in caplog.records if record.name == "lance_iceberg_ns.audit"]
    lines = [record.getMessage() for record in audited]
    operations = ["create_namespace", "declare_table", "drop_table", "drop_table", "drop_table"]
    assert [(getattr(record, "operation", None), getattr(record, "event", None)) for record in audited] == [
        (operation, event) for operation in operations for event in ("start", "end")
    ], lines  # a start line before each request's work, its outcome after
    request_ids = [getattr(record, "request_id", None) for record in audited]
    assert request_ids[::2] == request_ids[1::2] and len(set(request_ids)) == len(operations)  # a pair per request
    created = rf"create_namespace \['{warehouse}', 'db'\] by token#2 from 127\.0\.0\.1:\d+"
    assert re.fullmatch(rf"{created}: started", lines[0]), lines[0]
    assert re.fullmatch(rf"{created}: ok in \d+(\.\d)? ms", lines[1]), lines[1]
    assert lines[5].startswith(f"drop_table ['{warehouse}', 'db', 't'] by token#2") and ": ok in " in lines[5]
    assert re.search(r": error code=4 status=404 in [\d.]+ ms$", lines[7]), lines[7]
    assert "by anonymous from 127.0.0.1:" in lines[9] and ": error code=16 status=401 in " in lines[9]
    assert lines[8].endswith(": started") and f"['{warehouse}', 'db', 'x']" in lines[8]  # refused: from its path
    ends = audited[1::2]
    assert [getattr(record, "result", None) for record in ends] == ["ok", "ok", "ok", "error", "error"]
    assert all(isinstance(getattr(record, "duration_ms", None), float) for record in ends)
    assert not any(TOKEN in line or "first-token" in line for line in lines)


# --- JSON logs, request IDs, secrets -------------------------------------------------------------


def test_json_logs_carry_each_request_id_and_no_secret(catalog_server: Any, tmp_path: Path, warehouse: str) -> None:
    extra = ["--log-format", "json", "--access-log"]
    properties = {"storage.aws_secret_access_key": STORAGE_SECRET, "auth_token": "catalog-side-token-xyz"}
    env = {"LANCE_ICEBERG_NS_AUTH_TOKEN": TOKEN}
    with served_in_subprocess(
        catalog_server.endpoint, str(tmp_path), warehouse, properties=properties, extra_args=extra, env=env
    ) as served:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        given = requests.post(
            f"{served.uri}/v1/namespace/{warehouse}$db/create",
            json={},
            headers={**auth, "X-Request-ID": "req-42.abc"},
            timeout=30,
        )
        insane = requests.post(
            f"{served.uri}/v1/namespace/{warehouse}$db/exists",
            json={},
            headers={**auth, "X-Request-ID": "x" * 500},
            timeout=30,
        )
        leaky = json.dumps({"aws_secret_access_key": STORAGE_SECRET})
        requests.post(
            f"{served.uri}/v1/table/{warehouse}$db$t/create",
            params={"storage_options": leaky},
            data=b"not arrow",
            headers=auth,
            timeout=30,
        )
        requests.get(f"{served.uri}/v1/namespace/{TOKEN}/list", headers=auth, timeout=30)  # a secret in a path
        served.process.send_signal(signal.SIGTERM)
        served.process.wait(timeout=60)
        output = served.stderr()
    assert given.headers["X-Request-ID"] == "req-42.abc"
    generated = insane.headers["X-Request-ID"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)
    lines = [json.loads(line) for line in output.splitlines() if line.strip()]  # every line is JSON
    assert all({"time", "level", "logger", "message", "request_id"} <= line.keys() for line in lines)
    tagged = [line for line in lines if line["request_id"] == "req-42.abc"]
    assert {line["logger"] for line in tagged} == {"uvicorn.access", "lance_iceberg_ns.audit"}
    assert any(line["request_id"] == generated for line in lines)
    for secret in (TOKEN, STORAGE_SECRET, "catalog-side-token-xyz"):
        assert secret not in output


# --- configuration ------------------------------------------------------------------------------


def test_every_serve_option_has_a_variable() -> None:
    from lance_iceberg_ns.cli.serve import serve_command
    from lance_iceberg_ns.server.settings import variable_for

    own = [param for param in serve_command.params if param.name not in _COMMON and param.name != "help"]
    assert len(own) >= 14
    for param in own:
        if param.name == "auth_tokens":
            continue  # LANCE_ICEBERG_NS_AUTH_TOKEN, comma-separated (bearer_tokens)
        assert param.envvar == variable_for(param.opts[0]), param.name  # type: ignore[attr-defined]


_COMMON = {"catalog", "endpoint", "root", "properties", "property_files", "as_json", "debug", "delimiter"}


@pytest.fixture
def own_environment(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A copy of the environment that the test may change and a config file may add to."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("LANCE_ICEBERG")}
    monkeypatch.setattr(os, "environ", environment)
    return environment


def test_settings_come_from_variables_and_a_file_the_variables_winning(
    own_environment: dict[str, str], tmp_path: Path
) -> None:
    from lance_iceberg_ns.server.settings import ServeSettings

    config = tmp_path / "serve.env"
    config.write_text(
        "LANCE_ICEBERG_ENDPOINT=http://catalog.example:8181\n"
        "LANCE_ICEBERG_ROOT=/data/lance\n"
        "LANCE_ICEBERG_NS_DATA_THREADS=5\n"
        "LANCE_ICEBERG_NS_MAX_DATA_BODY_MB=7\n"
        "LANCE_ICEBERG_NS_LOG_FORMAT=json\n"
        f"LANCE_ICEBERG_NS_AUTH_TOKEN={TOKEN}\n"
    )
    own_environment.update({"LANCE_ICEBERG_NS_CONFIG_FILE": str(config), "LANCE_ICEBERG_NS_DATA_THREADS": "3"})
    settings = ServeSettings.from_environment()
    assert settings.properties["endpoint"] == "http://catalog.example:8181"
    assert (settings.data_threads, settings.max_data_body_bytes, settings.log_format) == (3, 7 * 1024 * 1024, "json")
    assert settings.auth_tokens == (TOKEN,)
    assert TOKEN not in repr(settings)


def test_a_config_file_missing_or_with_an_unknown_server_setting_is_a_usage_error(
    own_environment: dict[str, str], tmp_path: Path
) -> None:
    from lance_iceberg_ns.cli import main

    config = tmp_path / "serve.env"
    config.write_text("LANCE_ICEBERG_NS_DATA_THREDS=5\n")
    arguments = ["serve", "--endpoint", "http://127.0.0.1:9", "--config-file", str(config)]
    assert main(arguments) == 2
    assert main([*arguments[:-1], str(tmp_path / "missing.env")]) == 2


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_the_app_factory_reads_the_environment(own_environment: dict[str, str], endpoint: str, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    own_environment.update(
        {"LANCE_ICEBERG_ENDPOINT": endpoint, "LANCE_ICEBERG_ROOT": str(tmp_path), "LANCE_ICEBERG_NS_AUTH_TOKEN": TOKEN}
    )
    with TestClient(create_app_from_env()) as client:
        assert client.post("/v1/namespace/wh/exists", json={}).status_code == 401
        assert client.get("/healthz").status_code == 200
        ok = client.post("/v1/namespace/wh/exists", json={}, headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code in (200, 404)


def test_serve_takes_its_token_from_a_config_file(catalog_server: Any, tmp_path: Path, warehouse: str) -> None:
    config = tmp_path / "serve.env"
    config.write_text(f"LANCE_ICEBERG_NS_AUTH_TOKEN={TOKEN}\nLANCE_ICEBERG_NS_DATA_THREADS=2\n")
    env = {"LANCE_ICEBERG_NS_CONFIG_FILE": str(config)}
    with served_in_subprocess(catalog_server.endpoint, str(tmp_path), warehouse, env=env) as served:
        probe = f"{served.uri}/v1/namespace/{warehouse}/exists"
        assert requests.post(probe, json={}, timeout=10).status_code == 401
        authorized = requests.post(probe, json={}, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        assert authorized.status_code in (200, 404)
        assert TOKEN not in " ".join(served.process.args)  # type: ignore[arg-type]


# --- workers and shutdown -----------------------------------------------------------------------


def test_two_workers_serve_and_metrics_add_up_across_them(catalog_server: Any, tmp_path: Path, warehouse: str) -> None:
    with served_in_subprocess(
        catalog_server.endpoint, str(tmp_path), warehouse, extra_args=["--workers", "2"]
    ) as served:
        before = _samples(requests.get(f"{served.uri}/metrics", timeout=10).text)
        for _ in range(20):
            with requests.Session() as fresh:  # a new connection each: the kernel spreads them over the workers
                fresh.post(f"{served.uri}/v1/namespace/{warehouse}/describe", json={}, timeout=30)
        after = _samples(requests.get(f"{served.uri}/metrics", timeout=10).text)
        children = _children(served)
    assert len(children) >= 2, children
    # describe, not exists: the readiness probes ask exists, and a probe's count may land late
    counted = _value(after, "lance_iceberg_ns_requests_total", operation="describe_namespace")
    assert counted - _value(before, "lance_iceberg_ns_requests_total", operation="describe_namespace") == 20


# SIGQUIT at its default in the server: a shell without job control (a CI script's ``cmd &``)
# starts its background commands with SIGQUIT ignored, and the server then ignores it too.
QUIT_HEARD: dict[str, Any] = {"preexec_fn": lambda: signal.signal(signal.SIGQUIT, signal.SIG_DFL)}


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM, signal.SIGQUIT], ids=["SIGINT", "SIGTERM", "SIGQUIT"])
def test_two_workers_end_as_one_server_process_ends(
    catalog_server: Any, tmp_path: Path, warehouse: str, stop: signal.Signals
) -> None:
    """The supervisor of ``--workers`` stops its workers and then ends as one server process does:
    after Ctrl-C ``interrupted`` with exit 130, after SIGTERM or SIGQUIT by that signal (it exited
    0, as if the server had finished its work; SIGQUIT it ignored, and kept serving)."""
    with served_in_subprocess(
        catalog_server.endpoint, str(tmp_path), warehouse, extra_args=["--workers", "2"], popen_options=QUIT_HEARD
    ) as served:
        children = _children(served)
        served.process.send_signal(stop)
        code = served.process.wait(timeout=60)
        output = served.stderr()
    assert code == (130 if stop == signal.SIGINT else -stop), output
    assert output.rstrip().endswith("interrupted") == (stop == signal.SIGINT), output
    assert "Traceback" not in output, output
    assert len(children) >= 2, children
    deadline = time.monotonic() + 10
    while (running := [child for child in children if is_running(child)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running == [], f"left running after the supervisor ended: {running}"


def test_server_processes_end_when_their_supervisor_is_killed_outright(
    catalog_server: Any, tmp_path: Path, warehouse: str
) -> None:
    """SIGKILL ends the supervisor of ``--workers`` with no chance to stop its workers: they are
    told by the kernel and stop as after SIGTERM (they kept serving on the port, and the next
    start could not take it)."""
    with served_in_subprocess(
        catalog_server.endpoint, str(tmp_path), warehouse, extra_args=["--workers", "2"]
    ) as served:
        children = _children(served)
        served.process.kill()
        served.process.wait(timeout=60)
    assert len(children) >= 2, children
    deadline = time.monotonic() + 30
    while (running := [child for child in children if is_running(child)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running == [], f"left running after the supervisor was killed: {running}"


def test_ctrl_backslash_in_a_terminal_ends_a_server_with_workers(
    catalog_server: Any, tmp_path: Path, warehouse: str
) -> None:
    """A terminal's Ctrl-\\ sends SIGQUIT to the whole process group: the workers end at once, and
    the supervisor ends by that signal too, as one server process does. It ignored SIGQUIT and
    started the workers again."""
    with served_in_subprocess(
        catalog_server.endpoint,
        str(tmp_path),
        warehouse,
        extra_args=["--workers", "2"],
        popen_options={"start_new_session": True, **QUIT_HEARD},
    ) as served:
        workers = _workers(served)
        os.killpg(served.process.pid, signal.SIGQUIT)
        code = served.process.wait(timeout=60)
        output = served.stderr()
    assert code == -signal.SIGQUIT, output
    assert "Traceback" not in output, output
    assert "Received SIGQUIT, exiting." in output, output
    deadline = time.monotonic() + 10
    while (running := [pid for pid in workers if is_running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running == [], f"left running after the supervisor ended: {running}"


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sigquit_ignored_where_the_server_started_is_ignored_by_it(
    catalog_server: Any, tmp_path: Path, warehouse: str, workers: str
) -> None:
    """Started with SIGQUIT ignored, one server process goes on serving after a SIGQUIT, and so
    do a supervisor and its workers, which inherit the ignore (a worker ended on it, and was
    started again: its requests in flight were lost, and clients waited for the new one)."""
    ignore_quit = {"preexec_fn": lambda: signal.signal(signal.SIGQUIT, signal.SIG_IGN)}
    with served_in_subprocess(
        catalog_server.endpoint, str(tmp_path), warehouse, extra_args=["--workers", workers], popen_options=ignore_quit
    ) as served:
        served.process.send_signal(signal.SIGQUIT)
        quit_workers = _workers(served)
        for worker in quit_workers:
            os.kill(worker, signal.SIGQUIT)
        time.sleep(2)
        with requests.Session() as fresh:
            assert fresh.post(f"{served.uri}/v1/namespace/{warehouse}/exists", json={}, timeout=30).ok
        assert served.alive()
        assert [pid for pid in quit_workers if not is_running(pid)] == [], served.stderr()


def test_a_worker_that_cannot_start_stops_the_server_instead_of_restarting_forever(
    catalog_server: Any, tmp_path: Path, warehouse: str
) -> None:
    """A worker that cannot build the app would fail the same way on every restart (here: the
    metrics directory was deleted under the server, and a worker killed). uvicorn started it again
    forever, with a traceback each time; now the worker ends with the code uvicorn takes for a
    failed start, and the server stops its workers and fails as one process that cannot start
    does: exit 1, one line, the worker's own error once."""
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    marked = f"PROMETHEUS_MULTIPROC_DIR={metrics}".encode()
    with served_in_subprocess(
        catalog_server.endpoint,
        str(tmp_path),
        warehouse,
        extra_args=["--workers", "2"],
        env={"PROMETHEUS_MULTIPROC_DIR": str(metrics)},
    ) as served:
        workers = _workers(served)
        assert len(workers) == 2 and len(_processes_with(marked)) >= 3  # the parent and its workers
        deadline = time.monotonic() + 60  # both workers have built their app (their metrics files are there)
        while not all(list(metrics.glob(f"*_{worker}.db")) for worker in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        shutil.rmtree(metrics)
        os.kill(workers[0], signal.SIGKILL)  # killed by a signal: started again, and this one cannot start
        code = served.process.wait(timeout=90)
        output = served.stderr()
    assert code == 1, output
    assert (
        output.rstrip().splitlines()[-1] == "error: A worker could not build the app (its error is above): not serving"
    )
    assert output.count("Traceback") == 1 and "This worker could not build the app" in output, output
    deadline = time.monotonic() + 10
    while (left := _processes_with(marked)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == []  # no worker left behind


def test_one_server_process_that_cannot_build_the_app_fails_in_one_line(catalog_server: Any, tmp_path: Path) -> None:
    """Without ``--workers`` the app is built by the command itself: a failure there is the
    command's one line and exit code, never a worker's exit code 3 and traceback (here: the disk
    is full as the app is built)."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        "import errno\n"
        "import lance_iceberg_ns.server.app as app\n"
        "def full(*arguments, **options):\n"
        "    raise OSError(errno.ENOSPC, 'No space left on device')\n"
        "app.create_app = full\n"
    )
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hooks), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "lance_iceberg_ns.cli", "serve", "--endpoint", catalog_server.endpoint]
    command += ["--root", str(tmp_path), "--port", "0"]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert (
        done.stderr.strip()
        == "error: unexpected OSError: [Errno 28] No space left on device (run with --debug for details)"
    )


def test_a_process_manager_stops_workers_that_cannot_build_the_app(tmp_path: Path) -> None:
    """Under a process manager of your own (here uvicorn's, with ``create_app_from_env``), a worker
    that cannot build the app says why and ends with the code the manager takes for a failed start
    (3): the manager stops, where it used to start the worker again forever."""
    environment = {
        **os.environ,
        "LANCE_ICEBERG_ENDPOINT": "http://127.0.0.1:9",
        "LANCE_ICEBERG_ROOT": str(tmp_path),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "missing"),
    }
    factory = "lance_iceberg_ns.server:create_app_from_env"
    command = [sys.executable, "-m", "uvicorn", "--factory", factory, "--workers", "2", "--port", str(free_port())]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=120)
    assert "is not a directory this server can write" in done.stderr, done.stderr
    assert "failed to start, stopping the parent process" in done.stderr, done.stderr
    assert done.stderr.count("This worker could not build the app") <= 2, done.stderr  # once per worker at most


def _processes_with(variable: bytes) -> list[int]:
    """The running processes whose environment holds ``variable`` (``NAME=value``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and is_running(int(entry.name)):
            with contextlib.suppress(OSError):
                if variable in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
    return found


def test_a_worker_killed_by_a_signal_is_started_again(catalog_server: Any, tmp_path: Path, warehouse: str) -> None:
    with served_in_subprocess(
        catalog_server.endpoint, str(tmp_path), warehouse, extra_args=["--workers", "2"]
    ) as served:
        killed = _workers(served)[0]
        os.kill(killed, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while (len(workers := _workers(served)) < 2 or killed in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert killed not in workers and len(workers) == 2, workers
        for _ in range(10):  # each on a new connection, whichever worker takes it
            with requests.Session() as fresh:
                assert fresh.post(f"{served.uri}/v1/namespace/{warehouse}/exists", json={}, timeout=30).ok
        assert served.alive()


def test_workers_that_take_longer_than_uvicorns_five_seconds_to_start_still_serve(
    catalog_server: Any, tmp_path: Path, warehouse: str
) -> None:
    """On a loaded host a worker's imports took 8.7 s, and uvicorn killed every worker that had not
    answered within 5 s: the port was bound, and clients hung. Every process here (the parent and
    each worker) takes 7 s more to start."""
    slow = tmp_path / "slow_start"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text("import time\ntime.sleep(7)\n")
    path = os.pathsep.join([str(slow), *filter(None, [os.environ.get("PYTHONPATH")])])
    with served_in_subprocess(
        catalog_server.endpoint, str(tmp_path), warehouse, extra_args=["--workers", "2"], env={"PYTHONPATH": path}
    ) as served:
        workers = _workers(served)
        assert len(workers) == 2
        assert requests.post(f"{served.uri}/v1/namespace/{warehouse}/exists", json={}, timeout=30).ok
        time.sleep(6)  # a health check or more of each worker
        assert _workers(served) == workers and "died" not in served.stderr(), served.stderr()


def test_workers_that_end_before_they_answer_are_started_again_at_once(
    catalog_server: Any, tmp_path: Path, warehouse: str
) -> None:
    """The supervisor waits for a starting worker's first answer (after its imports). A worker
    that ended meanwhile held that wait, and with it every restart, for the whole health-check
    timeout, while no worker served: uvicorn's supervisor kept its own copy of the worker's end
    of the pipe, so the wait never saw the end. Each worker here takes 10 s to start."""
    with _served_with_slow_workers(catalog_server.endpoint, tmp_path, warehouse, seconds=10) as served:
        deadline = time.monotonic() + 60
        while len(starting := _workers(served)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(starting) == 2, served.stderr()
        time.sleep(1.5)  # the supervisor is waiting for the first one's answer
        for worker in starting:
            os.kill(worker, signal.SIGKILL)
        killed = time.monotonic()
        while len(started_again := [pid for pid in _workers(served) if pid not in starting]) < 2:
            assert time.monotonic() < killed + 30, served.stderr()
            time.sleep(0.1)
        took = time.monotonic() - killed
        assert took < 5 and set(_workers(served)) == set(started_again), f"started again {took:.1f} s after they ended"
        deadline = time.monotonic() + 90  # and they serve, once started (the port refused until then)
        while not answers(served):
            assert time.monotonic() < deadline, served.stderr()
            time.sleep(0.2)


def test_the_port_opens_when_a_worker_can_answer_and_the_address_is_printed_then(
    catalog_server: Any, tmp_path: Path, warehouse: str
) -> None:
    """While the workers start, a client is refused (and may retry elsewhere) instead of waiting on
    a port that no process answers; the address is printed once a worker answers on it. Each
    worker here takes 8 s to start."""
    with _served_with_slow_workers(catalog_server.endpoint, tmp_path, warehouse, seconds=8) as served:
        printed: dict[str, Any] = {}

        def read_the_address() -> None:
            assert served.process.stdout is not None
            printed["line"] = served.process.stdout.readline().decode()
            try:  # at once, as a script that waits for the line does
                printed["status"] = requests.post(served.probe_url, json={}, timeout=(1, 5)).status_code
            except requests.RequestException as exc:
                printed["status"] = exc

        reader = threading.Thread(target=read_the_address, daemon=True)
        reader.start()
        refused = 0
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                answered = requests.post(served.probe_url, json={}, timeout=(1, 5))
            except requests.ReadTimeout:
                pytest.fail(f"a connection was taken and not answered:\n{served.stderr()}")
            except requests.ConnectionError:
                refused += 1
                time.sleep(0.2)
                continue
            assert answered.ok
            break
        reader.join(10)
    assert refused > 0  # the workers were still starting
    assert printed["line"].startswith(f"Lance REST Namespace on {served.uri} "), printed
    assert printed["status"] == 200, printed


@contextlib.contextmanager
def _served_with_slow_workers(endpoint: str, tmp_path: Path, warehouse: str, seconds: float) -> Iterator[ServedProcess]:
    """``serve --workers 2`` whose workers each take ``seconds`` more to start (as on a loaded
    host), started and not waited for; its stdout a pipe."""
    slow = tmp_path / "slow_workers"
    slow.mkdir()  # multiprocessing starts each worker with --multiprocessing-fork
    (slow / "sitecustomize.py").write_text(
        f"import sys, time\nif '--multiprocessing-fork' in sys.orig_argv:\n    time.sleep({seconds})\n"
    )
    path = os.pathsep.join([str(slow), *filter(None, [os.environ.get("PYTHONPATH")])])
    with served_in_subprocess(
        endpoint,
        str(tmp_path),
        warehouse,
        extra_args=["--workers", "2"],
        env={"PYTHONPATH": path},
        popen_options={"stdout": subprocess.PIPE},
        wait=False,
    ) as served:
        yield served


def _workers(served: ServedProcess) -> list[int]:
    """The worker processes of ``serve --workers`` (not multiprocessing's resource tracker)."""
    running = [pid for pid in _children(served) if is_running(pid)]
    return [pid for pid in running if b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes()]


def _children(served: ServedProcess) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(served.process.pid)], capture_output=True, text=True, check=False)
    return [int(pid) for pid in found.stdout.split()]


def _slow_request(served: ServedProcess, outcome: dict[str, Any], readiness: bool = False) -> threading.Thread:
    """A request that waits on the catalog, on a thread: a Lance operation, or a readiness probe."""

    def ask() -> None:
        try:
            if readiness:
                answer = requests.get(f"{served.uri}/readyz", timeout=60)
            else:
                answer = requests.post(f"{served.uri}/v1/namespace/wh$slow/exists", json={}, timeout=60)
            outcome["status"] = answer.status_code
            outcome["body"] = answer.json() if answer.status_code != 200 else None
        except requests.RequestException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    time.sleep(1.0)  # the request is in flight, waiting for the catalog
    return thread


def _stopped_with_a_request_in_flight(
    tmp_path: Path,
    catalog_delay: float,
    graceful_timeout: float,
    signals: list[signal.Signals],
    readiness: bool = False,
) -> tuple[dict[str, Any], int, float, str]:
    """Serve, send a request that waits ``catalog_delay`` s on the catalog (a readiness probe with
    ``readiness``), then ``signals`` one second apart: the request's outcome, the exit code, how
    long the stop took and the log."""
    catalog = ScriptedCatalog(delay=catalog_delay)
    try:
        extra = ["--graceful-timeout", str(graceful_timeout)]
        with served_in_subprocess(catalog.endpoint, str(tmp_path), "wh", extra_args=extra) as served:
            if readiness:  # the probe asks the catalog once the answer it had at the start is stale
                time.sleep(PROBE_EVERY_SECONDS)
                catalog.config_delay = catalog_delay
            outcome: dict[str, Any] = {}
            asking = _slow_request(served, outcome, readiness)
            stopping = time.monotonic()
            for index, stop in enumerate(signals):
                time.sleep(1.0 if index else 0)  # a second signal: the graceful stop is under way
                served.process.send_signal(stop)
            code = served.process.wait(timeout=30)
            took = time.monotonic() - stopping
            asking.join(10)
            output = served.stderr()
    finally:
        catalog.close()
    return outcome, code, took, output


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_lets_a_request_in_flight_finish_within_the_graceful_timeout(
    tmp_path: Path, stop: signal.Signals
) -> None:
    outcome, code, _, output = _stopped_with_a_request_in_flight(tmp_path, 3.0, 20, [stop])
    assert outcome.get("status") == 200, outcome  # answered before the process left
    # uvicorn stops, then lets the signal end the process, as asked (Ctrl-C: "interrupted", exit 130)
    assert code in ((0, -stop) if stop == signal.SIGTERM else (130,))
    assert "Finished server process" in output and "Traceback" not in output


@pytest.mark.parametrize(
    ("stop", "readiness"),
    [(signal.SIGTERM, False), (signal.SIGINT, False), (signal.SIGINT, True)],
    ids=["SIGTERM", "SIGINT", "SIGINT-readiness-probe"],
)
def test_a_stop_cuts_off_a_request_that_outlasts_the_graceful_timeout(
    tmp_path: Path, stop: signal.Signals, readiness: bool
) -> None:
    graceful_timeout = 0 if readiness else 1  # a probe gives up on the catalog after 2 s of its own
    outcome, code, took, output = _stopped_with_a_request_in_flight(tmp_path, 40.0, graceful_timeout, [stop], readiness)
    assert took < 10, f"the server took {took:.1f} s to stop with a {graceful_timeout} s graceful timeout"
    # the client cut off hears so, in the spec's error body; the log says so in one line
    assert outcome.get("status") == 500 and outcome["body"]["code"] == 18, outcome
    assert "whether it took effect is unknown" in outcome["body"]["error"], outcome
    assert "Cut off by the server's stop" in output and "Traceback" not in output, output
    if stop == signal.SIGINT:
        assert code == 130 and output.rstrip().endswith("interrupted"), output


def test_ctrl_c_twice_forces_the_stop_quietly(tmp_path: Path) -> None:
    """The second Ctrl-C during a graceful stop forces it (uvicorn's "CTRL+C to force quit"): the
    request in flight is cut off with the spec's error body, and the log has no traceback."""
    outcome, code, took, output = _stopped_with_a_request_in_flight(tmp_path, 40.0, 20, [signal.SIGINT] * 2)
    assert took < 10, f"the server took {took:.1f} s to stop when forced"
    assert outcome.get("status") == 500 and outcome["body"]["code"] == 18, outcome
    assert code == 130 and output.rstrip().endswith("interrupted"), output
    assert "Cut off by the server's stop" in output and "Traceback" not in output, output


def _stopping_app(lifespan_events: list[str], cleanup_fails: bool = False) -> Any:
    """The server's error middleware on an app with a lifespan of its own and a route that never
    finishes, for a stop driven by hand: uvicorn's messages, as its graceful stop sends them."""
    import asyncio
    from contextlib import asynccontextmanager

    from starlette.applications import Starlette
    from starlette.routing import Route

    from lance_iceberg_ns.server.responses import EveryFailureAnswered

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        lifespan_events.append("startup")
        try:
            yield
        finally:
            lifespan_events.append("shutdown")
            if cleanup_fails:
                raise RuntimeError("cleanup failed")

    async def forever(request: Any) -> Any:
        await asyncio.sleep(600)

    return EveryFailureAnswered(Starlette(routes=[Route("/slow", forever)], lifespan=lifespan))


def test_the_shutdown_step_waits_for_cut_off_answers_within_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The app's shutdown runs once the requests cut off have sent their answers, or once their
    time to do so (``CUT_OFF_ANSWERS_SECONDS``) is up; the app's own lifespan still runs; a forced
    stop's cancel of the lifespan is no failure."""
    import asyncio

    from lance_iceberg_ns.server import responses

    monkeypatch.setattr(responses, "CUT_OFF_ANSWERS_SECONDS", 0.3)
    http_scope = {"type": "http", "method": "GET", "path": "/slow", "raw_path": b"/slow", "headers": [],
                  "query_string": b"", "http_version": "1.1", "scheme": "http", "root_path": "",
                  "server": ("127.0.0.1", 1), "client": ("127.0.0.1", 2)}  # fmt: skip

    async def stop(send_takes: float) -> tuple[list[str], list[str]]:
        lifespan_events: list[str] = []
        app, order, steps = _stopping_app(lifespan_events), [], asyncio.Queue()  # type: ignore[var-annotated]

        async def answer_sent(message: dict[str, Any]) -> None:
            await asyncio.sleep(send_takes)  # a client slow to take the answer
            order.append(message["type"])

        async def request_body() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def lifespan_sent(message: dict[str, Any]) -> None:
            order.append(message["type"])

        lifespan = asyncio.ensure_future(app({"type": "lifespan"}, steps.get, lifespan_sent))
        await steps.put({"type": "lifespan.startup"})
        request = asyncio.ensure_future(app(dict(http_scope), request_body, answer_sent))
        await asyncio.sleep(0.05)
        request.cancel()  # the graceful timeout is up
        await steps.put({"type": "lifespan.shutdown"})
        await asyncio.wait_for(lifespan, 5)
        await asyncio.wait_for(request, 5)  # the request's task ends too
        return order, lifespan_events

    order, lifespan_events = asyncio.run(stop(send_takes=0.05))
    assert order == ["lifespan.startup.complete", "http.response.start", "http.response.body",
                     "lifespan.shutdown.complete"], order  # fmt: skip
    assert lifespan_events == ["startup", "shutdown"]
    order, _ = asyncio.run(stop(send_takes=60))  # a client that never takes it: not past the bound
    assert order == ["lifespan.startup.complete", "lifespan.shutdown.complete"], order

    async def forced(cleanup_fails: bool) -> list[str]:
        sent: list[str] = []

        async def never() -> dict[str, Any]:
            await asyncio.sleep(600)
            return {}

        async def lifespan_sent(message: dict[str, Any]) -> None:
            sent.append(message["type"])

        started = asyncio.Event()

        async def first_startup() -> dict[str, Any]:
            if started.is_set():
                return await never()
            started.set()
            return {"type": "lifespan.startup"}

        app = _stopping_app([], cleanup_fails)
        lifespan = asyncio.ensure_future(app({"type": "lifespan"}, first_startup, lifespan_sent))
        await asyncio.sleep(0.05)
        lifespan.cancel()  # Ctrl-C twice: uvicorn skips the shutdown step, and Python cancels the task
        with pytest.raises(RuntimeError, match="cleanup failed") if cleanup_fails else contextlib.nullcontext():
            await lifespan  # ends quietly, unless the app's own cleanup failed
        return sent

    assert asyncio.run(forced(False)) == ["lifespan.startup.complete"]  # no "shutdown.failed" traceback
    assert asyncio.run(forced(True)) == ["lifespan.startup.complete", "lifespan.shutdown.failed"]  # reported


def test_a_client_that_does_not_read_its_answers_does_not_hold_up_ctrl_c(tmp_path: Path) -> None:
    """A client pipelines requests and never reads: the answers fill the connection, and the cut-off
    answer of its last request cannot be sent. Ctrl-C still ends the server (it waited on that
    client until the client closed)."""
    catalog = ScriptedCatalog(delay=40.0)
    try:
        extra = ["--graceful-timeout", "1"]
        with served_in_subprocess(catalog.endpoint, str(tmp_path), "wh", extra_args=extra) as served:
            port = int(served.uri.rsplit(":", 1)[1])
            with socket.socket() as client:
                client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
                client.connect(("127.0.0.1", port))
                client.sendall(
                    b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n" * 14
                    + b"POST /v1/namespace/wh$slow/exists HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
                )
                time.sleep(1.5)  # the answers have filled the connection; the last request waits on the catalog
                served.process.send_signal(signal.SIGINT)
                code = served.process.wait(timeout=30)
            output = served.stderr()
    finally:
        catalog.close()
    assert code == 130 and output.rstrip().endswith("interrupted"), output
    assert "Traceback" not in output, output


@pytest.mark.parametrize("case", ["stderr_reader_gone", "sigint_ignored_at_start"])
def test_ctrl_c_leaves_at_once_though_stderr_is_gone_or_sigint_was_ignored(tmp_path: Path, case: str) -> None:
    """``serve 2>&1 | tee log`` (Ctrl-C ends tee too: the interrupted line has nowhere to go), and a
    server started with SIGINT ignored (``serve &`` from a script; uvicorn still stops on it): the
    process leaves once stopped, though a request it cut off still waits on the catalog."""
    catalog = ScriptedCatalog(delay=40.0)
    options: dict[str, Any] = {"stderr": subprocess.PIPE} if case == "stderr_reader_gone" else {}
    if case == "sigint_ignored_at_start":
        options["preexec_fn"] = lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        extra = ["--graceful-timeout", "1"]
        with served_in_subprocess(
            catalog.endpoint, str(tmp_path), "wh", extra_args=extra, popen_options=options
        ) as served:
            _slow_request(served, {})
            if served.process.stderr is not None:
                served.process.stderr.close()
            stopping = time.monotonic()
            served.process.send_signal(signal.SIGINT)
            code = served.process.wait(timeout=30)
            took = time.monotonic() - stopping
    finally:
        catalog.close()
    assert took < 10, f"the server took {took:.1f} s to stop with a 1 s graceful timeout"
    assert code == (130 if case == "stderr_reader_gone" else 0)


# --- the Docker image and the compose service ----------------------------------------------------


def _compose_service() -> dict[str, Any]:
    compose = yaml.safe_load((ROOT / "compose" / "docker-compose.yml").read_text())
    return compose["services"]["lance-rest"]  # type: ignore[no-any-return]


def test_the_dockerfile_and_the_compose_service_agree_with_the_cli() -> None:
    from lance_iceberg_ns.cli.base import CliState
    from lance_iceberg_ns.cli.serve import serve_command
    from lance_iceberg_ns.server.settings import AUTH_TOKEN_VARIABLE

    service = _compose_service()
    dockerfile_path = ROOT / "compose" / service["build"]["context"] / service["build"]["dockerfile"]
    dockerfile = dockerfile_path.read_text()
    assert re.search(r'^ENTRYPOINT \["lance-iceberg-ns", "serve"\]', dockerfile, re.MULTILINE)
    port = re.search(r"^ENV LANCE_ICEBERG_NS_PORT=(\d+)", dockerfile, re.MULTILINE)
    assert port and re.search(rf"^EXPOSE {port[1]}$", dockerfile, re.MULTILINE)
    assert "/healthz" in dockerfile and "/readyz" in " ".join(service["healthcheck"]["test"])
    assert any(mapping.endswith(f":{port[1]}") for mapping in service["ports"])
    serve_variables = {param.envvar for param in serve_command.params if isinstance(param.envvar, str)}
    serve_variables.add(AUTH_TOKEN_VARIABLE)
    named = set(service["environment"]) | set(re.findall(r"^ENV (LANCE_ICEBERG_NS_\w+)=", dockerfile, re.MULTILINE))
    for name in named:
        assert not name.startswith("LANCE_ICEBERG_NS_") or name in serve_variables, name
    for name, value in service["environment"].items():  # a token is never written in the file itself
        assert "TOKEN" not in name or str(value).startswith("${"), name
    context = serve_command.make_context("serve", list(service.get("command", [])), obj=CliState())
    assert context.params["workers"] >= 1  # the command parses as serve options
    dockerignore = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in dockerignore or ".venv/" in dockerignore


@pytest.mark.docker
def test_the_image_builds_and_serves() -> None:
    available, reason = docker_available()
    if not available:
        pytest.skip(f"building the image needs Docker: {reason}")
    tag = f"lance-iceberg-ns-test:{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "build", "-t", tag, "-f", "docker/Dockerfile", "."], cwd=ROOT, check=True, timeout=1800)
    try:
        port = free_port()
        run = ["docker", "run", "-d", "--rm", "-p", f"127.0.0.1:{port}:2333", "-e", "LANCE_ICEBERG_NS_CATALOG_WAIT=0"]
        run += ["-e", f"LANCE_ICEBERG_NS_AUTH_TOKEN={TOKEN}"]  # it listens on every address: a token it needs
        container = subprocess.run(
            [*run, "-e", "LANCE_ICEBERG_ENDPOINT=http://127.0.0.1:9", tag], capture_output=True, text=True, check=True
        ).stdout.strip()
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    assert requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
                    break
                except requests.ConnectionError:
                    assert time.monotonic() < deadline
                    time.sleep(1)
            assert requests.get(f"http://127.0.0.1:{port}/readyz", timeout=10).status_code == 503
        finally:
            subprocess.run(["docker", "stop", container], check=False, timeout=60)
    finally:
        subprocess.run(["docker", "rmi", tag], check=False, timeout=120)


def test_the_deploying_page_names_every_metric_and_is_in_the_site() -> None:
    page = (ROOT / "docs" / "deploying.md").read_text()
    for name in METRIC_NAMES:
        assert name in page
    assert "deploying.md" in (ROOT / "mkdocs.yml").read_text()
