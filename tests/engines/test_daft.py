"""Daft through the catalog (daft-lance): write and read Lance tables by table id, in process with
``namespace_impl="iceberg"`` and through ``lance-iceberg-ns serve`` with ``namespace_impl="rest"``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from lance_namespace import DescribeTableRequest, ListTablesRequest
from lance_namespace.errors import TableAlreadyExistsError

from lance_iceberg_ns import IcebergLanceNamespace

if TYPE_CHECKING:
    from lance_iceberg_ns.server import RunningServer

daft = pytest.importorskip("daft", reason="the Daft tests need the 'daft' extra")
daft_lance = pytest.importorskip("daft_lance", reason="the Daft tests need the 'daft' extra")


def frame(start: int, count: int) -> Any:
    return daft.from_pydict({"id": list(range(start, start + count)), "label": [f"row {i}" for i in range(count)]})


def in_process(ns: IcebergLanceNamespace, table: list[str]) -> dict[str, Any]:
    return {"namespace_impl": "iceberg", "namespace_properties": ns.properties, "table_id": table}


def served(server: RunningServer, table: list[str]) -> dict[str, Any]:
    return {"namespace_impl": "rest", "namespace_properties": {"uri": server.uri}, "table_id": table}


def test_write_and_read_in_process(ns: IcebergLanceNamespace, db: list[str]) -> None:
    table = [*db, "events"]
    daft_lance.write_lance(frame(0, 300), **in_process(ns, table)).collect()
    daft_lance.write_lance(frame(300, 50), mode="append", **in_process(ns, table)).collect()

    assert ns.list_tables(ListTablesRequest(id=db)).tables == ["events"]
    read = daft_lance.read_lance(**in_process(ns, table))
    assert read.count_rows() == 350
    assert read.where(daft.col("id") >= 340).count_rows() == 10
    assert ns.dataset(table).count_rows() == 350

    daft_lance.write_lance(frame(0, 5), mode="overwrite", **in_process(ns, table)).collect()
    assert daft_lance.read_lance(**in_process(ns, table)).count_rows() == 5


def test_create_over_an_existing_table_is_refused(ns: IcebergLanceNamespace, db: list[str]) -> None:
    table = [*db, "taken"]
    daft_lance.write_lance(frame(0, 10), **in_process(ns, table)).collect()
    with pytest.raises(TableAlreadyExistsError):
        daft_lance.write_lance(frame(0, 10), **in_process(ns, table)).collect()
    assert ns.dataset(table).count_rows() == 10


def test_write_and_read_through_the_server(ns: IcebergLanceNamespace, db: list[str], server: RunningServer) -> None:
    table = [*db, "served"]
    daft_lance.write_lance(frame(0, 200), **served(server, table)).collect()
    daft_lance.write_lance(frame(200, 20), mode="append", **served(server, table)).collect()

    assert daft_lance.read_lance(**served(server, table)).count_rows() == 220
    assert ns.dataset(table).count_rows() == 220  # the same table in the catalog
    assert daft_lance.read_lance(**in_process(ns, table)).where(daft.col("id") < 7).count_rows() == 7


def test_a_table_whose_versions_the_catalog_manages_takes_daft_writes_through_the_catalog(
    endpoint: str, lance_root: Path, db: list[str]
) -> None:
    """Daft commits through the namespace: the catalog names every version, so the next commit
    through the catalog is accepted (one by location behind it would be refused)."""
    import lance
    import pyarrow as pa

    managing = IcebergLanceNamespace(endpoint=endpoint, root=str(lance_root), table_version_management="true")
    table = [*db, "managed"]
    daft_lance.write_lance(frame(0, 30), **in_process(managing, table)).collect()
    daft_lance.write_lance(frame(30, 5), mode="append", **in_process(managing, table)).collect()

    more = pa.table({"id": pa.array([99], pa.int64()), "label": pa.array(["through the catalog"], pa.large_string())})
    lance.write_dataset(more, namespace_client=managing, table_id=table, mode="append")
    assert managing.describe_table(DescribeTableRequest(id=table, load_detailed_metadata=True)).version == 3
    assert daft_lance.read_lance(**in_process(managing, table)).count_rows() == 36


def test_a_failed_create_leaves_the_table_declared_and_overwrite_fills_it(
    ns: IcebergLanceNamespace, db: list[str]
) -> None:
    """daft-lance declares the table before its query runs; the docs give the way out."""
    table = [*db, "failed"]

    @daft.func
    def bad_row(value: int) -> int:
        raise ValueError("a bad row")

    with pytest.raises(Exception, match="a bad row"):
        daft_lance.write_lance(
            frame(0, 3).with_column("id", bad_row(daft.col("id"))), **in_process(ns, table)
        ).collect()
    assert ns.describe_table(DescribeTableRequest(id=table, check_declared=True)).is_only_declared
    with pytest.raises(TableAlreadyExistsError):
        daft_lance.write_lance(frame(0, 3), **in_process(ns, table)).collect()
    daft_lance.write_lance(frame(0, 3), mode="overwrite", **in_process(ns, table)).collect()
    assert ns.dataset(table).count_rows() == 3
