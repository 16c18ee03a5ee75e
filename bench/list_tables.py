"""list_tables and describe_table: this bridge against lance-namespace-impls' IcebergNamespace.

One run on the local Iceberg REST catalog (prefix in the config defaults, which the reference
needs), with 100 Lance tables and 100 plain Iceberg tables in one namespace. Both implementations
are checked to return the same tables before anything is timed. Three settings:

cold, new object   the first call on a fresh namespace object (config fetch included), in a process
                   that has used the catalog before (Spark tasks, lancedb reconnects)
cold, new process  the first call in a brand-new Python process (imports not timed)
warm               repeated calls on one namespace object

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/list_tables.py [--tables 100] [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lance_namespace import CreateNamespaceRequest, DeclareTableRequest, DescribeTableRequest, ListTablesRequest
from lance_namespace_impls.iceberg import IcebergNamespace
from pyiceberg.catalog import load_catalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.testing import local_catalog

WAREHOUSE, NAMESPACE = "bench_wh", "db"


def populate(endpoint: str, root: str, tables: int) -> list[str]:
    with IcebergLanceNamespace(endpoint=endpoint, root=root) as ns:
        ns.create_namespace(CreateNamespaceRequest(id=[WAREHOUSE, NAMESPACE]))
        names = [f"lance_{i:03d}" for i in range(tables)]
        for name in names:
            ns.declare_table(DeclareTableRequest(id=[WAREHOUSE, NAMESPACE, name]))
    iceberg = load_catalog("plain", type="rest", uri=endpoint, warehouse=WAREHOUSE)
    for i in range(tables):
        iceberg.create_table(
            (NAMESPACE, f"iceberg_{i:03d}"),
            schema=Schema(NestedField(1, "id", LongType(), required=False)),
            location=f"{root}/plain/iceberg_{i:03d}",
        )
    return names


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def time_call(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def measure(makers: dict[str, Callable[[], Any]], names: list[str], repeat: int) -> dict[str, dict[str, float]]:
    """Time every implementation, alternating between them sample by sample so that neither gets
    a quieter machine or a warmer server."""
    list_request = ListTablesRequest(id=[WAREHOUSE, NAMESPACE])

    def describe(ns: Any, name: str) -> Any:
        return ns.describe_table(DescribeTableRequest(id=[WAREHOUSE, NAMESPACE, name]))

    samples: dict[str, dict[str, list[float]]] = {kind: {} for kind in makers}

    def record(kind: str, key: str, seconds: float) -> None:
        samples[kind].setdefault(key, []).append(seconds)

    for i in range(repeat):
        for kind, make in makers.items():
            ns = make()
            record(kind, "list cold", time_call(lambda ns=ns: ns.list_tables(list_request)))
            fresh = make()
            record(kind, "describe cold", time_call(lambda fresh=fresh, i=i: describe(fresh, names[i % len(names)])))
    warm = {kind: make() for kind, make in makers.items()}
    for ns in warm.values():
        ns.list_tables(list_request)
        describe(ns, names[0])
    for _ in range(repeat * 3):
        for kind, ns in warm.items():
            record(kind, "list warm", time_call(lambda ns=ns: ns.list_tables(list_request)))
    for name in names * 2:
        for kind, ns in warm.items():
            record(kind, "describe warm", time_call(lambda ns=ns, name=name: describe(ns, name)))
    return {kind: {key: median_ms(values) for key, values in by_key.items()} for kind, by_key in samples.items()}


def make_namespace(kind: str, endpoint: str, root: str) -> Any:
    if kind == "bridge":
        return IcebergLanceNamespace(endpoint=endpoint, root=root)
    return IcebergNamespace(endpoint=endpoint, root=root)


def child(kind: str, operation: str, endpoint: str, root: str, table: str) -> None:
    """In a new process: time the first call of one operation."""
    ns = make_namespace(kind, endpoint, root)
    if operation == "list":
        elapsed = time_call(lambda: ns.list_tables(ListTablesRequest(id=[WAREHOUSE, NAMESPACE])))
    else:
        elapsed = time_call(lambda: ns.describe_table(DescribeTableRequest(id=[WAREHOUSE, NAMESPACE, table])))
    print(json.dumps({"seconds": elapsed}))


def measure_new_process(endpoint: str, root: str, names: list[str], repeat: int) -> dict[str, dict[str, float]]:
    samples: dict[str, dict[str, list[float]]] = {"reference": {}, "bridge": {}}
    for operation in ("list", "describe"):
        for i in range(repeat):
            for kind in samples:
                command = [sys.executable, __file__, "--child", kind, "--operation", operation]
                command += ["--endpoint", endpoint, "--root", root, "--table", names[i]]
                output = subprocess.run(command, capture_output=True, text=True, check=True).stdout.splitlines()[-1]
                samples[kind].setdefault(f"{operation} cold, new process", []).append(json.loads(output)["seconds"])
    return {kind: {key: median_ms(values) for key, values in by_key.items()} for kind, by_key in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=100, help="Lance tables, and as many plain Iceberg tables")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--child", choices=["bridge", "reference"], help=argparse.SUPPRESS)
    parser.add_argument("--operation", choices=["list", "describe"], help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--table", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.operation, args.endpoint, args.root, args.table)
        return

    with (
        tempfile.TemporaryDirectory() as work,
        local_catalog(Path(work) / "catalog", prefix_style="defaults") as server,
    ):
        root = str(Path(work) / "lance")
        names = populate(server.endpoint, root, args.tables)
        request = ListTablesRequest(id=[WAREHOUSE, NAMESPACE])
        for kind in ("reference", "bridge"):
            listed = sorted(make_namespace(kind, server.endpoint, root).list_tables(request).tables)
            assert listed == sorted(names), f"{kind} listing is wrong"

        makers = {
            kind: (lambda kind=kind: make_namespace(kind, server.endpoint, root)) for kind in ("reference", "bridge")
        }
        measure(makers, names[:10], 2)  # warm up the server's JIT with both clients before timing either
        results = measure_new_process(server.endpoint, root, names, args.repeat)
        for kind, figures in measure(makers, names, args.repeat).items():
            results[kind].update(figures)

    print(f"{args.tables} Lance + {args.tables} plain Iceberg tables in one namespace; medians in milliseconds")
    print(f"{'measure':<28}{'reference':>11}{'bridge':>11}{'speed-up':>10}")
    order = [
        "list cold, new process",
        "list cold",
        "list warm",
        "describe cold, new process",
        "describe cold",
        "describe warm",
    ]
    labels = {"list cold": "list cold, new object", "describe cold": "describe cold, new object"}
    for key in order:
        ref, ours_ms = results["reference"][key], results["bridge"][key]
        print(f"{labels.get(key, key):<28}{ref:>11.2f}{ours_ms:>11.2f}{ref / ours_ms:>9.1f}x")
    print("targets: list cold, new object >= 3x, list warm >= 10x, describe time <= 1.5x (2x in a new process);")
    print("list cold in a new process: for information here, its target is at 20 ms round trips (bench/latency.py)")


if __name__ == "__main__":
    main()
