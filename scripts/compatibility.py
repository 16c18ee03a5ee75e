"""Draw docs/compatibility.md's tables from a run of the compatibility suite (tests/compat/).

    python scripts/compatibility.py           # run the suite, keep its results, rewrite the page
    python scripts/compatibility.py --results bench/results/compatibility.json   # rewrite from kept results
    python scripts/compatibility.py --check   # exit 1 if the page does not show the kept results

The suite writes its results as JSON (to ``$LANCE_ICEBERG_NS_COMPAT_RESULTS`` when set): the
servers it started, the scenarios, and each scenario's outcome on each server (passed, or the
exception's class and first line). The page's two tables, servers and outcomes, sit between
markers; everything else on the page is written by hand. The suite's own tests hold each cell of
the page to the run (tests/compat/test_compatibility.py), so the page cannot claim what no run showed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "compatibility.md"
RESULTS = ROOT / "bench" / "results" / "compatibility.json"
SUITE = "tests/compat/test_compatibility.py"
RESULTS_VARIABLE = "LANCE_ICEBERG_NS_COMPAT_RESULTS"
PASSED, FAILED = "✓", "✗"
TABLES = ("servers", "outcomes")
_CELL_SEPARATOR = re.compile(r"(?<!\\)\|")


def marker(table: str, end: bool = False) -> str:
    return f"<!-- compatibility:{table}:{'end' if end else 'begin'} (drawn by scripts/compatibility.py) -->"


def escaped(text: str) -> str:
    """``text`` as it can stand in a table cell: one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def cell(outcome: dict[str, Any]) -> str:
    """``✓``, or ``✗`` with the reason."""
    return PASSED if outcome["passed"] else f"{FAILED} {escaped(outcome['reason'])}".rstrip()


def servers_table(results: dict[str, Any]) -> str:
    lines = ["| server | version | storage | how the tests start it |", "|---|---|---|---|"]
    for server in results["servers"]:
        setup = server["setup"] + (f"; did not start: {server['error']}" if server.get("error") else "")
        lines.append(f"| {server['title']} | {server['version']} | {server['storage']} | {escaped(setup)} |")
    return "\n".join(lines)


def outcomes_table(results: dict[str, Any]) -> str:
    servers = results["servers"]
    lines = [
        "| scenario | " + " | ".join(server["title"] for server in servers) + " |",
        "|---|" + "---|" * len(servers),
    ]
    for scenario in results["scenarios"]:
        cells = []
        for server in servers:
            outcome = results["outcomes"].get(server["key"], {}).get(scenario["key"])
            cells.append(cell(outcome) if outcome else "not run")
        lines.append(f"| {scenario['title']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def drawn(results: dict[str, Any]) -> dict[str, str]:
    """Each table of the page, drawn from ``results``."""
    return {"servers": servers_table(results), "outcomes": outcomes_table(results)}


def between(page: str, table: str) -> str:
    """What the page holds between the markers of ``table``; ValueError without them."""
    begin, end = marker(table), marker(table, end=True)
    if begin not in page or end not in page:
        raise ValueError(f"the page has no markers for the {table} table: {begin}")
    return page.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def with_tables(page: str, tables: dict[str, str]) -> str:
    """``page`` with each table between its markers replaced."""
    for table, text in tables.items():
        begin, end = marker(table), marker(table, end=True)
        head, rest = page.split(begin, 1)
        page = f"{head}{begin}\n{text}\n{end}{rest.split(end, 1)[1]}"
    return page


def cells(page: str) -> dict[tuple[str, str], str]:
    """The outcomes table of ``page`` as {(scenario title, server title): cell}."""
    rows = [line.strip() for line in between(page, "outcomes").splitlines() if line.strip().startswith("|")]
    if len(rows) < 2:
        return {}
    split = [[part.strip() for part in _CELL_SEPARATOR.split(row.strip("|"))] for row in rows]
    header, body = split[0], split[2:]
    return {(row[0], server): value for row in body for server, value in zip(header[1:], row[1:], strict=False)}


def run_suite(results: Path) -> int:
    """Run the compatibility suite, its results written to ``results``; pytest's exit code (the
    suite fails where the page no longer shows what ran, which is what is being redrawn)."""
    environment = {**os.environ, RESULTS_VARIABLE: str(results)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", SUITE]
    return subprocess.run(command, cwd=ROOT, env=environment).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, help=f"draw from these results, without running (default {RESULTS})")
    parser.add_argument("--check", action="store_true", help="exit 1 if the page does not show the results")
    arguments = parser.parse_args(argv)
    path = arguments.results or RESULTS
    if arguments.results is None and not arguments.check:
        code = run_suite(path)
        print(f"the suite exited {code}; its results are in {path.relative_to(ROOT)}")
    results = json.loads(path.read_text())
    page = PAGE.read_text()
    tables = drawn(results)
    if arguments.check:
        stale = [table for table in TABLES if between(page, table) != tables[table]]
        if stale:
            print(f"{PAGE.relative_to(ROOT)} does not show {path}: the {', '.join(stale)} table(s) differ")
            return 1
        return 0
    PAGE.write_text(with_tables(page, tables))
    print(f"wrote the servers and outcomes tables of {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
