"""Spark writes and reads Lance tables of the catalog, on local[2] with task retries allowed."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark", reason="the Spark tests need the 'spark' extra")

import lance  # noqa: E402
from lance_namespace.errors import InvalidInputError  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.types import LongType  # noqa: E402

from lance_iceberg_ns import IcebergLanceNamespace  # noqa: E402
from lance_iceberg_ns.spark import local_spark_session, read_lance, write_lance  # noqa: E402

from ..helpers import other_client  # noqa: E402

ALL_TYPES = """
select id,
       cast(id as int) as i, cast(id as smallint) as small, cast(id * 1.5 as double) as x,
       cast(id * 0.5 as float) as f, id % 2 = 0 as flag,
       cast(id as string) as s, cast(concat('b', id) as binary) as raw,
       cast(id / 7 as decimal(18, 4)) as price,
       timestamp'2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) as ts,
       date'2024-01-01' + cast(id % 100 as int) as day,
       array(id, id + 1) as ids,
       array(cast(id as float), cast(id + 1 as float), cast(id + 2 as float)) as embedding,
       named_struct('a', id, 'b', cast(id as string), 'c', array(cast(id as double))) as nested,
       map('k', cast(id as string)) as tags,
       if(id % 3 = 0, null, id) as maybe,
       if(id % 4 = 0, null, cast(id as string)) as maybe_text
