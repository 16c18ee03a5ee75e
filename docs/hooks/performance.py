"""MkDocs hook: fills the docs with the saved output of the benchmarks.

Each benchmark's printed output is kept in ``bench/results/<name>.txt`` (``bench/run_all.py`` or
``python bench/<name>.py > bench/results/<name>.txt``); the performance page shows them all
(``<!-- bench-results -->``), and any page may show one (``<!-- bench: <name> -->``), so the
figures in the docs are exactly what a run printed and no page quotes a figure of its own.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

MARKER = "<!-- bench-results -->"
ONE_RESULT = re.compile(r"<!-- bench: (?P<name>[a-z_]+) -->")
RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def render_one(name: str, results: Path = RESULTS) -> str:
    """One benchmark's saved output as a text block; a missing one fails the (strict) build."""
    path = results / f"{name}.txt"
    if not path.exists():
        raise FileNotFoundError(f"<!-- bench: {name} -->: no saved output {path.name} in bench/results/")
    return f"```text\n{path.read_text().rstrip()}\n```\n"


def render_results(results: Path = RESULTS) -> str:
    sections = []
    summary = results / "summary.txt"
    if summary.exists():
        sections.append(f"### Summary (`bench/run_all.py`)\n\n```text\n{summary.read_text().rstrip()}\n```\n")
    for path in sorted(results.glob("*.txt")):
        if path == summary:
            continue
        text = path.read_text().rstrip()
        sections.append(f"### `bench/{path.stem}.py`\n\n```text\n{text}\n```\n")
    return "\n".join(sections) or "No benchmark output saved yet: run the benchmarks (see above).\n"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, render_results())
    return ONE_RESULT.sub(lambda match: render_one(match["name"]), markdown)
