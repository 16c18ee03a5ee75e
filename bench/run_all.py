"""Runs every benchmark under bench/, saves each one's output in bench/results/<name>.txt, and
prints one summary table (figure, ours, baseline, ratio, target, met?), also saved as
bench/results/summary.txt, which the documentation's performance page shows first.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/run_all.py              # run them all (about 10 minutes)
    .venv/bin/python bench/run_all.py --saved      # summarize the saved outputs only
    .venv/bin/python bench/run_all.py --only list_tables
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"


@dataclass(frozen=True)
class Row:
    figure: str
    ours: str
    baseline: str
    ratio: float
    target: str
    met: bool


def _number(pattern: str, text: str) -> list[str]:
    match = re.search(pattern, text, re.MULTILINE)
    if match is None:
        raise ValueError(f"no match for {pattern!r} in the benchmark's output")
    return list(match.groups())


def _at_most(figure: str, ours: str, baseline: str, ratio: str, target: float, unit: str = "x") -> Row:
    return Row(figure, ours, baseline, float(ratio), f"<= {target:g}{unit}", float(ratio) <= target)


def list_tables(text: str) -> list[Row]:
    rows = []
    targets = {"list cold, new process": 3.0, "list cold, new object": 3.0, "list warm": 10.0}
    for measure in (
        "list cold, new process",
        "list cold, new object",
        "list warm",
        "describe cold, new process",
        "describe cold, new object",
        "describe warm",
    ):
        reference, bridge, speedup = _number(rf"^{re.escape(measure)}\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x", text)
        target = targets.get(measure, 1.0)
        rows.append(
            Row(
                f"{measure} (speed-up vs reference)",
                f"{bridge} ms",
                f"{reference} ms",
                float(speedup),
                f">= {target:g}x",
                float(speedup) >= target,
            )
        )
    return rows


def rest_server(text: str) -> list[Row]:
    (in_process,) = _number(r"^in-process bridge\s+([\d.]+)", text)
    (served,) = _number(r"^REST server over the bridge\s+([\d.]+)", text)
    (added,) = _number(r"the server adds ([\d.]+) ms at p50", text)
    return [_at_most("REST server: added p50 latency (ms)", f"{served} ms", f"{in_process} ms", added, 3, " ms")]


def spark_pipeline(text: str) -> list[Row]:
    rows = []
    for kind, target in (("write", 1.0), ("read", 1.5)):
        (ours,) = _number(rf"^{kind}: (?:Spark -> Lance|Lance) \(catalog\)(?: -> Spark)?\s+([\d.]+)", text)
        (parquet,) = _number(rf"^{kind}: (?:Spark -> Parquet|Parquet -> Spark)\s+([\d.]+)", text)
        (ratio,) = _number(rf"^Lance {kind} / Parquet {kind}:\s+([\d.]+)", text)
        rows.append(
            _at_most(f"Spark {kind}, Lance vs Parquet (time ratio)", f"{ours} s", f"{parquet} s", ratio, target)
        )
    return rows


def managed_commits(text: str) -> list[Row]:
    (unmanaged,) = _number(r"^unmanaged\s+[\d.]+ appends/s\s+([\d.]+) ms/commit", text)
    (managed,) = _number(r"^managed\s+[\d.]+ appends/s\s+([\d.]+) ms/commit", text)
    (ratio,) = _number(r"cost per commit: ([\d.]+)x", text)
    return [_at_most("managed vs unmanaged commit (cost ratio)", f"{managed} ms", f"{unmanaged} ms", ratio, 2)]


BENCHMARKS: dict[str, Callable[[str], list[Row]]] = {
    "list_tables": list_tables,
    "rest_server": rest_server,
    "spark_pipeline": spark_pipeline,
    "managed_commits": managed_commits,
}


def table(rows: list[Row]) -> str:
    header = f"{'figure':<52}{'ours':>12}{'baseline':>12}{'ratio':>8}  {'target':<9}met?"
    lines = [header, "-" * len(header)]
    for row in rows:
        met = "yes" if row.met else "NO"
        lines.append(f"{row.figure:<52}{row.ours:>12}{row.baseline:>12}{row.ratio:>8.2f}  {row.target:<9}{met}")
    met_count = sum(row.met for row in rows)
    lines.append(f"{met_count} of {len(rows)} targets met")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--saved", action="store_true", help="summarize bench/results/ without running")
    parser.add_argument("--only", choices=sorted(BENCHMARKS), action="append", help="run only these")
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    rows: list[Row] = []
    for name, parse in BENCHMARKS.items():
        output = RESULTS / f"{name}.txt"
        if not args.saved and (args.only is None or name in args.only):
            print(f"running bench/{name}.py ...", file=sys.stderr, flush=True)
            result = subprocess.run([sys.executable, str(BENCH / f"{name}.py")], capture_output=True, text=True)
            if result.returncode != 0:
                print(result.stderr[-3000:], file=sys.stderr)
                return result.returncode
            lines = [line for line in result.stdout.splitlines() if line.strip() and "Stage" not in line]
            output.write_text("\n".join(lines) + "\n")
        if output.exists():
            rows += parse(output.read_text())
    summary = table(rows)
    (RESULTS / "summary.txt").write_text(summary + "\n")
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
