"""Draws the data plane and the Spark pipeline from their saved output, bench/results/data_plane.txt
and bench/results/spark_pipeline.txt (written by bench/data_plane.py and bench/spark_pipeline.py),
into docs/images/, where the performance page shows them beside the latency plot.

    .venv/bin/python bench/plot_results.py
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
IMAGES = BENCH.parent / "docs" / "images"
# a label, two spaces, numbers, and optionally the samples a median was taken of: "(4.22, 3.66, 3.81)"
ROW = re.compile(r"^(?P<label>\S.*?)\s{2,}(?P<numbers>[\d.]+(?:\s+[\d.]+)*)(?:\s+\([\d., ]+\))?\s*$")
OURS = "tab:blue"


@dataclass(frozen=True)
class Row:
    section: str  # the header line the row is under
    label: str
    numbers: tuple[float, ...]


def rows(text: str) -> list[Row]:
    """The table rows of a benchmark's output (a label, two spaces, numbers), under their header."""
    found, section = [], ""
    for line in text.splitlines():
        match = ROW.match(line)
        if match:
            numbers = tuple(float(number) for number in match["numbers"].split())
            found.append(Row(section, match["label"], numbers))
        elif line.strip() and "  " not in line and "target" not in line and "information" not in line:
            section = line.strip()  # a header, not a column heading or a ratio line
    return found


def _colour(label: str) -> str:
    return OURS if label.startswith("our") else "tab:gray"


def _spark_colour(label: str) -> str:
    """Lance through the catalog in blue; the hand-off floor, Parquet and plain pylance for comparison."""
    kinds = {"Lance (catalog)": OURS, "floor": "tab:orange", "Parquet": "tab:gray", "pylance": "silver"}
    return next((colour for kind, colour in kinds.items() if kind in label), "tab:gray")


def plot_data_plane(text: str, image: Path = IMAGES / "data-plane.png") -> Path:
    table = rows(text)
    queries = [row for row in table if len(row.numbers) == 4 and not row.label[0].isdigit()]
    inserts = [row for row in table if len(row.numbers) == 1 and row.section.startswith("insert")]
    figure, (query_axis, insert_axis) = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [3, 2]})
    labels = [row.label for row in queries]
    positions = range(len(queries))
    query_axis.barh(
        [p + 0.2 for p in positions],
        [row.numbers[0] for row in queries],
        0.4,
        label="p50",
        color=[_colour(label) for label in labels],
    )
    query_axis.barh(
        [p - 0.2 for p in positions],
        [row.numbers[1] for row in queries],
        0.4,
        label="p99",
        color=[_colour(label) for label in labels],
        alpha=0.45,
    )
    for container in query_axis.containers:
        query_axis.bar_label(container, fmt="%.1f", padding=3, fontsize=8)
    query_axis.set_yticks(list(positions), labels)
    query_axis.invert_yaxis()
    query_axis.set_xlabel("ms per query (solid p50, light p99)")
    query_axis.set_title(queries[0].section.split(";")[0] if queries else "query_table", fontsize=10)
    insert_axis.barh(
        range(len(inserts)), [row.numbers[0] for row in inserts], color=[_colour(row.label) for row in inserts]
    )
    insert_axis.bar_label(insert_axis.containers[0], fmt="%.2f s", padding=3, fontsize=8)
    insert_axis.set_yticks(list(range(len(inserts))), [row.label for row in inserts])
    insert_axis.invert_yaxis()
    insert_axis.set_xlabel("seconds")
    insert_axis.set_title(inserts[0].section if inserts else "insert_into_table", fontsize=10)
    for axis in (query_axis, insert_axis):
        axis.grid(True, axis="x", alpha=0.3)
        axis.margins(x=0.15)  # room for the values at the bars' ends
    figure.tight_layout()
    return _save(figure, image)


def plot_spark(text: str, image: Path = IMAGES / "spark-pipeline.png") -> Path:
    table = [row for row in rows(text) if len(row.numbers) == 1 and ":" in row.label]
    figure, axis = plt.subplots(figsize=(9, 3.6))
    bars = axis.barh(
        range(len(table)), [row.numbers[0] for row in table], color=[_spark_colour(row.label) for row in table]
    )
    axis.bar_label(bars, fmt="%.2f s", padding=3, fontsize=8)
    axis.set_yticks(list(range(len(table))), [row.label for row in table])
    axis.invert_yaxis()
    axis.set_xlabel("seconds")
    axis.set_title(table[0].section.split(";")[0] if table else "Spark pipeline")
    axis.grid(True, axis="x", alpha=0.3)
    axis.margins(x=0.1)
    figure.tight_layout()
    return _save(figure, image)


def _save(figure: plt.Figure, image: Path) -> Path:
    image.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(image, dpi=110)
    plt.close(figure)
    return image


def main() -> None:
    print(plot_data_plane((RESULTS / "data_plane.txt").read_text()))
    print(plot_spark((RESULTS / "spark_pipeline.txt").read_text()))


if __name__ == "__main__":
    main()
