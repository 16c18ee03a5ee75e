"""The suite's records and the page drawn from them: a reason is the same from run to run, and a
page drawn by scripts/compatibility.py reads back cell for cell."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..helpers import script_module
from .outcomes import Outcome, Results, ServerFacts, normalized, reason_of

ROOT = Path(__file__).resolve().parents[2]
generator = script_module(ROOT / "scripts" / "compatibility.py")


def test_a_reason_is_the_class_and_first_line_without_what_changes_between_runs() -> None:
    error = ValueError(
        "table wh.db.t~1764385000123~9f8e7d6c at s3://b/5f2a9c01d3e4/t_0b7f2a1c-3d4e-4f5a-8b9c-0d1e2f3a4b5c "
        "via http://127.0.0.1:41234/v1 in /tmp/pytest-of-root/pytest-7/x0/lance\nsecond line"
    )
    assert reason_of(error) == (
        "ValueError: table wh.db.t~<id>~<id> at s3://b/<id>/t_<uuid> via http://127.0.0.1:<port>/v1 in <tmp>"
    )
    assert reason_of(KeyError()) == "KeyError"
    assert normalized("name   must\tstart") == "name must start"
    assert len(normalized("x" * 500)) == 200 and normalized("x" * 500).endswith("…")


def test_a_drawn_page_reads_back_cell_for_cell() -> None:
    results = Results({"one": "first scenario", "two": "second, `quoted`"})
    for key, title in (("a", "server a"), ("b", "server b")):
        results.servers[key] = ServerFacts(key, title, "1.0", "disk", "started")
    results.record("a", "one", Outcome(True))
    results.record("a", "two", Outcome(False, "ValueError: prefix main|wh is not a prefix"))
    results.record("b", "one", Outcome(False, "KeyError"))
    empty = "\n".join(f"{generator.marker(table)}\n{generator.marker(table, end=True)}" for table in generator.TABLES)
    page = generator.with_tables(f"# title\n\n{empty}\n\ntail\n", generator.drawn(results.as_json()))
    assert page.startswith("# title") and page.endswith("tail\n")
    assert generator.cells(page) == {
        ("first scenario", "server a"): "✓",
        ("first scenario", "server b"): "✗ KeyError",
        ("second, `quoted`", "server a"): "✗ ValueError: prefix main\\|wh is not a prefix",
        ("second, `quoted`", "server b"): "not run",
    }
    assert generator.cell({"passed": False, "reason": "ValueError: prefix main|wh is not a prefix"}) == (
        "✗ ValueError: prefix main\\|wh is not a prefix"
    )
    assert generator.with_tables(page, generator.drawn(results.as_json())) == page


def test_a_page_without_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="no markers"):
        generator.between("# no tables here\n", "outcomes")
