"""Draws list_tables time against the catalog's round-trip time from bench/results/latency.json
(written by bench/latency.py): both implementations, both table counts, a listing in a new process
and a warm one. The PNG goes to docs/images/, where the performance page shows it.

    .venv/bin/python bench/plot_latency.py
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results" / "latency.json"
IMAGE = BENCH.parent / "docs" / "images" / "list-tables-latency.png"
NAMES = {"reference": "reference (lance-namespace-impls)", "bridge": "lance-iceberg-ns"}
STYLES = {"reference": {"color": "tab:red"}, "bridge": {"color": "tab:blue"}}


def plot(results: list[dict], image: Path = IMAGE) -> Path:  # type: ignore[type-arg]
    figure, axes = plt.subplots(1, 2, figsize=(11, 5), sharey=True)
    for axis, measure in zip(axes, ("list, new process", "list, warm"), strict=True):
        counts = sorted({r["tables"] for r in results})
        for tables in counts:
            points = sorted((r for r in results if r["tables"] == tables), key=lambda r: r["round_trip_ms"])
            line = "-" if tables == counts[0] else "--"  # the smaller count solid, the larger dashed
            for kind in ("reference", "bridge"):
                axis.plot(
                    [r["round_trip_ms"] for r in points],
                    [r[kind][measure] for r in points],
                    marker="o",
                    linestyle=line,
                    label=f"{NAMES[kind]}, {tables:,} + {tables:,} tables",
                    **STYLES[kind],
                )
        axis.set_title(f"list_tables, {measure.split(', ')[1]}")
        axis.set_xlabel("round trip to the catalog (ms)")
        axis.set_yscale("log")
        axis.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("time (ms, log scale)")
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=2, fontsize=9)
    figure.tight_layout(rect=(0, 0.12, 1, 1))
    image.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(image, dpi=110)
    plt.close(figure)
    return image


def main() -> None:
    print(plot(json.loads(RESULTS.read_text())))


if __name__ == "__main__":
    main()