from range({rows})
"""


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    # local[2,3]: 3 attempts per task, so retries happen locally
    session = local_spark_session("lance-iceberg-ns tests", "local[2,3]", {"spark.sql.shuffle.partitions": "4"})
    yield session
    session.stop()


@pytest.fixture
def properties(endpoint: str, lance_root: Path) -> dict[str, str]:
    return {"endpoint": endpoint, "root": str(lance_root)}


def _same(left: DataFrame, right: DataFrame) -> bool:
    return left.exceptAll(right).count() == 0 and right.exceptAll(left).count() == 0


def test_round_trip_of_every_type_is_exact(spark: SparkSession, properties: dict[str, str], db: list[str]) -> None:
    source = spark.sql(ALL_TYPES.format(rows=500)).repartition(3)
    result = write_lance(source, properties, [*db, "all_types"], vector_columns={"embedding": 3})
    assert (result.version, result.rows) == (1, 500) and result.fragments >= 3
    back = read_lance(spark, properties, [*db, "all_types"])
    assert back.schema.simpleString() == source.schema.simpleString()  # vectors come back as array<float>
    # maps have no equality in Spark: compare them as their entries
    assert _same(back.withColumn("tags", F.map_entries("tags")), source.withColumn("tags", F.map_entries("tags")))
    dataset = lance.dataset(result.location)
    assert str(dataset.schema.field("embedding").type) == "fixed_size_list<item: float>[3]"


def test_append_and_overwrite(spark: SparkSession, properties: dict[str, str], db: list[str]) -> None:
    table = [*db, "events"]
    write_lance(spark.range(100), properties, table)
    appended = write_lance(spark.range(100, 150), IcebergLanceNamespace(**properties), table, mode="append")
    assert (appended.version, appended.rows) == (2, 150)
    assert _same(read_lance(spark, properties, table), spark.range(150))
    overwritten = write_lance(spark.range(7), properties, table, mode="overwrite")
    assert (overwritten.version, overwritten.rows) == (3, 7)
    assert read_lance(spark, properties, table, version=2).count() == 150


@pytest.mark.filterwarnings("ignore:Cannot infer the eval type from type hints")  # PySpark 4 on a typed udf
def test_a_task_that_fails_after_writing_files_leaves_no_duplicate_rows(
    spark: SparkSession, properties: dict[str, str], db: list[str], tmp_path: Path
) -> None:
    marker = str(tmp_path / "failed-once")

    @F.udf(LongType())
    def fail_once_late(value: int) -> int:
        # Fails the first attempt of the task holding row 380, after its earlier rows were written.
        if value == 380 and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("injected failure after files were written")
        return value

    # small batches, so that the writer has written files before the failing row reaches it
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    spark.conf.set("spark.sql.execution.python.udf.maxRecordsPerBatch", "50")
    try:
        source = spark.range(0, 400, numPartitions=2).select(fail_once_late("id").alias("id"))
        result = write_lance(source, properties, [*db, "retried"], max_rows_per_file=10)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
        spark.conf.unset("spark.sql.execution.python.udf.maxRecordsPerBatch")
    assert os.path.exists(marker)  # the failure happened, and the task was retried
    assert result.rows == 400
    assert _same(read_lance(spark, properties, [*db, "retried"]), spark.range(400))  # each row once


def test_a_pinned_read_is_not_moved_by_a_concurrent_commit(
    spark: SparkSession, properties: dict[str, str], db: list[str]
) -> None:
    table = [*db, "pinned"]
    write_lance(spark.range(10), properties, table)
    pinned = read_lance(spark, properties, table)  # pins version 1
    write_lance(spark.range(10, 20), properties, table, mode="append")
    assert pinned.count() == 10
    assert read_lance(spark, properties, table).count() == 20


def test_reads_group_fragments_into_even_tasks_for_the_cores(
    spark: SparkSession, properties: dict[str, str], db: list[str]
) -> None:
    table = [*db, "many"]
    source = spark.range(0, 6000, numPartitions=6)
    write_lance(source, properties, table, max_rows_per_file=500)  # 12 fragments of 500 rows
    location = IcebergLanceNamespace(**properties).describe_table({"id": table}).location
    assert len(lance.dataset(location).get_fragments()) == 12
    read = read_lance(spark, properties, table)
    assert read.rdd.getNumPartitions() == spark.sparkContext.defaultParallelism == 2
    assert read.rdd.glom().map(len).collect() == [3000, 3000]  # even tasks
    assert _same(read, source)


def test_projection_and_filter_pushdown_match_sparks_own(
    spark: SparkSession, properties: dict[str, str], db: list[str]
) -> None:
    source = spark.sql(ALL_TYPES.format(rows=300))
    write_lance(source, properties, [*db, "filtered"])
    pushed = read_lance(spark, properties, [*db, "filtered"], columns=["id", "s", "price"], filter="id >= 250 AND flag")
    expected = source.where("id >= 250 AND flag").select("id", "s", "price")
    assert pushed.columns == ["id", "s", "price"]
    assert _same(pushed, expected)


def test_create_over_an_existing_table_is_refused(
    spark: SparkSession, properties: dict[str, str], db: list[str]
) -> None:
    from lance_namespace.errors import TableAlreadyExistsError, TableNotFoundError

    write_lance(spark.range(3), properties, [*db, "once"])
    with pytest.raises(TableAlreadyExistsError):
        write_lance(spark.range(3), properties, [*db, "once"])
    with pytest.raises(TableNotFoundError):
        write_lance(spark.range(3), properties, [*db, "missing"], mode="append")


def test_example_pipeline_runs_end_to_end(tmp_path: Path) -> None:
    import subprocess

    example = Path(__file__).resolve().parents[2] / "examples" / "spark_pipeline.py"
    result = subprocess.run(
        [sys.executable, str(example), "--rows", "2000", "--root", str(tmp_path / "lance")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "wrote 1846 rows" in result.stdout  # rows whose seconds > 0
    assert result.stdout.count("page ") == 3


needs_spark4 = pytest.mark.skipif(
    int(pyspark.__version__.split(".")[0]) < 4, reason="Python data sources arrived in PySpark 4"
)


@pytest.fixture
def lance_format(spark: SparkSession) -> SparkSession:
    """The session with ``format("lance")`` registered."""
    from lance_iceberg_ns.spark.source import register_lance_data_source

    register_lance_data_source(spark)
    return spark


@needs_spark4
def test_spark4_data_source_writes_and_reads_format_lance(
    lance_format: SparkSession, properties: dict[str, str], db: list[str]
) -> None:
    spark = lance_format
    table = ".".join([*db, "via_source"])
    source = spark.sql(ALL_TYPES.format(rows=200)).drop("tags")

    def writer(df: DataFrame, mode: str) -> None:
        options = {**properties, "table": table, "vector_columns": "embedding:3"}
        df.write.format("lance").options(**options).mode(mode).save()

    writer(source, "append")  # creates the missing table
    writer(source.limit(20), "append")
    loaded = spark.read.format("lance").options(**properties, table=table).load()
    assert loaded.count() == 220 and _same(loaded, source.union(source.limit(20)))
    writer(source.limit(5), "overwrite")
    assert spark.read.format("lance").options(**properties, table=table).load().count() == 5
    pushed = spark.read.format("lance").options(**properties, table=table, columns="id,s", filter="id < 3").load()
    assert pushed.columns == ["id", "s"] and pushed.count() == 3
    versions = lance.dataset(IcebergLanceNamespace(**properties).describe_table({"id": table.split(".")}).location)
    assert versions.version == 3


@pytest.mark.filterwarnings("ignore:Cannot infer the eval type from type hints")  # PySpark 4 on a typed udf
@needs_spark4
def test_spark4_data_source_failed_write_commits_nothing(
    lance_format: SparkSession, properties: dict[str, str], db: list[str]
) -> None:
    spark = lance_format
    table = ".".join([*db, "aborted"])
    options = {**properties, "table": table}
    spark.range(10).write.format("lance").options(**options).mode("append").save()

    @F.udf(LongType())
    def always_fails(value: int) -> int:
        raise RuntimeError("injected")

    with pytest.raises(Exception, match="injected"):
        spark.range(10).select(always_fails("id").alias("id")).write.format("lance").options(**options).mode(
            "append"
        ).save()
    assert spark.read.format("lance").options(**options).load().count() == 10  # abort committed nothing


def test_managed_tables_commit_through_the_catalog_and_move_together(
    spark: SparkSession, properties: dict[str, str], db: list[str]
) -> None:
    from lance_iceberg_ns.spark import write_lance_together

    managed = {**properties, "table_version_management": "true"}
    orders, lines = [*db, "orders"], [*db, "lines"]
    first = write_lance(spark.range(10), managed, orders)
    second = write_lance(spark.range(10, 15), managed, orders, mode="append")
    assert (first.version, second.version, second.rows) == (1, 2, 15)
    ns = IcebergLanceNamespace(**managed)
    assert [v.version for v in ns.list_table_versions({"id": orders}).versions] == [1, 2]  # in the catalog

    published = write_lance_together(
        managed, [(spark.range(15, 20), orders, "append"), (spark.range(3), lines, "create")]
    )
    assert [(p.table_id, p.version) for p in published] == [(orders, 3), (lines, 1)]
    assert _same(read_lance(spark, managed, orders), spark.range(20))
    assert _same(read_lance(spark, managed, lines), spark.range(3))
    with pytest.raises(InvalidInputError):  # atomic commits need managed tables
        write_lance_together(properties, [(spark.range(1), [*db, "plain"], "create")])


def test_an_overwrite_may_change_the_schema(spark: SparkSession, properties: dict[str, str], db: list[str]) -> None:
    table = [*db, "reshaped"]
    write_lance(spark.range(5), properties, table)
    names = spark.range(3).select(F.col("id").cast("string").alias("name"))
    assert write_lance(names, properties, table, mode="overwrite").rows == 3
    assert _same(read_lance(spark, properties, table), names)


def test_an_atomic_commit_whose_dataframe_fails_leaves_no_file_behind(
    spark: SparkSession, properties: dict[str, str], db: list[str], lance_root: Path
) -> None:
    from lance_iceberg_ns.spark import write_lance_together

    managed = {**properties, "table_version_management": "true"}
    orders, lines = [*db, "orders"], [*db, "lines"]
    write_lance(spark.range(10), managed, orders)
    write_lance(spark.range(3), managed, lines)
    before = {path for path in lance_root.rglob("*") if path.is_file()}
    not_numbers = spark.range(3).select(F.lit("three").alias("id"))
    with pytest.raises(Exception, match="Rows do not fit table"):  # raised by the executors, after orders' write
        write_lance_together(managed, [(spark.range(10, 20), orders, "append"), (not_numbers, lines, "append")])
    assert {path for path in lance_root.rglob("*") if path.is_file()} == before
    assert _same(read_lance(spark, managed, orders), spark.range(10))


@pytest.mark.parametrize("mode", ["append", "overwrite"])
@pytest.mark.parametrize("managed", [False, True], ids=["unmanaged", "managed"])
def test_planning_a_write_to_an_existing_table_never_counts_its_rows(
    spark: SparkSession,
    properties: dict[str, str],
    db: list[str],
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    managed: bool,
) -> None:
    import pyarrow as pa

    from lance_iceberg_ns.jobs.planned_writes import TableWrite

    settings = {**properties, "table_version_management": str(managed).lower()}
    table = [*db, "events"]
    write_lance(spark.range(1000), settings, table)

    def no_count(*_: object, **__: object) -> int:
        raise AssertionError("a write's plan counted the table's rows")

    monkeypatch.setattr(lance.LanceDataset, "__len__", no_count)
    monkeypatch.setattr(lance.LanceDataset, "count_rows", no_count)
    with IcebergLanceNamespace(**settings) as ns:
        planned = TableWrite.plan(ns, table, mode, pa.schema([("id", pa.int64())]))
    assert (planned.read_version, planned.managed) == (1, managed)


def test_the_first_version_of_a_table_is_written_without_lance_warning_of_it(
    properties: dict[str, str], db: list[str]
) -> None:
    """Each executor's fragments of a new table used to make Lance log "no existing dataset at
    ..., it will be created", once per partition of every write that creates a table."""
    import subprocess

    script = f"""
import pyarrow as pa
from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.jobs.planned_writes import TableWrite
with IcebergLanceNamespace(**{properties!r}) as ns:
    planned = TableWrite.plan(ns, {[*db, "fresh"]!r}, "create", pa.schema([("id", pa.int64())]))
    batches = [pa.record_batch([pa.array(range(10))], names=["id"])]
    print(planned.commit(planned.write_fragments(iter(batches)), ns).rows)
"""
    environment = {name: value for name, value in os.environ.items() if name != "LANCE_LOG"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=environment, timeout=300, check=True
    )
    assert done.stdout.split()[-1] == "10"
    assert " WARN " not in done.stderr, done.stderr


