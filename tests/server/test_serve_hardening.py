"""``serve`` refusing what would leave it open or mislead its operator: a config file read strictly
and kept out of every environment, no anonymous server other machines can reach unless asked,
``/metrics`` behind a token when tokens are forwarded, ``/readyz`` that no flood can turn against
the other routes, an audit line naming what was acted on, and JSON logs that stay JSON.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests
from lance_namespace.errors import ServiceUnavailableError, UnauthenticatedError

from lance_iceberg_ns.cli.serving import environment_kept
from lance_iceberg_ns.server import serve_in_background
from lance_iceberg_ns.server.observability import (
    TOKEN_CHECK_BURST,
    TOKEN_CHECKS_PER_SECOND,
    TOKEN_VERDICT_SECONDS,
    CatalogTokenChecks,
)

from ..helpers import data_workers_ready
from ..liveness import served_in_subprocess
from ..stubs import CONFIG_ANSWER, JsonHandler, StubServer

TOKEN = "tok-" + "5" * 24
CATALOG_SECRET = "catalog-secret-" + "3" * 16
ARROW = {"content-type": "application/vnd.apache.arrow.stream"}


@pytest.fixture
def own_environment(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A copy of the environment without LANCE_ICEBERG_* that the code under test may change."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("LANCE_ICEBERG")}
    monkeypatch.setattr(os, "environ", environment)
    return environment


def _serve(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str]:
    """``serve``'s exit code and what it wrote to stderr (it stops before serving in every test)."""
    from lance_iceberg_ns.cli import main

    capsys.readouterr()
    code = main(["serve", "--endpoint", "http://127.0.0.1:9", "--port", "0", "--catalog-wait", "0.3", *arguments])
    return code, capsys.readouterr().err


# --- --config-file ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "lance_iceberg_ns_auth_token=s3cret-value",
        'LANCE_ICEBERG_NS_AUTH_TOKEN="s3cret-value',
        "LANCE_ICEBERG_NS_AUTH_TOKEN",
        "LANCE_ICEBERG_NS_AUTH_TOKEN: s3cret-value",
        "LANCE_ICEBERG_ROTT=s3cret-value",
        "s3cret-value",  # a token without its name
        "LANCE_ICEBERG_NS_DATA_THREADS=4",  # twice
    ],
)
def test_a_config_file_line_that_is_not_exactly_a_setting_stops_serve_naming_its_line(
    own_environment: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path, line: str
) -> None:
    config = tmp_path / "serve.env"
    config.write_text(f"# the server's settings\nLANCE_ICEBERG_NS_DATA_THREADS=2\n{line}\n")
    code, stderr = _serve(capsys, "--config-file", str(config), "--root", str(tmp_path))
    assert code == 2, stderr
    assert "line 3" in stderr and "s3cret" not in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert not [key for key in own_environment if key.startswith("LANCE_ICEBERG")]


