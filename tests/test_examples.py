"""The examples in examples/ run, against the test catalog or a Lance REST server over it, and
print what they should."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lance_iceberg_ns.server import RunningServer

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, *arguments: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *arguments], capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.splitlines()


@pytest.mark.parametrize("through", ["catalog", "server"])
def test_lancedb_search_finds_the_product_it_searched_for(
    through: str, endpoint: str, lance_root: Path, warehouse: str, server: RunningServer
) -> None:
    where = ["--uri", server.uri] if through == "server" else ["--endpoint", endpoint, "--root", str(lance_root)]
    lines = run_example("lancedb_search.py", *where, "--namespace", f"{warehouse}.examples", "--rows", "600")
    assert lines[0] == "products: 600 rows, indices ['vector_idx']"
    assert lines[1].startswith("nearest to product 7: 7 (0.00), ")
    assert lines[2].startswith("nearest books under 20: ")
    assert lines[3] == "version 3: 700 rows; version 2: 600 rows"


def test_duckdb_sql_aggregates_joins_and_searches(server: RunningServer, warehouse: str) -> None:
    lines = run_example("duckdb_sql.py", "--uri", server.uri, "--namespace", f"{warehouse}.examples")
    assert lines[0] == "tables: ['trips', 'zones']"
    assert lines[1:6] == [
        f"{zone}: 2000 trips, average fare {fare}"
        for zone, fare in (("centre", 14.0), ("east", 11.0), ("north", 8.0), ("south", 9.5), ("west", 12.5))
    ]
    assert lines[6].startswith("trips nearest to trip 42: 42 (0.000), ")


def test_rest_server_example_starts_its_own_catalog_and_server() -> None:
    lines = run_example("rest_server.py")
    assert lines[0] == "tables in demo_wh.examples: ['events']"
    assert lines[1].startswith("demo_wh.examples.events: version 2 at ")
    assert "'table_type': 'lance'" in lines[2]
    assert lines[3] == "400 events, 133 of them buys"


def test_rest_server_example_uses_a_running_server(server: RunningServer, warehouse: str) -> None:
    namespace = f"{warehouse}.examples"
    for run in range(2):  # the second run overwrites
        lines = run_example("rest_server.py", "--uri", server.uri, "--namespace", namespace)
        assert lines[1].startswith(f"{namespace}.events: version {2 + 2 * run} at ")
        assert lines[3] == "400 events, 133 of them buys"


def test_migration_registers_the_directory_in_place_once(endpoint: str, lance_root: Path, warehouse: str) -> None:
    into = f"{warehouse}.imported"
    lines = run_example("migration.py", "--endpoint", endpoint, "--root", str(lance_root), "--into", into)
    assert lines[:3] == [
        "dry run: customers: would register, orders: would register",
        "import: customers: registered, orders: registered",
        "again: customers: already registered, orders: already registered",
    ]
    assert lines[3].startswith(f"{into}.customers: 10 rows at ") and "/customers.lance" in lines[3]
    assert lines[4].startswith(f"{into}.orders: 1000 rows at ")