@pytest.mark.parametrize("managed", [False, True], ids=["unmanaged", "managed"])
def test_a_create_that_another_writer_beat_is_refused_not_written_over(
    properties: dict[str, str], db: list[str], managed: bool
) -> None:
    """Between the plan of a create and its commit another engine wrote the table's first version:
    the commit is refused (pylance would have committed over it as the next version)."""
    import pyarrow as pa
    from lance_namespace.errors import ConcurrentModificationError

    from lance_iceberg_ns.jobs.planned_writes import TableWrite

    settings = {**properties, "table_version_management": str(managed).lower()}
    table = [*db, "raced"]
    with IcebergLanceNamespace(**settings) as ns:
        planned = TableWrite.plan(ns, table, "create", pa.schema([("id", pa.int64())]))
        fragments = planned.write_fragments(iter([pa.record_batch([pa.array([1, 2])], names=["id"])]))
        lance.write_dataset(pa.table({"id": [100]}), namespace_client=ns, table_id=table, mode="overwrite")
        with pytest.raises(ConcurrentModificationError, match="another writer"):
            planned.commit(fragments, ns)
        assert lance.dataset(namespace_client=ns, table_id=table).to_table()["id"].to_pylist() == [100]


def test_views_answer_sql_filters_and_joins(spark: SparkSession, properties: dict[str, str], db: list[str]) -> None:
    from lance_iceberg_ns.spark import register_lance_views

    write_lance(spark.sql("select id, id % 3 as customer from range(100)"), properties, [*db, "orders"])
    write_lance(spark.sql("select id, concat('c', id) as name from range(3)"), properties, [*db, "customers"])
    write_lance(spark.range(4), properties, [*db, "my-table"])
    IcebergLanceNamespace(**properties).declare_table({"id": [*db, "declared"]})  # no data yet: no view

    assert register_lance_views(spark, properties, ".".join(db)) == ["customers", "my-table", "orders"]
    assert spark.sql("SELECT count(*) FROM orders WHERE id < 10").first()[0] == 10
    joined = spark.sql(
        "SELECT c.name, count(*) AS n FROM orders o JOIN customers c ON o.customer = c.id GROUP BY c.name"
    )
    assert sorted(map(tuple, joined.collect())) == [("c0", 34), ("c1", 33), ("c2", 33)]
    assert spark.sql("SELECT sum(id) FROM `my-table`").first()[0] == 6  # not an identifier: backquotes


