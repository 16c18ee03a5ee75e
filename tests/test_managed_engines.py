"""Managed tables and other engines: every reader sees the version the catalog names right after
each commit, and a writer that went by location is refused by name at the next commit through
the namespace, in process and through the server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

from lance_iceberg_ns import IcebergLanceNamespace


@pytest.fixture
def properties(endpoint: str, lance_root: Path) -> dict[str, str]:
    return {"endpoint": endpoint, "root": str(lance_root), "table_version_management": "true"}


@pytest.fixture
def managed_ns(properties: dict[str, str], db: list[str]) -> Iterator[IcebergLanceNamespace]:
    with IcebergLanceNamespace(**properties) as ns:
        yield ns


def _rows(start: int, count: int) -> pa.Table:
    return pa.table({"id": list(range(start, start + count))})


def _append(ns: IcebergLanceNamespace, table_id: list[str], rows: pa.Table) -> None:
    lance.write_dataset(rows, namespace_client=ns, table_id=table_id, mode="append")


def _duckdb_count(location: str) -> int:
    """DuckDB's Lance extension reading the location, on a connection of its own: a connection
    keeps the version it first read of a path, for any Lance dataset."""
    duckdb = pytest.importorskip("duckdb")
    extension = pytest.importorskip("duckdb_extension_lance")
    found = sorted(Path(extension.__file__).parent.glob("extensions/*/lance.duckdb_extension"))
    with duckdb.connect(config={"allow_unsigned_extensions": "true"}) as connection:
        connection.execute(f"LOAD '{found[-1]}'")
        return int(connection.execute(f"SELECT count(*) FROM '{location}'").fetchall()[0][0])


def _latest(ns: IcebergLanceNamespace, table_id: list[str]) -> int | None:
    return ns.describe_table({"id": table_id, "load_detailed_metadata": True}).version


# --- readers ------------------------------------------------------------------------------------


def test_readers_by_location_and_describe_table_see_each_append_at_once(
    managed_ns: IcebergLanceNamespace, db: list[str]
) -> None:
    table_id = [*db, "events"]
    location = lance.write_dataset(_rows(0, 100), namespace_client=managed_ns, table_id=table_id).uri
    for version, expected in ((1, 100), (2, 110), (3, 120)):
        if version > 1:
            _append(managed_ns, table_id, _rows(expected - 10, 10))
        assert lance.dataset(location).count_rows() == expected
        assert lance.dataset(location).version == version
        assert _duckdb_count(location) == expected
        assert _latest(managed_ns, table_id) == version
        assert managed_ns.describe_table({"id": table_id}).location == location
        assert lance.dataset(namespace_client=managed_ns, table_id=table_id).count_rows() == expected


# --- Spark --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark", reason="the Spark tests need the 'spark' extra")
    from lance_iceberg_ns.spark import local_spark_session

    session = local_spark_session("managed tables and engines", "local[2]", {"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


def test_read_lance_reads_the_version_the_catalog_names_after_each_append(
    spark: Any, managed_ns: IcebergLanceNamespace, properties: dict[str, str], db: list[str]
) -> None:
    from lance_iceberg_ns.spark import read_lance, write_lance

    table_id = [*db, "events"]
    location = lance.write_dataset(_rows(0, 100), namespace_client=managed_ns, table_id=table_id).uri
    assert read_lance(spark, properties, table_id).count() == 100
    _append(managed_ns, table_id, _rows(100, 10))  # pylance through the namespace
    assert read_lance(spark, properties, table_id).count() == 110
    written = write_lance(spark.range(110, 130), properties, table_id, mode="append")  # Spark through the catalog
    assert (written.version, written.rows) == (3, 130)
    assert read_lance(spark, properties, table_id).count() == 130
    assert lance.dataset(location).count_rows() == 130 and _duckdb_count(location) == 130
    assert read_lance(spark, properties, table_id, version=2).count() == 110


def test_the_spark_data_source_reads_the_version_the_catalog_names_after_each_append(
    spark: Any, managed_ns: IcebergLanceNamespace, properties: dict[str, str], db: list[str]
) -> None:
    import pyspark

    if int(pyspark.__version__.split(".")[0]) < 4:
        pytest.skip("Python data sources arrived in PySpark 4")
    from lance_iceberg_ns.spark_source import register_lance_data_source

    register_lance_data_source(spark)
    table_id = [*db, "events"]
    options = {**properties, "table": ".".join(table_id)}
    location = lance.write_dataset(_rows(0, 100), namespace_client=managed_ns, table_id=table_id).uri
    assert spark.read.format("lance").options(**options).load().count() == 100
    _append(managed_ns, table_id, _rows(100, 10))
    assert spark.read.format("lance").options(**options).load().count() == 110
    spark.range(110, 120).write.format("lance").options(**options).mode("append").save()
    assert spark.read.format("lance").options(**options).load().count() == 120
    assert _latest(managed_ns, table_id) == 3
    assert lance.dataset(location).count_rows() == 120 and _duckdb_count(location) == 120
