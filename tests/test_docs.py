"""The documentation site builds with --strict, and its reference pages cover what exists: every
property, every command, every operation."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

from lance_iceberg_ns.cli import cli
from lance_iceberg_ns.config.properties import KNOWN_KEYS, markdown_table

from .helpers import script_module

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_site_builds_strict(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    performance = (tmp_path / "site" / "performance" / "index.html").read_text()
    assert "bench/list_tables.py" in performance  # generated from bench/results
    assert "list-tables-latency.png" in performance and (DOCS / "images" / "list-tables-latency.png").exists()


def test_configuration_page_shows_the_table_of_properties_as_the_code_holds_it() -> None:
    page = (DOCS / "configuration.md").read_text()
    table = markdown_table()
    assert table in page, f"docs/configuration.md must show the table of properties exactly as:\n{table}"
    missing = [key for key in sorted(KNOWN_KEYS) if f"| `{key}` |" not in page]
    assert not missing, f"docs/configuration.md does not document {missing}"


def _commands(group: click.Group, prefix: str = "") -> list[str]:
    names = []
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            names += _commands(command, f"{prefix}{name} ")
        else:
            names.append(f"{prefix}{name}")
    return names


def test_cli_page_lists_every_command() -> None:
    page = (DOCS / "cli.md").read_text()
    missing = [name for name in _commands(cli) if name.split()[-1] not in page]
    assert not missing, f"docs/cli.md does not mention {missing}"


def test_operations_page_lists_every_implemented_operation() -> None:
    from lance_namespace import LanceNamespace

    from lance_iceberg_ns import IcebergLanceNamespace

    implemented = [
        name
        for name in dir(LanceNamespace)
        if not name.startswith("_")
        and name not in ("namespace_id",)
        and getattr(IcebergLanceNamespace, name) is not getattr(LanceNamespace, name)
    ]
    page = (DOCS / "operations.md").read_text()
    missing = [name for name in implemented if f"`{name}`" not in page]
    assert len(implemented) >= 16 and not missing, f"docs/operations.md does not document {missing}"


def test_the_install_section_lists_every_extra_once() -> None:
    """The one install section (docs/index.md) has a row for each extra of pyproject.toml; the
    README points to it rather than listing extras of its own."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    extras = re.findall(r"(?m)^([a-z0-9_-]+) = ", pyproject.split("[project.optional-dependencies]")[1].split("\n[")[0])
    install = (DOCS / "index.md").read_text().split("\n## Install\n")[1].split("\n## ")[0]
    rows = re.findall(r"(?m)^\| `([a-z0-9_-]+)` \|", install)
    assert len(extras) >= 10 and sorted(rows) == sorted(extras), (extras, rows)
    assert "(docs/index.md#install)" in (ROOT / "README.md").read_text()


def _run_all() -> Any:
    return script_module(ROOT / "bench" / "run_all.py")


def test_benchmark_summary_parses_every_saved_output() -> None:
    run_all = _run_all()
    rows = []
    for name, parse in run_all.BENCHMARKS.items():
        rows += parse((ROOT / "bench" / "results" / f"{name}.txt").read_text())
    assert len(rows) == 54 and all(row.target for row in rows)
    # every row has a target, or is shown for information (the docs say why)
    assert all((row.met is None) == (row.target == "info") for row in rows)
    assert "targets met" in run_all.table(rows)
    # the saved summary the docs show is the one the saved outputs give (run_all.py --saved)
    assert (ROOT / "bench" / "results" / "summary.txt").read_text() == run_all.table(rows) + "\n"


def test_a_spark_write_ratio_counts_only_from_a_run_whose_floor_held_its_pace() -> None:
    """A run whose floor took twice its usual time for some rounds puts the write under its floor
    with no change to the bridge: its write row is not met, whatever its ratio."""
    run_all = _run_all()
    saved = (ROOT / "bench" / "results" / "spark_pipeline.txt").read_text()

    def spark_rows(rounds: str, write_ratio: str) -> tuple[Any, Any]:
        text = re.sub(r"(?m)^(floor: Spark -> Python, no write\s+[\d.]+\s+)\(.*\)$", rf"\g<1>({rounds})", saved)
        text = re.sub(r"(?m)^(Lance write / Python hand-off floor:\s+)[\d.]+", rf"\g<1>{write_ratio}", text)
        write, spread = run_all.spark_pipeline(text)[:2]
        assert write.figure.startswith("Spark write, Lance vs") and spread.met is None  # spread: information
        return write, spread

    write, spread = spark_rows("2.39, 4.18, 4.53, 4.56, 4.56", "0.88")  # a run saved earlier
    assert not write.met and write.result == 0.88 and spread.result == 1.91 and spread.ours == "4.56 s"
    write, spread = spark_rows("2.43, 2.20, 2.21, 2.15, 2.10", "1.04")
    assert write.met and spread.result == 1.16 and spread.baseline == "2.10 s"
    assert spark_rows("2.00, 2.48, 2.10", "1.04")[0].met  # 1.24x
    assert not spark_rows("2.00, 2.52, 2.10", "1.04")[0].met  # 1.26x
    assert not spark_rows("2.10, 2.12", "1.04")[0].met  # too few rounds to show a pace held
    assert not spark_rows("2.10, 2.12, 2.11", "1.06")[0].met  # steady, over the target


def test_the_rest_server_summary_row_is_the_time_the_server_adds() -> None:
    """ours and baseline are the two p50s and the result is their difference, as the row's name says."""
    run_all = _run_all()
    (row,) = run_all.rest_server((ROOT / "bench" / "results" / "rest_server.txt").read_text())
    served, in_process = (float(figure.removesuffix(" ms")) for figure in (row.ours, row.baseline))
    assert row.figure.endswith("(ms added)") and row.target == "<= 3 ms"
    assert served > in_process and abs(served - in_process - row.result) < 0.015
