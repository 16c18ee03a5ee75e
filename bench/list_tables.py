"""list_tables and describe_table: this bridge against lance-namespace-impls' IcebergNamespace.

One run on the local Iceberg REST catalog (prefix in the config defaults, which the reference
needs), with 100 Lance tables and 100 plain Iceberg tables in one namespace. "Cold" is the first
call on a fresh namespace object (config fetch included); "warm" is repeated calls on one object.
Both implementations are checked to return the same tables before anything is timed.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/list_tables.py [--tables 100] [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
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


def measure(make: Callable[[], Any], names: list[str], repeat: int) -> dict[str, float]:
    list_request = ListTablesRequest(id=[WAREHOUSE, NAMESPACE])

    def describe(ns: Any, name: str) -> Any:
        return ns.describe_table(DescribeTableRequest(id=[WAREHOUSE, NAMESPACE, name]))

    cold_list, cold_describe = [], []
    for i in range(repeat):
        ns = make()
        cold_list.append(time_call(lambda ns=ns: ns.list_tables(list_request)))
        fresh = make()
        cold_describe.append(time_call(lambda fresh=fresh, i=i: describe(fresh, names[i % len(names)])))
    ns = make()
    ns.list_tables(list_request)
    warm_list = [time_call(lambda: ns.list_tables(list_request)) for _ in range(repeat * 3)]
    describe(ns, names[0])
    warm_describe = [time_call(lambda name=name: describe(ns, name)) for name in names * 2]
    return {
        "list cold": median_ms(cold_list),
        "list warm": median_ms(warm_list),
        "describe cold": median_ms(cold_describe),
        "describe warm": median_ms(warm_describe),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=100, help="Lance tables, and as many plain Iceberg tables")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as work, local_catalog(Path(work) / "catalog", prefix_style="defaults") as server:
        root = str(Path(work) / "lance")
        names = populate(server.endpoint, root, args.tables)

        def ours() -> IcebergLanceNamespace:
            return IcebergLanceNamespace(endpoint=server.endpoint, root=root)

        def reference() -> IcebergNamespace:
            return IcebergNamespace(endpoint=server.endpoint, root=root)

        request = ListTablesRequest(id=[WAREHOUSE, NAMESPACE])
        expected = sorted(names)
        assert ours().list_tables(request).tables == expected, "bridge listing is wrong"
        assert sorted(reference().list_tables(request).tables) == expected, "reference listing is wrong"

        # Warm up the server's JIT with both clients before timing either.
        for make in (ours, reference):
            measure(make, names[:10], 2)
        results = {"reference": measure(reference, names, args.repeat), "bridge": measure(ours, names, args.repeat)}

    print(f"{args.tables} Lance + {args.tables} plain Iceberg tables in one namespace; median of runs, milliseconds")
    print(f"{'measure':<16}{'reference':>12}{'bridge':>12}{'speed-up':>12}")
    for key in results["bridge"]:
        ref, ours_ms = results["reference"][key], results["bridge"][key]
        print(f"{key:<16}{ref:>12.2f}{ours_ms:>12.2f}{ref / ours_ms:>11.1f}x")
    print("targets: list cold >= 3x, list warm >= 10x, describe >= 1.0x")


if __name__ == "__main__":
    main()
