"""The main job, end to end on the embedded local catalog: start the catalog, create a namespace,
write a Lance table through the namespace with pylance, list, describe, read back."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.compute as pc
from lance_namespace import (
    CreateNamespaceRequest,
    DescribeTableRequest,
    ListNamespacesRequest,
    ListTablesRequest,
)

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.testing import local_catalog


def _sample_orders(start: int, count: int) -> pa.Table:
    ids = pa.array(range(start, start + count), pa.int64())
    return pa.table(
        {
            "order_id": ids,
            "customer": pa.array([f"customer-{i % 7}" for i in range(start, start + count)]),
            "amount": pc.multiply(pc.cast(ids, pa.float64()), 1.5),
        }
    )


def run_demo(data_dir: str | None = None, say=print) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Run the demo and return what it observed (the tests check it)."""
    work = Path(data_dir or tempfile.mkdtemp(prefix="lance-iceberg-ns-demo-")).absolute()
    started = time.perf_counter()
    with local_catalog(work / "catalog", prefix_style="defaults") as catalog:
        say(f"1. Local Iceberg REST catalog listening at {catalog.endpoint} (data in {catalog.data_dir})")
        ns = IcebergLanceNamespace(endpoint=catalog.endpoint, root=str(work / "lance"))
        table_id = ["demo_wh", "sales", "orders"]

        ns.create_namespace(
            CreateNamespaceRequest(id=["demo_wh", "sales"], mode="exist_ok", properties={"owner": "demo"})
        )
        namespaces = ns.list_namespaces(ListNamespacesRequest(id=["demo_wh"])).namespaces
        say(f"2. Namespaces in warehouse demo_wh: {namespaces}")

        existing = ns.list_tables(ListTablesRequest(id=["demo_wh", "sales"])).tables
        mode = "overwrite" if "orders" in existing else "create"
        lance.write_dataset(_sample_orders(0, 1000), namespace_client=ns, table_id=table_id, mode=mode)
        lance.write_dataset(_sample_orders(1000, 500), namespace_client=ns, table_id=table_id, mode="append")
        say(f"3. Wrote {table_id} with pylance through the namespace ({mode}, then append)")

        tables = ns.list_tables(ListTablesRequest(id=["demo_wh", "sales"])).tables
        say(f"4. Lance tables in demo_wh.sales: {tables}")

        described = ns.describe_table(DescribeTableRequest(id=table_id, load_detailed_metadata=True))
        assert described.version is not None  # detailed metadata carries the version
        columns = [field.name for field in described.var_schema.fields] if described.var_schema else []
        say(f"5. describe_table: location={described.location} version={described.version} columns={columns}")
        say(f"   catalog properties: {described.properties}")

        dataset = lance.dataset(namespace_client=ns, table_id=table_id)
        rows = dataset.count_rows()
        top = dataset.to_table(filter="amount > 2000", columns=["order_id", "amount"]).num_rows
        first_version_rows = lance.dataset(
            namespace_client=ns, table_id=table_id, version=described.version - 1
        ).count_rows()
        say(f"6. Read back: {rows} rows now, {first_version_rows} rows at version {described.version - 1}, "
            f"{top} orders over 2000")  # fmt: skip
        ns.close()
    say(f"Done in {time.perf_counter() - started:.1f} s.")
    return {"namespaces": namespaces, "tables": tables, "rows": rows, "version": described.version}