def test_views_of_a_dropped_table_go_at_the_next_registration(
    spark: SparkSession, properties: dict[str, str], db: list[str]
) -> None:
    from lance_iceberg_ns.spark import register_lance_views

    ns = IcebergLanceNamespace(**properties)
    write_lance(spark.range(5), properties, [*db, "kept"])
    write_lance(spark.range(5), properties, [*db, "dropped"])
    write_lance(spark.range(5), properties, [*db, "renamed"])
    assert register_lance_views(spark, ns, db) == ["dropped", "kept", "renamed"]
    spark.range(1).createOrReplaceTempView("unrelated")
    ns.drop_table({"id": [*db, "dropped"]})  # a soft delete
    ns.rename_table({"id": [*db, "renamed"], "new_table_name": "renamed_now"})
    assert register_lance_views(spark, ns, db) == ["kept", "renamed_now"]
    views = {row.name for row in spark.catalog.listTables() if row.isTemporary}
    assert {"kept", "renamed_now", "unrelated"} <= views and not {"dropped", "renamed"} & views
    from lance_iceberg_ns.spark.views import placeholder_name  # Spark 4.3: a view's table in the session catalog

    assert not any(spark.catalog.tableExists(placeholder_name(spark, view)) for view in ("dropped", "renamed"))


