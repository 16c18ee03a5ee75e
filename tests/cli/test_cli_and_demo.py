"""The command line: the local catalog in the foreground, and the end-to-end demo."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from lance_iceberg_ns import demo
from lance_iceberg_ns.demo import run_demo

from ..liveness import free_port


def test_local_catalog_command_serves_the_iceberg_rest_api(tmp_path: Path) -> None:
    port = free_port()
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


def _expected_topics(rows: int) -> dict[str, list[int]]:
    """The demo's articles, worked out here: each topic's word counts."""
    words: dict[str, list[int]] = {topic: [] for topic in demo.TOPICS}
    for article in range(rows):
        words[demo.TOPICS[article % len(demo.TOPICS)]].append(article * 37 % 500 + 50)
    return words


@pytest.mark.timeout(900)  # two runs, each starting Spark
def test_demo_runs_the_pipeline_end_to_end_twice_on_the_same_data(tmp_path: Path) -> None:
    """Spark writes, Spark SQL reads by name, lancedb searches and DuckDB queries through
    ``serve``, an append makes a version while the older one still reads, drop and undrop."""
    pytest.importorskip("pyspark")
    words = _expected_topics(demo.ROWS)
    first = run_demo(str(tmp_path), say=lambda line: None)
    assert (first["tables"], first["rows"]) == (["articles"], demo.ROWS)
    assert first["spark_sql"] == [(topic, sum(w > 300 for w in found)) for topic, found in sorted(words.items())]
    (nearest, distance), *others = first["nearest"]
    assert nearest == demo.PROBE and distance == pytest.approx(0) and all(other > 1 for _, other in others)
    assert first["duckdb"] == [
        (topic, len(found), round(sum(found) / len(found), 1)) for topic, found in sorted(words.items())
    ]
    assert (first["versions"], first["rows_before_append"]) == ([1, 2], demo.ROWS)
    assert (first["after_drop"], first["status_after_drop"]) == ([], "soft_deleted")
    assert (first["after_undrop"], first["undropped_rows"]) == (["articles"], demo.ROWS + demo.APPENDED)

    # again on the same data, as the command, whose output is the demo's lines alone (no Java,
    # Spark, Lance or server logs: those are kept in the data directory)
    again = subprocess.run(
        [sys.executable, "-m", "lance_iceberg_ns.cli", "demo", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert (again.returncode, again.stderr) == (0, ""), again.stderr[-3000:]
    lines = again.stdout.splitlines()
    assert [line.split(".")[0] for line in lines[:-1]] == [str(step) for step in range(1, 9)]
    assert lines[1].startswith("2. Spark job (overwrite) wrote demo_wh.docs.articles: 2000 rows,")
    assert "versions [1, 2, 3, 4]" in lines[6] and lines[-1].startswith("Done in ")
    assert all(len(line) < 120 for line in lines[1:])  # the first shows the data directory


def test_demo_without_pyspark_says_so_in_one_line_and_writes_with_pylance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo, "missing", lambda *modules: [module for module in modules if module == "pyspark"])
    lines: list[str] = []
    seen = run_demo(str(tmp_path), say=lines.append)
    assert [line for line in lines if "PySpark" in line] == [
        f"3. Spark SQL skipped: PySpark is not installed ({demo.INSTALL_HINT})"
    ]
    assert "spark_sql" not in seen
    assert seen["nearest"][0][0] == demo.PROBE and seen["undropped_rows"] == demo.ROWS + demo.APPENDED


def test_demo_command_without_a_jdk_says_so_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()  # a PATH without java and javac
    result = subprocess.run(
        [sys.executable, "-m", "lance_iceberg_ns.cli", "demo", "--data-dir", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": str(tmp_path / "bin")},
    )
    assert (result.returncode, result.stdout) == (5, "")
    assert result.stderr.splitlines() == [
        "error: The demo cannot run: the local catalog needs a JDK (java and javac, 17 or newer) on PATH "
        "(bash scripts/setup.sh demo installs it)"
    ]


def test_serve_command_answers_pylance_over_the_iceberg_catalog(catalog_server: object, tmp_path: Path) -> None:
    import lance.namespace
    from lance_namespace import CreateNamespaceRequest, ListNamespacesRequest

    port = free_port()
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
