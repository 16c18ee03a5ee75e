"""list_tables and describe_table with the catalog a network round trip away: this bridge against
lance-namespace-impls' IcebergNamespace, through bench/latency_proxy.py at 0, 5 and 20 ms round
trips, at 100 Lance + 100 plain Iceberg tables and at 1,000 + 1,000.

Jobs meet their catalog (Polaris, Lakekeeper, Glue) 5 to 50 ms away, not on loopback, where the
catalog server's CPU hides what a client's round trips cost. For each table count and round trip:

list, new process   the first listing in a brand-new Python process (imports not timed)
list, new object    the first listing on a fresh namespace object, in a process that listed
                    a moment before (Spark and Ray tasks, lancedb reconnects)
list, warm          repeated listings on one namespace object
describe, new process / describe, warm   the same for describe_table

Each implementation's in-process figures are taken in one block, after one unmeasured listing;
new-process samples alternate between the two. Medians, saved to bench/results/latency.json
(which bench/plot_latency.py draws) and printed as a table.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/latency.py [--tables 100 1000] [--round-trips 0 5 20] [--repeat 5]
    .venv/bin/python bench/latency.py --tables 100 --update > bench/results/latency.txt  # one count again
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from lance_namespace import DescribeTableRequest, ListTablesRequest
from latency_proxy import proxy_process
from list_tables import NAMESPACE, WAREHOUSE, make_namespace, populate, time_call

from lance_iceberg_ns.testing import local_catalog

BENCH = Path(__file__).resolve().parent
KINDS = ("reference", "bridge")
MEASURES = ("list, new process", "list, new object", "list, warm", "describe, new process", "describe, warm")


def new_process(kind: str, operation: str, endpoint: str, root: str, table: str) -> float:
    """Seconds of the first call of ``operation`` in a new process (bench/list_tables.py's child)."""
    command = [sys.executable, str(BENCH / "list_tables.py"), "--child", kind, "--operation", operation]
    command += ["--endpoint", endpoint, "--root", root, "--table", table]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout.splitlines()[-1]
    return float(json.loads(output)["seconds"])


def measure(endpoint: str, root: str, names: list[str], repeat: int) -> dict[str, dict[str, float]]:
    """Medians in milliseconds, by implementation and measure."""
    samples: dict[str, dict[str, list[float]]] = {kind: {m: [] for m in MEASURES} for kind in KINDS}
    for i in range(repeat):
        for kind in KINDS:
            samples[kind]["list, new process"].append(new_process(kind, "list", endpoint, root, names[i]))
            samples[kind]["describe, new process"].append(new_process(kind, "describe", endpoint, root, names[i]))
    request = ListTablesRequest(id=[WAREHOUSE, NAMESPACE])
    for kind in KINDS:
        make_namespace(kind, endpoint, root).list_tables(request)  # what the process learnt a moment ago
        for _ in range(repeat):
            fresh = make_namespace(kind, endpoint, root)
            samples[kind]["list, new object"].append(time_call(lambda fresh=fresh: fresh.list_tables(request)))
        warm = make_namespace(kind, endpoint, root)
        warm.list_tables(request)
        for _ in range(repeat):
            samples[kind]["list, warm"].append(time_call(lambda warm=warm: warm.list_tables(request)))
        for name in names[:20]:
            describe = DescribeTableRequest(id=[WAREHOUSE, NAMESPACE, name])
            samples[kind]["describe, warm"].append(time_call(lambda warm=warm, d=describe: warm.describe_table(d)))
    return {
        kind: {measure: statistics.median(values) * 1000 for measure, values in by_measure.items()}
        for kind, by_measure in samples.items()
    }


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "list_tables and describe_table through a proxy adding each round trip; medians in milliseconds",
        f"{'tables':<12}{'rtt ms':>7}  {'measure':<24}{'reference':>11}{'bridge':>11}{'speed-up':>10}"
        f"{'bridge RTs':>12}",
    ]
    for result in results:
        rtt = result["round_trip_ms"]
        for measure in MEASURES:
            reference, bridge = result["reference"][measure], result["bridge"][measure]
            round_trips = f"{bridge / rtt:>12.1f}" if rtt else f"{'':>12}"
            lines.append(
                f"{result['label']:<12}{rtt:>7g}  {measure:<24}{reference:>11.1f}{bridge:>11.1f}"
                f"{reference / bridge:>9.2f}x{round_trips}"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, nargs="+", default=[100, 1000], help="Lance tables, as many Iceberg")
    parser.add_argument("--round-trips", type=float, nargs="+", default=[0, 5, 20], help="milliseconds")
    parser.add_argument("--repeat", type=int, default=5, help="samples per figure (3 above 500 tables)")
    parser.add_argument("--output", type=Path, default=BENCH / "results" / "latency.json")
    parser.add_argument("--update", action="store_true", help="keep the saved figures of settings not run now")
    args = parser.parse_args()
    results: list[dict[str, Any]] = []
    for tables in args.tables:
        with (
            tempfile.TemporaryDirectory() as work,
            local_catalog(Path(work) / "catalog", prefix_style="defaults") as server,
        ):
            root = str(Path(work) / "lance")
            names = populate(server.endpoint, root, tables)
            request = ListTablesRequest(id=[WAREHOUSE, NAMESPACE])
            for kind in KINDS:  # the same tables from both, and the server's JIT warmed by both
                listed = sorted(make_namespace(kind, server.endpoint, root).list_tables(request).tables)
                assert listed == sorted(names), f"{kind} listing is wrong"
            repeat = args.repeat if tables <= 500 else min(args.repeat, 3)
            for round_trip_ms in args.round_trips:
                print(f"{tables} + {tables} tables, {round_trip_ms:g} ms round trips ...", file=sys.stderr, flush=True)
                with proxy_process(server.endpoint, round_trip_ms) as endpoint:
                    figures = measure(endpoint, root, names, repeat)
                label = f"{tables}+{tables}"
                results.append({"label": label, "tables": tables, "round_trip_ms": round_trip_ms, **figures})
    if args.update and args.output.exists():
        ran = {(r["tables"], r["round_trip_ms"]) for r in results}
        kept = [r for r in json.loads(args.output.read_text()) if (r["tables"], r["round_trip_ms"]) not in ran]
        results = sorted(kept + results, key=lambda r: (r["tables"], r["round_trip_ms"]))
    args.output.parent.mkdir(exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