def test_a_view_the_user_put_under_the_name_stays_when_the_table_goes(
    spark: SparkSession, properties: dict[str, str], db: list[str]
) -> None:
    from lance_iceberg_ns.spark import register_lance_views

    ns = IcebergLanceNamespace(**properties)
    write_lance(spark.range(5), properties, [*db, "orders"])
    assert register_lance_views(spark, ns, db) == ["orders"]
    spark.range(42).createOrReplaceTempView("orders")  # the user's own view now
    ns.drop_table({"id": [*db, "orders"]})
    assert register_lance_views(spark, ns, db) == []
    assert spark.sql("SELECT count(*) FROM orders").first()[0] == 42


def test_recursive_views_are_named_by_their_path(
    spark: SparkSession, properties: dict[str, str], warehouse: str
) -> None:
    from lance_iceberg_ns.spark import register_lance_views

    ns = IcebergLanceNamespace(**properties)
    for namespace_id in ([warehouse, "sales"], [warehouse, "sales", "eu"], [warehouse, "hr"]):
        ns.create_namespace({"id": namespace_id})
    write_lance(spark.range(3), properties, [warehouse, "sales", "orders"])
    write_lance(spark.range(4), properties, [warehouse, "sales", "eu", "orders"])
    write_lance(spark.range(5), properties, [warehouse, "hr", "people"])
    assert register_lance_views(spark, properties, [warehouse], recursive=True) == [
        "hr_people",
        "sales_eu_orders",
        "sales_orders",
    ]
    assert spark.sql("SELECT count(*) FROM sales_eu_orders").first()[0] == 4
    assert register_lance_views(spark, properties, [warehouse, "sales"], recursive=True) == ["eu_orders", "orders"]
    assert spark.sql("SELECT count(*) FROM orders").first()[0] == 3
    every_warehouse = register_lance_views(spark, {**properties, "warehouses": warehouse}, "", recursive=True)
    assert every_warehouse == [f"{warehouse}_hr_people", f"{warehouse}_sales_eu_orders", f"{warehouse}_sales_orders"]

    other_client(properties["endpoint"], warehouse).create_namespace("scratch ")  # a name the bridge refuses
    assert register_lance_views(spark, properties, [warehouse], recursive=True) == [
        "hr_people",
        "sales_eu_orders",
        "sales_orders",
    ]

    ns.create_namespace({"id": [warehouse, "sales_eu"]})
    write_lance(spark.range(1), properties, [warehouse, "sales_eu", "orders"])
    with pytest.raises(InvalidInputError, match="sales_eu_orders"):  # two tables, one view name
        register_lance_views(spark, properties, [warehouse], recursive=True)


@pytest.mark.skipif(int(pyspark.__version__.split(".")[0]) >= 4, reason="Spark 3.5: a view is a DataFrame")
def test_spark35_views_read_one_version_until_registered_again(
    spark: SparkSession, properties: dict[str, str], db: list[str]
) -> None:
    from lance_iceberg_ns.spark import register_lance_views

    table = [*db, "events"]
    write_lance(spark.range(10), properties, table)
    register_lance_views(spark, properties, db)
    assert spark.sql("SELECT count(*) FROM events").first()[0] == 10
    write_lance(spark.range(10, 15), properties, table, mode="append")
    assert spark.sql("SELECT count(*) FROM events").first()[0] == 10  # the version read at registration
    assert spark.sql("SELECT count(*) FROM events WHERE id > 3").first()[0] == 6
    register_lance_views(spark, properties, db)
    assert spark.sql("SELECT count(*) FROM events").first()[0] == 15
    with pytest.raises(Exception, match="(?i)insert"):  # a DataFrame's view is no table to insert into
        spark.sql("INSERT INTO events VALUES (99)")


