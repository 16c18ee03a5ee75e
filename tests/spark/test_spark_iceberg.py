"""Spark's own Iceberg catalog (``type=rest``, with Apache Iceberg's official Spark runtime from
Maven Central) on the catalog the bridge uses: what its SQL does to a Lance table's companion, and
to Spark's own Iceberg tables beside it. Lance's files stay byte for byte what they were, and the
table keeps reading its rows, whatever Spark is asked: writes are refused ("Invalid file format:
lance"), garbage collection is refused ("GC is disabled"), and a plain DROP TABLE only removes the
entry; Spark's Iceberg tables in the same namespace are written and maintained as usual.

The protection is table properties, which a client allowed to change them can turn off (``ALTER
TABLE ... SET TBLPROPERTIES ('gc.enabled'='true')`` is accepted): until the bridge's next operation
on the table (or ``tables protect``) restores it, and until Spark's catalog cache lets go of the
table as the session altered it, Spark would delete the Lance table's data files. Shown here with
a dry run, and ``tables protect --check`` finding it meanwhile.

Runs on the environment's PySpark with the runtime pinned for it
(``lance_iceberg_ns.testing.iceberg_spark``): Spark 4.1 in the main environment, and Spark 3.5 in
``.venv-pyspark35`` (``scripts/test.sh``)."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

pyspark = pytest.importorskip("pyspark", reason="the Spark tests need the 'spark' extra")

import lance  # noqa: E402
import pyarrow as pa  # noqa: E402
from lance_namespace import CreateNamespaceRequest, DescribeTableRequest  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from lance_iceberg_ns import IcebergLanceNamespace  # noqa: E402
from lance_iceberg_ns.spark import local_spark_session  # noqa: E402
from lance_iceberg_ns.testing import LocalCatalogUnavailable  # noqa: E402
from lance_iceberg_ns.testing.iceberg_spark import iceberg_spark_runtime, iceberg_spark_runtime_jar  # noqa: E402

from ..helpers import CommandLine, files_under, fresh_spark_jvm, other_client  # noqa: E402

try:
    RUNTIME = iceberg_spark_runtime(pyspark.__version__)
except LocalCatalogUnavailable as unpinned:  # a PySpark the project's extras do not install
    pytest.skip(str(unpinned), allow_module_level=True)
SPARK = tuple(int(part) for part in pyspark.__version__.split(".")[:2])
# Spark 4.1 keeps the table property table_type for its own use and hides a catalog's value
CATALOG_TABLE_TYPE_SHOWN = "lance" if SPARK < (4, 1) else None

ROWS = 1000
TEN_DAYS_AGO = (datetime.now() - timedelta(days=10)).timestamp()


@dataclass(frozen=True)
class Lake:
    """A SparkSession whose catalog ``lake`` is the warehouse ``warehouse`` of the local catalog,
    and the bridge on the same warehouse."""

    spark: SparkSession
    warehouse: str
    endpoint: str
    root: Path

    def namespace(self, **properties: str) -> IcebergLanceNamespace:
        return IcebergLanceNamespace(endpoint=self.endpoint, root=str(self.root), **properties)


@pytest.fixture(scope="module")
def lake(catalog_server: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    endpoint = catalog_server.endpoint  # type: ignore[attr-defined]
    warehouse = f"wh_{uuid.uuid4().hex[:10]}"
    fresh_spark_jvm()
    session = local_spark_session(
        "lance-iceberg-ns: Spark's Iceberg catalog",
        config={
            "spark.sql.shuffle.partitions": "2",
            "spark.jars": str(iceberg_spark_runtime_jar(pyspark.__version__)),
            "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
            "spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
            "spark.sql.catalog.lake.type": "rest",
            "spark.sql.catalog.lake.uri": endpoint,
            "spark.sql.catalog.lake.warehouse": warehouse,
        },
    )
    yield Lake(session, warehouse, endpoint, tmp_path_factory.mktemp("lance"))
    session.stop()
    fresh_spark_jvm()  # the next module's Spark starts without the Iceberg extensions


def _refused(lake: Lake, sql: str) -> str:
    """Run ``sql``; it must fail. The message of Spark's error (Java's, for a call into Iceberg)."""
    with pytest.raises(Exception) as failure:  # noqa: PT011  (Py4J or PySpark's own error classes)
        lake.spark.sql(sql).collect()
    java = getattr(failure.value, "java_exception", None)
    return str(java) if java is not None else str(failure.value)


def _aged(location: Path) -> dict[str, str]:
    """Make every file at ``location`` ten days old, so that an orphan-file cleanup with a cutoff of
    a day would take every one it considers an orphan; its files, byte for byte."""
    for path in location.rglob("*"):
        os.utime(path, (TEN_DAYS_AGO, TEN_DAYS_AGO), follow_symlinks=False)
    return files_under(location)


def test_spark_sql_on_a_companion_leaves_the_lance_table_intact(lake: Lake) -> None:
    ns = lake.namespace()
    db = f"db_{uuid.uuid4().hex[:8]}"
    ns.create_namespace(CreateNamespaceRequest(id=[lake.warehouse, db]))
    table_id = [lake.warehouse, db, "events"]
    rows = pa.table({"id": list(range(ROWS)), "name": [f"n{i}" for i in range(ROWS)]})
    location = Path(lance.write_dataset(rows, namespace_client=ns, table_id=table_id).uri)
    before = _aged(location)
    # Iceberg's own files of the companion are in metadata/, a folder Lance never uses
    assert sorted({name.split("/")[0] for name in before}) == [
        ".lance-iceberg-ns-owner.json",
        "_transactions",
        "_versions",
        "data",
        "metadata",
    ]
    assert all(name.endswith(".metadata.json") for name in before if name.startswith("metadata/"))
    table = f"lake.{db}.events"
    yesterday = (datetime.now() - timedelta(days=1)).strftime("%Y-%m-%d %H:%M:%S")

    def intact() -> None:
        assert files_under(location) == before
        assert lance.dataset(str(location)).to_table() == rows

    # harmless: Spark lists the companion and reads it as an empty table
    assert [row.tableName for row in lake.spark.sql(f"SHOW TABLES IN lake.{db}").collect()] == ["events"]
    assert lake.spark.sql(f"SELECT count(*) AS n FROM {table}").collect()[0].n == 0
    properties = dict(lake.spark.sql(f"SHOW TBLPROPERTIES {table}").collect())
    assert (properties["gc.enabled"], properties["write.format.default"], properties["format"]) == (
        "false",
        "lance",
        "iceberg/lance",
    )
    assert properties.get("table_type") == CATALOG_TABLE_TYPE_SHOWN
    intact()

    assert "Invalid file format: lance" in _refused(lake, f"INSERT INTO {table} VALUES ('x')")
    intact()
    assert "Invalid file format: lance" in _refused(lake, f"INSERT OVERWRITE {table} VALUES ('x')")
    intact()
    for older_than in (yesterday, "2100-01-01 00:00:00"):
        refused = _refused(
            lake,
            f"CALL lake.system.remove_orphan_files(table => '{db}.events', older_than => TIMESTAMP '{older_than}')",
        )
        assert "Cannot delete orphan files: GC is disabled" in refused
        intact()
    refused = _refused(
        lake,
        f"CALL lake.system.expire_snapshots(table => '{db}.events', "
        "older_than => TIMESTAMP '2100-01-01 00:00:00', retain_last => 1)",
    )
    assert "Cannot expire snapshots: GC is disabled" in refused
    intact()
    assert "Cannot purge table: GC is disabled" in _refused(lake, f"DROP TABLE {table} PURGE")
    intact()
    assert ns.describe_table(DescribeTableRequest(id=table_id)).location  # the entry is still there

    # a plain DROP TABLE removes the catalog entry only (no trash: Spark never asks the bridge)
    lake.spark.sql(f"DROP TABLE {table}").collect()
    assert not other_client(lake.endpoint, lake.warehouse).table_exists((db, "events"))
    intact()


def test_spark_cannot_expire_or_write_the_versions_of_a_managed_table(lake: Lake) -> None:
    ns = lake.namespace(table_version_management="true")
    db = f"db_{uuid.uuid4().hex[:8]}"
    ns.create_namespace(CreateNamespaceRequest(id=[lake.warehouse, db]))
    table_id = [lake.warehouse, db, "orders"]
    location = Path(lance.write_dataset(pa.table({"id": [1, 2]}), namespace_client=ns, table_id=table_id).uri)
    lance.write_dataset(pa.table({"id": [3]}), namespace_client=ns, table_id=table_id, mode="append")
    before = _aged(location)
    table = f"lake.{db}.orders"
    # the two latest Lance versions are snapshots, the companion's main branch at the latest
    lance_versions = lake.spark.sql(f"SELECT summary['lance.version'] AS v FROM {table}.snapshots ORDER BY v").collect()
    assert [row.v for row in lance_versions] == ["1", "2"]

    assert "Invalid file format: lance" in _refused(lake, f"INSERT INTO {table} VALUES ('x')")
    refused = _refused(
        lake,
        f"CALL lake.system.expire_snapshots(table => '{db}.orders', "
        "older_than => TIMESTAMP '2100-01-01 00:00:00', retain_last => 1)",
    )
    assert "Cannot expire snapshots: GC is disabled" in refused
    refused = _refused(
        lake, f"CALL lake.system.remove_orphan_files(table => '{db}.orders', older_than => TIMESTAMP '2100-01-01')"
    )
    assert "Cannot delete orphan files: GC is disabled" in refused
    assert files_under(location) == before
    assert [v.version for v in ns.list_table_versions({"id": table_id}).versions] == [1, 2]
    assert lance.dataset(namespace_client=ns, table_id=table_id).to_table()["id"].to_pylist() == [1, 2, 3]


def _lance_table_beside(lake: Lake, db: str) -> tuple[IcebergLanceNamespace, Path, Callable[[], None]]:
    """A Lance table ``events`` in the new namespace ``db``, aged; the namespace, its location and a
    check that its files are byte for byte what they were and it still reads its rows."""
    ns = lake.namespace()
    ns.create_namespace(CreateNamespaceRequest(id=[lake.warehouse, db]))
    rows = pa.table({"id": list(range(ROWS))})
    location = Path(lance.write_dataset(rows, namespace_client=ns, table_id=[lake.warehouse, db, "events"]).uri)
    before = _aged(location)

    def intact() -> None:
        assert files_under(location) == before
        assert lance.dataset(str(location)).to_table() == rows

    return ns, location, intact


def _sql(lake: Lake, sql: str) -> list[Any]:
    return lake.spark.sql(sql).collect()


def test_spark_lists_lance_tables_as_empty_companions_beside_the_iceberg_tables_it_writes(lake: Lake) -> None:
    db = f"db_{uuid.uuid4().hex[:8]}"
    ns, _, intact = _lance_table_beside(lake, db)
    _sql(lake, f"CREATE TABLE lake.{db}.clicks (id BIGINT, page STRING) USING iceberg")
    _sql(lake, f"INSERT INTO lake.{db}.clicks VALUES (1, 'home'), (2, 'cart')")

    # SHOW TABLES lists both alike; the Lance table is its companion: one column, no rows, table_type=lance
    assert sorted(row.tableName for row in _sql(lake, f"SHOW TABLES IN lake.{db}")) == ["clicks", "events"]
    assert [row.col_name for row in _sql(lake, f"DESCRIBE TABLE lake.{db}.events")] == ["dummy"]
    assert _sql(lake, f"SELECT count(*) AS n FROM lake.{db}.events")[0].n == 0
    assert dict(_sql(lake, f"SHOW TBLPROPERTIES lake.{db}.events")).get("table_type") == CATALOG_TABLE_TYPE_SHOWN
    assert sorted(_sql(lake, f"SELECT id, page FROM lake.{db}.clicks")) == [(1, "home"), (2, "cart")]
    clicks = other_client(lake.endpoint, lake.warehouse).load_table((db, "clicks")).properties
    events = other_client(lake.endpoint, lake.warehouse).load_table((db, "events")).properties
    assert (events["table_type"], clicks.get("table_type", "").lower()) == ("lance", "")  # in the catalog
    # the bridge lists only the Lance tables
    assert ns.list_tables({"id": [lake.warehouse, db]}).tables == ["events"]
    intact()


def test_spark_maintenance_of_its_iceberg_tables_leaves_the_lance_tables_beside_them_intact(lake: Lake) -> None:
    db = f"db_{uuid.uuid4().hex[:8]}"
    _, _, intact = _lance_table_beside(lake, db)
    table = f"lake.{db}.clicks"
    _sql(lake, f"CREATE TABLE {table} (id BIGINT, page STRING) USING iceberg")
    for i in range(3):
        _sql(lake, f"INSERT INTO {table} VALUES ({i}, 'page{i}')")
    location = Path(urlparse(other_client(lake.endpoint, lake.warehouse).load_table((db, "clicks")).location()).path)
    assert _sql(lake, f"SELECT count(*) AS n FROM {table}.snapshots")[0].n == 3

    expired = _sql(
        lake,
        f"CALL lake.system.expire_snapshots(table => '{db}.clicks', "
        "older_than => TIMESTAMP '2100-01-01 00:00:00', retain_last => 1)",
    )
    assert expired[0].deleted_manifest_lists_count == 2
    assert _sql(lake, f"SELECT count(*) AS n FROM {table}.snapshots")[0].n == 1
    assert _sql(lake, f"SELECT count(*) AS n FROM {table}")[0].n == 3
    intact()

    stray = location / "data" / "stray.parquet"  # a file no snapshot references, ten days old
    stray.write_bytes(b"not referenced")
    os.utime(stray, (TEN_DAYS_AGO, TEN_DAYS_AGO))
    yesterday = (datetime.now() - timedelta(days=1)).strftime("%Y-%m-%d %H:%M:%S")
    removed = _sql(
        lake, f"CALL lake.system.remove_orphan_files(table => '{db}.clicks', older_than => TIMESTAMP '{yesterday}')"
    )
    assert [urlparse(row.orphan_file_location).path for row in removed] == [str(stray)]
    assert not stray.exists() and _sql(lake, f"SELECT count(*) AS n FROM {table}")[0].n == 3
    intact()

    _sql(lake, f"DROP TABLE {table} PURGE")  # Spark's own table: its data files go with it
    assert not [name for name in files_under(location) if name.startswith("data/")]
    assert [row.tableName for row in _sql(lake, f"SHOW TABLES IN lake.{db}")] == ["events"]
    intact()


def test_gc_turned_on_by_alter_table_is_found_then_restored_by_the_next_bridge_read(
    lake: Lake, cli: CommandLine, caplog: pytest.LogCaptureFixture
) -> None:
    db = f"db_{uuid.uuid4().hex[:8]}"
    ns, location, _ = _lance_table_beside(lake, db)
    before = files_under(location)
    table_id, table = [lake.warehouse, db, "events"], f"lake.{db}.events"
    name = ".".join(table_id)
    yesterday = (datetime.now() - timedelta(days=1)).strftime("%Y-%m-%d %H:%M:%S")

    def orphans(catalog: str = "lake", dry_run: bool = True) -> str:
        return (
            f"CALL {catalog}.system.remove_orphan_files(table => '{db}.events', "
            f"older_than => TIMESTAMP '{yesterday}', dry_run => {str(dry_run).lower()})"
        )

    _sql(lake, f"ALTER TABLE {table} SET TBLPROPERTIES ('gc.enabled'='true')")  # accepted: Spark may
    # the window: Spark would now delete the Lance table's data files as orphans (a dry run only lists them)
    data_files = sorted(str(location / path) for path in before if path.startswith("data/"))
    would_delete = _sql(lake, orphans())
    assert sorted(urlparse(row.orphan_file_location).path for row in would_delete) == data_files
    found = cli.json("tables", "protect", "--check", lake.warehouse, db, code=1)
    assert found["unprotected"] == [{"table": name, "missing": ["gc.enabled"]}]

    caplog.set_level(logging.WARNING, logger="lance_iceberg_ns.catalog.companions")
    assert lance.dataset(namespace_client=ns, table_id=table_id).count_rows() == ROWS  # a read through the bridge
    (warning,) = [
        record.getMessage()
        for record in caplog.records
        if record.name.startswith("lance_iceberg_ns") and record.levelno >= logging.WARNING
    ]
    assert f"Lance table {name} had its protection from Iceberg engines turned off" in warning
    assert "(gc.enabled changed): restored gc.enabled=false" in warning
    assert cli.json("tables", "protect", "--check", lake.warehouse, db)["unprotected"] == []  # exit 0
    assert other_client(lake.endpoint, lake.warehouse).load_table((db, "events")).properties["gc.enabled"] == "false"

    # Spark's catalog cache (cache-enabled, its default) keeps the table as this session altered it
    # until REFRESH TABLE, or until it goes unused for cache.expiration-interval-ms (30 s); a catalog
    # without the cache sees the protection at once
    assert len(_sql(lake, orphans())) == len(data_files)
    uncached = {"": "org.apache.iceberg.spark.SparkCatalog", ".type": "rest", ".uri": lake.endpoint}
    uncached |= {".warehouse": lake.warehouse, ".cache-enabled": "false"}
    for key, value in uncached.items():
        lake.spark.conf.set(f"spark.sql.catalog.uncached{key}", value)
    assert "Cannot delete orphan files: GC is disabled" in _refused(lake, orphans("uncached"))
    _sql(lake, f"REFRESH TABLE {table}")
    assert dict(_sql(lake, f"SHOW TBLPROPERTIES {table}"))["gc.enabled"] == "false"
    for dry_run in (True, False):
        assert "Cannot delete orphan files: GC is disabled" in _refused(lake, orphans(dry_run=dry_run))
    refused = _refused(
        lake,
        f"CALL lake.system.expire_snapshots(table => '{db}.events', "
        "older_than => TIMESTAMP '2100-01-01 00:00:00', retain_last => 1)",
    )
    assert "Cannot expire snapshots: GC is disabled" in refused
    assert "Cannot purge table: GC is disabled" in _refused(lake, f"DROP TABLE {table} PURGE")
    after = files_under(location)
    assert {path: after.get(path) for path in before} == before  # every file byte for byte
    assert all(path.startswith("metadata/") for path in set(after) - set(before))  # the catalog's two commits
    assert lance.dataset(str(location)).count_rows() == ROWS
