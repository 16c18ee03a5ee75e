"""The command line: the local catalog in the foreground, and the end-to-end demo."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

from lance_iceberg_ns.demo import run_demo


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_local_catalog_command_serves_the_iceberg_rest_api(tmp_path: Path) -> None:
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "lance_iceberg_ns.cli",
        "local-catalog",
        "--port",
        str(port),
        "--data-dir",
        str(tmp_path),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first_line = process.stdout.readline() if process.stdout else ""
        assert f"http://127.0.0.1:{port}" in first_line
        deadline = time.monotonic() + 30
        while True:
            try:
                config = requests.get(f"http://127.0.0.1:{port}/v1/config", timeout=5).json()
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert "GET /v1/{prefix}/namespaces" in config["endpoints"]
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_demo_runs_end_to_end_twice_on_the_same_data(tmp_path: Path) -> None:
    lines: list[str] = []
    first = run_demo(str(tmp_path), say=lines.append)
    assert first == {"namespaces": ["sales"], "tables": ["orders"], "rows": 1500, "version": 2}
    second = run_demo(str(tmp_path), say=lines.append)
    assert second["rows"] == 1500 and second["version"] == 4  # overwrite + append on the same lineage
    assert any("Read back: 1500 rows" in line for line in lines)


def test_serve_command_answers_pylance_over_the_iceberg_catalog(catalog_server: object, tmp_path: Path) -> None:
    import lance.namespace
    from lance_namespace import CreateNamespaceRequest, ListNamespacesRequest

    port = _free_port()
    endpoint = catalog_server.endpoint  # type: ignore[attr-defined]
    command = [sys.executable, "-m", "lance_iceberg_ns.cli", "serve", "--endpoint", endpoint, "--root", str(tmp_path)]
    command += ["--port", str(port), "--property", "table_type_cache_seconds=5", "--auth-token", "cli-token"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                requests.get(f"http://127.0.0.1:{port}/openapi.json", timeout=5)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.2)
        client = lance.namespace.RestNamespace(
            uri=f"http://127.0.0.1:{port}", **{"header.Authorization": "Bearer cli-token"}
        )
        client.create_namespace(CreateNamespaceRequest(id=["cli_wh", "db"]))
        assert client.list_namespaces(ListNamespacesRequest(id=["cli_wh"])).namespaces == ["db"]
    finally:
        process.terminate()
        process.wait(timeout=30)
