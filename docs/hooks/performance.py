"""MkDocs hook: fills the performance page with the saved output of the benchmarks.

Each benchmark's printed output is kept in ``bench/results/<name>.txt`` (``bench/run_all.py`` or
``python bench/<name>.py > bench/results/<name>.txt``); the page shows them all, so the figures
in the docs are exactly what a run printed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

MARKER = "<!-- bench-results -->"
RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


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
        return markdown.replace(MARKER, render_results())
    return markdown