@needs_spark4
@pytest.mark.parametrize("managed", [False, True], ids=["unmanaged", "managed"])
def test_spark4_views_read_the_latest_version_on_every_query(
    spark: SparkSession, properties: dict[str, str], db: list[str], managed: bool
) -> None:
    import pyarrow as pa

    from lance_iceberg_ns.spark import register_lance_views

    settings = {**properties, "table_version_management": str(managed).lower()}
    ns = IcebergLanceNamespace(**settings)
    table = [*db, "events"]

    def pylance_writes(ids: range, mode: str = "append") -> None:
        rows = pa.table({"id": pa.array(ids, pa.int64()), "s": [f"s{i}" for i in ids]})
        lance.write_dataset(rows, namespace_client=ns, table_id=table, mode=mode)

    def count(where: str = "") -> int:
        return int(spark.sql(f"SELECT count(*) FROM events {where}").first()[0])

    pylance_writes(range(10), "create")
    register_lance_views(spark, settings, db)
    assert count() == 10
    pylance_writes(range(10, 15))
    assert count() == 15  # no registration in between
    assert count("WHERE id >= 8") == 7
    pylance_writes(range(15, 16))
    assert spark.sql("SELECT id, s FROM events WHERE id >= 13 ORDER BY id").collect() == [
        (13, "s13"),
        (14, "s14"),
        (15, "s15"),
    ]
    spark.sql("INSERT INTO events VALUES (100, 'hundred')")
    assert count() == 17 and spark.sql("SELECT s FROM events WHERE id = 100").collect() == [("hundred",)]
    pylance_writes(range(3), "overwrite")
    assert count() == 3
    assert ns.dataset(table).version == 5  # create, two appends, the insert, the overwrite


@needs_spark4
def test_spark4_views_scanned_twice_in_one_query_read_one_version_and_the_right_rows(
    spark: SparkSession, properties: dict[str, str], db: list[str]
) -> None:
    from lance_iceberg_ns.spark import register_lance_views

    write_lance(spark.range(10), properties, [*db, "events"])
    register_lance_views(spark, properties, db)
    pushdown = "spark.sql.python.filterPushdown.enabled"  # Spark hands one pushed-down plan to every scan
    spark.conf.set(pushdown, "true")
    try:
        union = "SELECT id FROM events WHERE id < 3 UNION ALL SELECT id FROM events WHERE id > 5"
        assert sorted(row.id for row in spark.sql(union).collect()) == [0, 1, 2, 6, 7, 8, 9]
        both = "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM events WHERE id > 5)"
        assert tuple(spark.sql(both).first()) == (10, 4)
        joined = "SELECT count(*) FROM events a JOIN events b ON a.id = b.id + 1 WHERE b.id < 4"
        assert spark.sql(joined).first()[0] == 4
    finally:
        spark.conf.unset(pushdown)


@needs_spark4
def test_spark4_views_take_inserts(spark: SparkSession, properties: dict[str, str], db: list[str]) -> None:
    from lance_iceberg_ns.spark import register_lance_views

    write_lance(spark.sql("select id, cast(id as string) as s from range(3)"), properties, [*db, "events"])
    register_lance_views(spark, properties, db)
    assert spark.sql("SELECT count(*) FROM events").first()[0] == 3
    spark.sql("INSERT INTO events VALUES (10, 'ten'), (11, 'eleven')")
    spark.sql("INSERT INTO events SELECT id + 20, 'more' FROM range(2)")
    assert read_lance(spark, properties, [*db, "events"]).count() == 7
    assert spark.sql("SELECT s FROM events WHERE id >= 10 ORDER BY id").collect() == [
        ("ten",),
        ("eleven",),
        ("more",),
        ("more",),
    ]