def test_a_bad_value_from_the_config_file_is_said_to_come_from_it(
    own_environment: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "serve.env"
    config.write_text("LANCE_ICEBERG_NS_DATA_THREADS=many\n")
    code, stderr = _serve(capsys, "--config-file", str(config), "--root", str(tmp_path))
    assert code == 2 and "'--data-threads'" in stderr and stderr.rstrip().endswith("(set in --config-file)"), stderr
    own_environment["LANCE_ICEBERG_NS_DATA_THREADS"] = "many"  # the variable: no such note
    code, stderr = _serve(capsys, "--root", str(tmp_path))
    assert code == 2 and "'--data-threads'" in stderr and "--config-file" not in stderr, stderr


def test_a_config_file_sets_nothing_in_the_environment(own_environment: dict[str, str], tmp_path: Path) -> None:
    from lance_iceberg_ns.server.settings import ServeSettings

    config = tmp_path / "serve.env"
    config.write_text(
        "LANCE_ICEBERG_ENDPOINT=http://catalog.example:8181\n"
        f"LANCE_ICEBERG_ROOT={tmp_path}\n"
        f"LANCE_ICEBERG_AUTH_TOKEN={CATALOG_SECRET}\n"
        f"LANCE_ICEBERG_NS_AUTH_TOKEN={TOKEN}\n"
        "LANCE_ICEBERG_NS_FORWARD_BEARER_TOKEN=true\n"
    )
    own_environment["LANCE_ICEBERG_NS_CONFIG_FILE"] = str(config)
    before = dict(own_environment)
    settings = ServeSettings.from_environment()
    assert settings.auth_tokens == (TOKEN,) and settings.forward_bearer_token
    assert settings.properties["auth_token"] == CATALOG_SECRET  # reaches the bridge in the settings
    assert settings.properties["endpoint"] == "http://catalog.example:8181"
    assert own_environment == before  # nothing set, for a worker or a subprocess to inherit


def test_no_worker_inherits_a_secret_from_the_config_file(endpoint: str, tmp_path: Path, warehouse: str) -> None:
    config = tmp_path / "serve.env"
    config.write_text(f"LANCE_ICEBERG_NS_AUTH_TOKEN={TOKEN}\nLANCE_ICEBERG_AUTH_TOKEN={CATALOG_SECRET}\n")
    extra = ["--config-file", str(config), "--workers", "2"]
    with served_in_subprocess(endpoint, str(tmp_path), warehouse, extra_args=extra) as served:
        probe = f"{served.uri}/v1/namespace/{warehouse}/exists"
        assert requests.post(probe, json={}, timeout=10).status_code == 401  # the file's token is required
        found = subprocess.run(["pgrep", "-P", str(served.process.pid)], capture_output=True, text=True)
        processes = [served.process.pid, *map(int, found.stdout.split())]
        environments = [Path(f"/proc/{pid}/environ").read_bytes() for pid in processes]
    assert len(processes) >= 3  # the parent and two workers (and the resource tracker)
    for environment in environments:
        assert TOKEN.encode() not in environment and CATALOG_SECRET.encode() not in environment


# --- Lance's runtime -------------------------------------------------------------------------------


@pytest.mark.parametrize("given", [None, "3"])
def test_workers_run_lance_with_a_core_left_to_python(
    endpoint: str, tmp_path: Path, warehouse: str, monkeypatch: pytest.MonkeyPatch, given: str | None
) -> None:
    """``serve`` gives Lance's async runtime one worker thread fewer than the cores (at least one),
    unless the operator set ``TOKIO_WORKER_THREADS``: seen in the environment the workers inherit."""
    if given is None:
        monkeypatch.delenv("TOKIO_WORKER_THREADS", raising=False)
    else:
        monkeypatch.setenv("TOKIO_WORKER_THREADS", given)
    with served_in_subprocess(endpoint, str(tmp_path), warehouse, extra_args=["--workers", "2"]) as served:
        found = subprocess.run(["pgrep", "-P", str(served.process.pid)], capture_output=True, text=True)
        children = map(int, found.stdout.split())
        environments = [Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") for pid in children]
    expected = given or str(max(1, len(os.sched_getaffinity(0)) - 1))
    assert len(environments) >= 2
    assert all(f"TOKIO_WORKER_THREADS={expected}".encode() in environment for environment in environments)


def test_what_serving_sets_is_put_back_as_it_was(own_environment: dict[str, str]) -> None:
    """The variables serving sets for Lance and its workers: each as before once it stops, set,
    unset or changed meanwhile, and when serving fails."""
    own_environment["TOKIO_WORKER_THREADS"] = "3"
    own_environment.pop("PROMETHEUS_MULTIPROC_DIR", None)
    own_environment.pop("LANCE_LOG", None)
    before = dict(own_environment)
    with pytest.raises(RuntimeError), environment_kept():
        own_environment["TOKIO_WORKER_THREADS"] = "1"
        own_environment["PROMETHEUS_MULTIPROC_DIR"] = "/tmp/metrics"
        own_environment["LANCE_LOG"] = "error"
        raise RuntimeError("serving failed")
    assert own_environment == before


@pytest.mark.parametrize("given", [None, "3"])
def test_serve_in_process_leaves_the_environment_as_it_found_it(
    own_environment: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path, given: str | None
) -> None:
    """``serve`` sets Lance's worker count for itself; called in a process that goes on (a test, a
    notebook), that process's environment is as before once it has stopped (here: no catalog)."""
    own_environment.pop("TOKIO_WORKER_THREADS", None)
    if given is not None:
        own_environment["TOKIO_WORKER_THREADS"] = given
    before = dict(own_environment)
    code, stderr = _serve(capsys, "--root", str(tmp_path))
    assert code == 5, stderr  # it got as far as waiting for the catalog
    assert own_environment == before


@contextlib.contextmanager
def _logging_kept() -> Iterator[None]:
    """The process's logging as it was: ``serve`` configures it for itself, as a command does, and
    here its handlers would write to the stream pytest captured for one test."""
    loggers = [
        logging.root,
        *(each for each in logging.Logger.manager.loggerDict.values() if isinstance(each, logging.Logger)),
    ]
    kept = [(each, each.handlers[:], each.level, each.propagate, each.disabled) for each in loggers]
    try:
        yield
    finally:
        for each, handlers, level, propagate, disabled in kept:
            each.handlers[:], each.level, each.propagate, each.disabled = handlers, level, propagate, disabled


def test_serve_with_workers_in_process_serves_stops_and_puts_back_what_it_set(
    endpoint: str, warehouse: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``serve --workers 2`` called in a process that goes on (a notebook, a test): its workers
    answer, Ctrl-C (SIGINT to the process) stops it with exit 130, its workers are gone and its
    port free, and the process's environment and signal handlers are as they were (the supervisor
    replaces the handlers, and serving sets the variables its workers inherit)."""
    from lance_iceberg_ns.cli import main
    from lance_iceberg_ns.cli.serving import SERVING_VARIABLES

    from ..liveness import free_port

    for name in SERVING_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANCE_LOG", "warn")  # one set by the caller stays as it was
    environment = {name: os.environ.get(name) for name in SERVING_VARIABLES}
    stopping = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP)
    handlers = {sig: signal.getsignal(sig) for sig in stopping}
    port, answers = free_port(), []
    returned, interrupting = threading.Event(), threading.Lock()

    def ask_then_interrupt() -> None:  # never after serve returned: the SIGINT would end the test session
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(answers) < 4 and not returned.is_set():
            with contextlib.suppress(requests.RequestException), requests.Session() as fresh:
                answer = fresh.post(f"http://127.0.0.1:{port}/v1/namespace/{warehouse}/exists", json={}, timeout=10)
                answers.append(answer.status_code)
                continue
            time.sleep(0.2)
        with interrupting:
            if not returned.is_set():
                os.kill(os.getpid(), signal.SIGINT)

    asking = threading.Thread(target=ask_then_interrupt, daemon=True)
    asking.start()
    arguments = ["--endpoint", endpoint, "--root", str(tmp_path / "lance"), "--port", str(port), "--workers", "2"]
    with _logging_kept():
        try:
            code = main(["serve", *arguments])
        finally:
            with interrupting:
                returned.set()
    asking.join(10)
    stderr = capsys.readouterr().err
    assert answers == [200] * 4, stderr
    assert code == 130, stderr
    assert stderr.rstrip().endswith("interrupted"), stderr
    assert multiprocessing.active_children() == []
    with socket.socket() as listener:  # nothing listens there any more
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
    assert {name: os.environ.get(name) for name in SERVING_VARIABLES} == environment
    assert {sig: signal.getsignal(sig) for sig in stopping} == handlers


@pytest.mark.parametrize(
    ("name", "made"),
    [
        ("PROMETHEUS_MULTIPROC_DIR", None),
        ("PROMETHEUS_MULTIPROC_DIR", "file"),
        ("PROMETHEUS_MULTIPROC_DIR", "empty"),
        ("PROMETHEUS_MULTIPROC_DIR", "dangling"),
        ("prometheus_multiproc_dir", None),
    ],
)
def test_a_metrics_directory_that_is_not_one_is_a_usage_error(
    own_environment: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, made: str | None
) -> None:
    """prometheus-client's multiprocess mode, on whenever the variable is set, needs it to name a
    directory already: anything else was an unexpected FileNotFoundError at its first metric, and
    an empty value wrote the metrics files into the working directory."""
    given = "" if made == "empty" else str(tmp_path / "metrics")
    if made == "file":
        Path(given).write_text("")
    if made == "dangling":
        Path(given).symlink_to(tmp_path / "gone")
    for variable in ("PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir"):
        own_environment.pop(variable, None)
    own_environment[name] = given
    code, stderr = _serve(capsys, "--root", str(tmp_path), "--workers", "2")
    assert code == 2, stderr
    expected = f"{name}={given} is not a directory this server can write: make it (empty), or unset the variable"
    assert stderr.strip() == f"error: {expected}"


@pytest.mark.parametrize("given", ["abc", "", "0", "-1", " 2", "100000", "²"])
def test_a_lance_worker_count_tokio_cannot_take_stops_serve_before_it_serves(
    own_environment: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path, given: str
) -> None:
    """tokio panics on a ``TOKIO_WORKER_THREADS`` that is not a positive whole number at its first
    use, and the server hung from then on: ``serve`` refuses it at once (usage, exit 2)."""
    own_environment["TOKIO_WORKER_THREADS"] = given
    code, stderr = _serve(capsys, "--root", str(tmp_path))
    assert code == 2 and "TOKIO_WORKER_THREADS must be a whole number from 1 to 1024" in stderr, stderr


@pytest.mark.parametrize(
    ("files", "cores"),
    [
        ({}, 8),
        ({"/sys/fs/cgroup/cpu.max": "max 100000"}, 8),
        ({"/sys/fs/cgroup/cpu.max": "150000 100000"}, 2),
        ({"/sys/fs/cgroup/cpu.max": "50000 100000"}, 1),
        ({"/sys/fs/cgroup/cpu.max": "1600000 100000"}, 8),
        ({"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000"}, 8),
        ({"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "300000", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000"}, 3),
        ({"/sys/fs/cgroup/cpu.max": "² 100000"}, 8),
        ({"/sys/fs/cgroup/cpu.max": "9" * 400 + " 100000"}, 8),
        # a systemd service's own cgroup (no cgroup namespace), and a parent's tighter quota
        (
            {
                "/proc/self/cgroup": "0::/system.slice/x.service",
                "/sys/fs/cgroup/system.slice/x.service/cpu.max": "100000 100000",
            },
            1,
        ),
        (
            {
                "/proc/self/cgroup": "0::/a/b",
                "/sys/fs/cgroup/a/b/cpu.max": "max 100000",
                "/sys/fs/cgroup/a/cpu.max": "250000 100000",
            },
            3,
        ),
        (
            {
                "/proc/self/cgroup": "4:cpu,cpuacct:/user.slice\n0::/",
                "/sys/fs/cgroup/cpu/user.slice/cpu.cfs_quota_us": "200000",
                "/sys/fs/cgroup/cpu/user.slice/cpu.cfs_period_us": "100000",
            },
            2,
        ),
    ],
)
def test_the_cores_counted_are_the_affinity_capped_by_the_cgroup_quota(
    monkeypatch: pytest.MonkeyPatch, files: dict[str, str], cores: int
) -> None:
    from lance_iceberg_ns.cli import serving

    monkeypatch.setattr(serving, "_read", files.get)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert serving.available_cores() == cores


# --- no anonymous server beyond loopback ------------------------------------------------------------


def test_serve_beyond_loopback_without_a_token_refuses_to_start(
    own_environment: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from lance_iceberg_ns.server.settings import is_loopback

    root = ["--root", str(tmp_path)]
    for host in ("0.0.0.0", "::", "example.com"):
        code, stderr = _serve(capsys, *root, "--host", host)
        assert code == 2 and "--allow-anonymous" in stderr and len(stderr.strip().splitlines()) == 1, stderr
    # past the check, the dead catalog stops it (exit 5): given the operator's word, a token, or forwarding
    assert _serve(capsys, *root, "--host", "0.0.0.0", "--allow-anonymous")[0] == 5
    assert _serve(capsys, *root, "--host", "0.0.0.0", "--forward-bearer-token")[0] == 5
    assert _serve(capsys, *root, "--host", "127.0.0.1")[0] == 5
    own_environment["LANCE_ICEBERG_NS_ALLOW_ANONYMOUS"] = "true"
    assert _serve(capsys, *root, "--host", "0.0.0.0")[0] == 5
    del own_environment["LANCE_ICEBERG_NS_ALLOW_ANONYMOUS"]
    own_environment["LANCE_ICEBERG_NS_AUTH_TOKEN"] = TOKEN
    assert _serve(capsys, *root, "--host", "0.0.0.0")[0] == 5
    assert [is_loopback(host) for host in ("127.0.0.2", "::1", "[::1]", "localhost", "0.0.0.0", "10.0.0.1", "")] == [
        True,
        True,
        True,
        True,
        False,
        False,
        False,
    ]


# --- /metrics with forwarded tokens ---------------------------------------------------------------


class HeldCatalog(StubServer):
    """A fake catalog whose ``/v1/config`` as ``/readyz`` asks it (no warehouse) answers
    ``config_status``, or waits while ``hold`` is clear; it counts those requests."""

    def __init__(self) -> None:
        stub = self
        self.config_status, self.config_requests = 200, 0
        self.hold, self.asked = threading.Event(), threading.Event()
        self.hold.set()

        class Handler(JsonHandler):
            def answer(self) -> None:
                if self.path == "/v1/config":
                    stub.config_requests += 1
                    stub.asked.set()
                    stub.hold.wait(30)
                    self.send_json(stub.config_status, CONFIG_ANSWER if stub.config_status < 400 else {})
                    return
                if self.path.startswith("/v1/config"):  # the bridge's own, for a warehouse
                    self.send_json(200, CONFIG_ANSWER)
                    return
                self.send_json(200, {"namespace": self.path.rstrip("/").split("/")[-1:], "properties": {}})

            do_GET = do_POST = do_HEAD = answer

        self.start(Handler)


@pytest.fixture
def held_catalog() -> Iterator[HeldCatalog]:
    catalog = HeldCatalog()
    yield catalog
    catalog.hold.set()
    catalog.close()


def test_metrics_need_a_token_the_catalog_accepts_when_tokens_are_forwarded(
    held_catalog: HeldCatalog, tmp_path: Path
) -> None:
    properties = {"endpoint": held_catalog.endpoint, "root": str(tmp_path)}
    with serve_in_background(properties=properties, forward_bearer_token=True) as server:
        metrics = f"{server.uri}/metrics"
        refused = requests.get(metrics, timeout=10)
        accepted = requests.get(metrics, headers={"Authorization": "Bearer a-catalog-token"}, timeout=10)
        held_catalog.config_status = 401
        rejected = requests.get(metrics, headers={"Authorization": "Bearer a-bad-token"}, timeout=10)
    assert refused.status_code == 401 and "lance_iceberg_ns" not in refused.text
    assert accepted.status_code == 200 and "lance_iceberg_ns_requests_total" in accepted.text
    assert rejected.status_code == 401 and "lance_iceberg_ns" not in rejected.text


def test_metrics_ask_the_catalog_once_per_token_while_its_verdict_lasts(
    held_catalog: HeldCatalog, tmp_path: Path
) -> None:
    properties = {"endpoint": held_catalog.endpoint, "root": str(tmp_path)}
    with serve_in_background(properties=properties, forward_bearer_token=True) as server:

        def scrape(token: str) -> int:
            return requests.get(
                f"{server.uri}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10
            ).status_code

        before = held_catalog.config_requests
        accepted = [scrape("a-catalog-token") for _ in range(5)]
        held_catalog.config_status = 401
        refused = [scrape("made-up-token") for _ in range(5)]
        still_accepted = scrape("a-catalog-token")  # its verdict stands for TOKEN_VERDICT_SECONDS
    assert (accepted, refused, still_accepted) == ([200] * 5, [401] * 5, 200)
    assert held_catalog.config_requests - before == 2


def test_a_flood_of_made_up_tokens_costs_the_catalog_a_bounded_number_of_checks(
    held_catalog: HeldCatalog, tmp_path: Path
) -> None:
    properties = {"endpoint": held_catalog.endpoint, "root": str(tmp_path)}
    held_catalog.config_status = 401
    with serve_in_background(properties=properties, forward_bearer_token=True) as server:
        before, started = held_catalog.config_requests, time.monotonic()
        answers = [
            requests.get(f"{server.uri}/metrics", headers={"Authorization": f"Bearer made-up-{n}"}, timeout=10)
            for n in range(3 * TOKEN_CHECK_BURST)
        ]
        took = time.monotonic() - started
    asked = held_catalog.config_requests - before
    assert TOKEN_CHECK_BURST <= asked <= TOKEN_CHECK_BURST + int(took * TOKEN_CHECKS_PER_SECOND) + 1, (asked, took)
    assert {answer.status_code for answer in answers} == {401, 503}
    assert sum(answer.status_code == 401 for answer in answers) == asked
    assert all("lance_iceberg_ns" not in answer.text for answer in answers)


def test_token_checks_refill_at_their_rate(held_catalog: HeldCatalog) -> None:
    now = [0.0]
    checks = CatalogTokenChecks(held_catalog.endpoint, clock=lambda: now[0])
    held_catalog.config_status = 401
    for n in range(TOKEN_CHECK_BURST):
        with pytest.raises(UnauthenticatedError):
            checks.check(f"made-up-{n}")
    with pytest.raises(ServiceUnavailableError):
        checks.check("one-too-many")
    with pytest.raises(UnauthenticatedError):  # a token already judged costs nothing
        checks.check("made-up-0")
    now[0] += 1 / TOKEN_CHECKS_PER_SECOND
    held_catalog.config_status = 200
    checks.check("a-catalog-token")
    with pytest.raises(ServiceUnavailableError):
        checks.check("another")
    now[0] += TOKEN_VERDICT_SECONDS  # verdicts expire; the budget is full again
    held_catalog.config_status = 401
    with pytest.raises(UnauthenticatedError):
        checks.check("a-catalog-token")
    assert held_catalog.config_requests == TOKEN_CHECK_BURST + 2


# --- /readyz under a flood ----------------------------------------------------------------------


def test_readyz_probes_never_wait_on_a_slow_catalog_nor_ask_it_twice(held_catalog: HeldCatalog, tmp_path: Path) -> None:
    properties = {"endpoint": held_catalog.endpoint, "root": str(tmp_path)}
    with serve_in_background(properties=properties) as server:
        data_workers_ready()
        held_catalog.hold.clear()  # the catalog takes its time
        first: dict[str, Any] = {}
        asking = threading.Thread(target=lambda: first.update(answer=requests.get(f"{server.uri}/readyz", timeout=30)))
        asking.start()
        assert held_catalog.asked.wait(10)
        with ThreadPoolExecutor(32) as pool:  # a flood while the catalog is being asked
            flood = list(pool.map(lambda _: requests.get(f"{server.uri}/readyz", timeout=30), range(64)))
            route = requests.post(f"{server.uri}/v1/namespace/wh/exists", json={}, timeout=30)
        answered_while_held = not held_catalog.hold.is_set() and asking.is_alive()
        held_catalog.hold.set()
        asking.join(30)
    assert answered_while_held  # none of them waited for the catalog's answer
    assert {(answer.status_code, answer.json()["reason"]) for answer in flood} == {
        (503, "the Iceberg catalog has not answered yet")
    }
    assert route.status_code == 200
    assert held_catalog.config_requests == 1  # one probe asked; the flood took its place in line
    assert first["answer"].status_code == 200


# --- the audit line names what was acted on ---------------------------------------------------------


def test_the_audit_line_names_the_identifier_the_operation_acted_on(
    endpoint: str, tmp_path: Path, warehouse: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lance_iceberg_ns.audit")
    properties = {"endpoint": endpoint, "root": str(tmp_path)}
    with serve_in_background(properties=properties) as server:
        for path in (f"/v1/namespace/{warehouse}$db/create", f"/v1/table/{warehouse}$db$victim/declare"):
            requests.post(f"{server.uri}{path}", json={}, timeout=30).raise_for_status()
        two_delimiters = [("delimiter", "."), ("delimiter", "$")]  # which one the operation used would be a guess
        refused = requests.post(f"{server.uri}/v1/table/{warehouse}$db$victim/drop", params=two_delimiters, timeout=30)
        kept = requests.post(f"{server.uri}/v1/table/{warehouse}$db$victim/exists", json={}, timeout=30)
        drop = f"{server.uri}/v1/table/{warehouse}$db$victim/drop"
        dropped = requests.post(drop, params=[("delimiter", "$")], timeout=30)
        gone = requests.post(f"{server.uri}/v1/table/{warehouse}$db$victim/exists", json={}, timeout=30)
        commit = {"operations": [{"declare_table": {"id": [warehouse, "db", "u"]}}]}
        requests.post(f"{server.uri}/v1/table/batch-commit", json=commit, timeout=30)
        entries = {"entries": [{"id": [warehouse, "db", "u"], "version": 2, "manifest_path": "m"}]}
        requests.post(f"{server.uri}/v1/table/version/batch-create", json=entries, timeout=30)
    assert (refused.status_code, refused.json()["code"], kept.status_code) == (400, 13, 200), refused.text
    assert dropped.status_code == 200 and gone.status_code == 404
    lines = {
        record.operation: record.getMessage()  # type: ignore[attr-defined]
        for record in caplog.records
        if record.name == "lance_iceberg_ns.audit"
    }
    assert lines["drop_table"].startswith(f"drop_table ['{warehouse}', 'db', 'victim'] by"), lines["drop_table"]
    for operation in ("batch_commit_tables", "batch_create_table_versions"):
        assert lines[operation].startswith(f"{operation} ['{warehouse}', 'db', 'u'] by"), lines[operation]


def test_the_audit_line_names_a_bare_table_name_in_the_default_namespace(
    endpoint: str, tmp_path: Path, warehouse: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lance_iceberg_ns.audit")
    properties = {"endpoint": endpoint, "root": str(tmp_path), "default_namespace": f"{warehouse}.db"}
    with serve_in_background(properties=properties) as server:
        requests.post(f"{server.uri}/v1/namespace/{warehouse}$db/create", json={}, timeout=30).raise_for_status()
        for action in ("declare", "drop"):
            requests.post(f"{server.uri}/v1/table/orders/{action}", json={}, timeout=30).raise_for_status()
    lines = [record.getMessage() for record in caplog.records if record.name == "lance_iceberg_ns.audit"]
    started = [line.split(" by ", 1)[0] for line in lines if line.endswith(": started")]
    assert started[-2:] == ["declare_table ['orders']", "drop_table ['orders']"], lines  # as the client sent it
    for operation in ("declare_table", "drop_table"):
        assert any(line.startswith(f"{operation} ['{warehouse}', 'db', 'orders'] by") for line in lines), lines


# --- JSON logs stay JSON ---------------------------------------------------------------------------


def _arrow(values: list[int]) -> bytes:
    sink = pa.BufferOutputStream()
    table = pa.table({"v": values})
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def test_json_logs_stay_json_when_lance_writes_data(
    endpoint: str, tmp_path: Path, warehouse: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LANCE_LOG", raising=False)
    with served_in_subprocess(endpoint, str(tmp_path), warehouse, extra_args=["--log-format", "json"]) as served:
        requests.post(f"{served.uri}/v1/namespace/{warehouse}$db/create", json={}, timeout=30).raise_for_status()
        table = f"{served.uri}/v1/table/{warehouse}$db$t"
        requests.post(f"{table}/create", headers=ARROW, data=_arrow([1]), timeout=60).raise_for_status()
        inserted = requests.post(
            f"{table}/insert", headers=ARROW, data=_arrow([2]), params={"mode": "append"}, timeout=60
        )
        inserted.raise_for_status()
        output = served.stderr()
    for line in output.splitlines():
        if line.strip():
            json.loads(line)  # Lance's own warnings (a dataset created) would be plain text
