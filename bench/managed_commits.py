"""Appends per second through pylance to a table whose versions the catalog manages, against an
unmanaged table (Lance's own commits), from one run on the local catalog.

Both tables get the same one-row appends, after an unmeasured warm-up of both paths on tables of
their own (the catalog is a JVM: its request paths are compiled as they run, and after 100 appends
its commits in the first round still cost a third more than in the last; the measured tables
start empty), alternating in rounds so that both see the same machine state; each figure is
appends per second over all rounds, and the ratio is the managed cost per commit against the
unmanaged one (target: at most 2x). For information, the catalog requests each path sends per
append, the median of the rounds' ratios (less swayed by a burst of load on a shared machine), and
the managed cost per commit in the last round against the first (the catalog records the latest
version only, so a longer history must not cost more). Last, also for information: an atomic
commit (``write_together``) of four managed tables against one of a single table, median of five
each (the tables are staged side by side, then published in one catalog commit).

    .venv/bin/python bench/managed_commits.py [--appends 200] [--rounds 10] [--warmup 1000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import lance
import pyarrow as pa

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.catalog import round_trips
from lance_iceberg_ns.jobs.atomic import write_together
from lance_iceberg_ns.testing import local_catalog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--appends", type=int, default=200, help="appends per table")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=1000, help="unmeasured appends on warm-up tables first")
    args = parser.parse_args()
    per_round = max(1, args.appends // args.rounds)
    with (
        tempfile.TemporaryDirectory() as work,
        local_catalog(Path(work) / "catalog", prefix_style="defaults") as catalog,
    ):
        properties = {"endpoint": catalog.endpoint, "root": str(Path(work) / "lance")}
        tables = {
            "unmanaged": (IcebergLanceNamespace(**properties), ["bench_wh", "db", "unmanaged"]),
            "managed": (
                IcebergLanceNamespace(**properties, table_version_management="true"),
                ["bench_wh", "db", "managed"],
            ),
        }
        tables["unmanaged"][0].create_namespace({"id": ["bench_wh", "db"]})
        row = pa.table({"id": [1], "value": [0.5]})
        for ns, table_id in tables.values():  # warm-up, unmeasured, on tables of its own
            warm_id = [*table_id[:-1], f"{table_id[-1]}_warmup"]
            lance.write_dataset(row, namespace_client=ns, table_id=warm_id)
            for _ in range(args.warmup):
                lance.write_dataset(row, namespace_client=ns, table_id=warm_id, mode="append")
        for ns, table_id in tables.values():
            lance.write_dataset(row, namespace_client=ns, table_id=table_id)
        seconds = dict.fromkeys(tables, 0.0)
        requests = dict.fromkeys(tables, 0)
        ratios = []
        managed_rounds = []
        for _round in range(args.rounds):
            this_round = {}
            for name, (ns, table_id) in tables.items():
                sent: list[str] = []

                def note(method: str, _status: int | None, _seconds: float, sent: list[str] = sent) -> None:
                    sent.append(method)

                round_trips.observe(note)
                started = time.perf_counter()
                for _ in range(per_round):
                    lance.write_dataset(row, namespace_client=ns, table_id=table_id, mode="append")
                this_round[name] = time.perf_counter() - started
                round_trips.stop_observing(note)
                seconds[name] += this_round[name]
                requests[name] += len(sent)
            ratios.append(this_round["managed"] / this_round["unmanaged"])
            managed_rounds.append(this_round["managed"] / per_round * 1000)
        total = per_round * args.rounds
        for ns, table_id in tables.values():
            assert lance.dataset(namespace_client=ns, table_id=table_id).count_rows() == total + 1
        together = atomic_commits(tables["managed"][0])
    print(f"{total} one-row appends per table through pylance, local catalog, alternating rounds")
    for name in tables:
        print(f"{name:<12}{total / seconds[name]:>10.1f} appends/s{seconds[name] / total * 1000:>10.2f} ms/commit")
    print("catalog requests per append: " + ", ".join(f"{name} {requests[name] / total:.2f}" for name in tables))
    print(f"median of the {args.rounds} rounds' ratios: {statistics.median(ratios):.2f}x (information)")
    first, last = managed_rounds[0], managed_rounds[-1]
    print(
        f"managed commit, last round vs first: {last:.2f} / {first:.2f} ms = {last / first:.2f}x "
        f"(versions 2-{per_round + 1} vs {total - per_round + 2}-{total + 1}; information)"
    )
    print(
        f"atomic commit of 4 tables vs 1: {together[4]:.3f} / {together[1]:.3f} s = "
        f"{together[4] / together[1]:.2f}x (information)"
    )
    ratio = seconds["managed"] / seconds["unmanaged"]
    print(f"managed / unmanaged cost per commit: {ratio:.2f}x (target <= 2.0x)")


def atomic_commits(ns: IcebergLanceNamespace, repeat: int = 5) -> dict[int, float]:
    """Median seconds of a ``write_together`` append to 1 and to 4 managed tables."""
    tables = [["bench_wh", "db", f"together_{i}"] for i in range(4)]
    row = pa.table({"id": [1], "value": [0.5]})
    write_together(ns, [(table_id, row, "create") for table_id in tables])
    medians = {}
    for count in (1, 4):
        taken = []
        for _ in range(repeat):
            started = time.perf_counter()
            write_together(ns, [(table_id, row, "append") for table_id in tables[:count]])
            taken.append(time.perf_counter() - started)
        medians[count] = statistics.median(taken)
    return medians


if __name__ == "__main__":
    main()