def test_views_of_names_holding_the_delimiter_read_their_own_table(
    spark: SparkSession, properties: dict[str, str], warehouse: str
) -> None:
    """``a$b`` beside ``a.b``: ``$`` joins ids in the REST protocol, but a view names its table by parts."""
    from lance_iceberg_ns.spark import register_lance_views

    ns = IcebergLanceNamespace(**properties)
    ns.create_namespace({"id": [warehouse, "sales"]})
    ns.create_namespace({"id": [warehouse, "sales", "a"]})
    write_lance(spark.sql("SELECT 1 AS v"), properties, [warehouse, "sales", "a$b"])
    write_lance(spark.sql("SELECT 100 AS v"), properties, [warehouse, "sales", "a", "b"])
    assert register_lance_views(spark, properties, [warehouse, "sales"]) == ["a$b"]
    assert spark.sql("SELECT v FROM `a$b`").collect() == [(1,)]
    assert register_lance_views(spark, properties, [warehouse, "sales"], recursive=True) == ["a$b", "a_b"]
    assert [spark.sql(f"SELECT v FROM `{view}`").first()[0] for view in ("a$b", "a_b")] == [1, 100]


def test_a_view_renamed_only_in_case_stays(spark: SparkSession, properties: dict[str, str], db: list[str]) -> None:
    from lance_iceberg_ns.spark import register_lance_views

    ns = IcebergLanceNamespace(**properties)
    write_lance(spark.range(3), properties, [*db, "Orders"])
    assert register_lance_views(spark, ns, db) == ["Orders"]
    ns.drop_table({"id": [*db, "Orders"]})
    write_lance(spark.range(5), properties, [*db, "orders"])
    assert register_lance_views(spark, ns, db) == ["orders"]
    assert spark.sql("SELECT count(*) FROM orders").first()[0] == 5


@needs_spark4
def test_spark4_views_write_only_to_their_table(spark: SparkSession, properties: dict[str, str], db: list[str]) -> None:
    """An overwrite through the view keeps it readable; an insert into the view of a dropped table
    is TableNotFound and makes no new table under the name."""
    import pyarrow as pa
    from lance_namespace import ListTablesRequest

    from lance_iceberg_ns.spark import register_lance_views

    ns = IcebergLanceNamespace(**properties)
    rows = pa.table({"v": [0, 1, 2], "s": [{"a": i} for i in range(3)], "l": [[i] for i in range(3)]})  # nullable all
    lance.write_dataset(rows, namespace_client=ns, table_id=[*db, "t"])
    register_lance_views(spark, ns, db)
    spark.sql("INSERT OVERWRITE t SELECT 42, named_struct('a', 42L), array(42L)")  # Spark calls all of it NOT NULL
    assert spark.sql("SELECT v, s.a, l[0] FROM t").collect() == [(42, 42, 42)]
    spark.sql("INSERT INTO t SELECT 43, named_struct('a', 43L), array(43L)")
    assert sorted(row.v for row in spark.sql("SELECT v FROM t").collect()) == [42, 43]

    ns.drop_table({"id": [*db, "t"]})  # a soft delete: the view stays until the next registration
    with pytest.raises(Exception, match="TableNotFound|not found"):
        spark.sql("INSERT INTO t SELECT 5, named_struct('a', 5L), array(5L)")
    assert ns.list_tables(ListTablesRequest(id=db, include_declared=True)).tables == []
    ns.undrop_table([*db, "t"])
    assert sorted(ns.dataset([*db, "t"]).to_table()["v"].to_pylist()) == [42, 43]


def test_views_never_show_the_secrets_they_read_with(
    spark: SparkSession, properties: dict[str, str], db: list[str]
) -> None:
    from lance_iceberg_ns.spark import register_lance_views

    write_lance(spark.range(3), properties, [*db, "events"])
    secret = {**properties, "storage.aws_access_key_id": "AKIDVIEW", "storage.aws_secret_access_key": "s3cr3tview"}
    register_lance_views(spark, secret, db)
    shown = [spark.sql("EXPLAIN EXTENDED SELECT * FROM events WHERE id > 0").first()[0]]
    shown += [str(spark.sql(query).collect()) for query in ("DESCRIBE EXTENDED events", "SHOW TABLES")]
    assert spark.sql("SELECT count(*) FROM events").first()[0] == 3
    assert "s3cr3tview" not in "\n".join(shown)
