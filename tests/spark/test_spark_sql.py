"""Spark SQL through a real catalog: lance-spark's namespace catalog (``lance_catalog_conf``) over
``lance-iceberg-ns serve`` on the local Iceberg catalog, and the same SQL over pylance's reference
server (``RestAdapter("dir")``), every difference between the two spelled out where it shows.

The settings themselves are tested on any PySpark. The SQL needs the connector, which is published
for Spark 3.5 (Scala 2.12) only: those tests run on PySpark 3.5, in ``.venv-pyspark35``, in a JVM of
their own started with the connector's packages (fetched once by Ivy into the cache directory)."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from lance_namespace import CreateNamespaceRequest, DescribeTableRequest, ListTablesRequest
from lance_namespace.errors import InvalidInputError, TableNotFoundError, UnsupportedOperationError

from lance_iceberg_ns.spark import lance_catalog_conf
from lance_iceberg_ns.spark.catalog import CATALOG_CLASS, LANCE_SPARK_VERSION

from ..helpers import fresh_spark_jvm

try:
    import pyspark

    PYSPARK_VERSION: str | None = pyspark.__version__
except ImportError:
    PYSPARK_VERSION = None

ON_SPARK_35 = PYSPARK_VERSION is not None and PYSPARK_VERSION.startswith("3.5.")
needs_connector = pytest.mark.skipif(
    not ON_SPARK_35,
    reason=f"lance-spark {LANCE_SPARK_VERSION} is published for Spark 3.5 (Scala 2.12) only, this is PySpark "
    f"{PYSPARK_VERSION}: scripts/test.sh runs this module again in .venv-pyspark35",
)
TOKEN = "spark-sql-SECRET-token"  # carries conftest's SECRET_MARK: it must reach no log record
CONNECTOR = f"org.lance:lance-spark-3.5_2.12:{LANCE_SPARK_VERSION}"


# --- the settings -------------------------------------------------------------------------------


def test_settings_name_the_connector_the_rest_catalog_and_its_headers(tmp_path: Path) -> None:
    settings = lance_catalog_conf(
        "lance",
        "http://127.0.0.1:2333/",
        token=TOKEN,
        headers={"X-Team": "sales"},
        spark_version="3.5.9",
        ivy_dir=tmp_path,
        single_level_ns="false",
    )
    assert dict(settings) == {
        "spark.jars.packages": CONNECTOR,
        "spark.jars.ivy": str(tmp_path),
        "spark.redaction.regex": r"(?i)secret|password|token|access[._]?key|authorization|\.headers?\.",
        "spark.sql.catalog.lance": CATALOG_CLASS,
        "spark.sql.catalog.lance.impl": "rest",
        "spark.sql.catalog.lance.uri": "http://127.0.0.1:2333",
        "spark.sql.catalog.lance.header.X-Team": "sales",
        "spark.sql.catalog.lance.header.Authorization": f"Bearer {TOKEN}",
        "spark.sql.catalog.lance.single_level_ns": "false",
    }
    assert CATALOG_CLASS == "org.lance.spark.LanceNamespaceSparkCatalog"  # the class in the 0.4.0 jar
    shown = f"{settings!r} {settings}"
    assert TOKEN not in shown and "sales" not in shown and "rest" in shown


@pytest.mark.parametrize("version", ["4.0.1", "4.3.0", "3.4.4"])
def test_settings_for_a_spark_without_a_published_connector_say_so(version: str) -> None:
    with pytest.raises(UnsupportedOperationError, match=f"No lance-spark connector is published for Spark {version}"):
        lance_catalog_conf("lance", "http://127.0.0.1:2333", spark_version=version)


@pytest.mark.skipif(PYSPARK_VERSION is None or ON_SPARK_35, reason="the installed PySpark is 3.5 (or none)")
def test_settings_default_to_the_installed_pyspark() -> None:
    with pytest.raises(UnsupportedOperationError, match=f"Spark {PYSPARK_VERSION}"):
        lance_catalog_conf("lance", "http://127.0.0.1:2333")


@pytest.mark.parametrize(
    "name, uri, options",
    [
        ("lance.x", "http://127.0.0.1:2333", {}),
        ("spark_catalog", "http://127.0.0.1:2333", {}),
        ("lance", "file:///tmp/x", {}),
        ("lance", "http://127.0.0.1:2333", {"uri": "http://elsewhere"}),
        ("lance", "http://127.0.0.1:2333", {"impl": "dir"}),
        ("lance", "http://127.0.0.1:2333", {"headers": {"X Team": "sales"}}),
        ("lance", "http://127.0.0.1:2333", {"single_level_ns": True}),
        ("lance", "http://127.0.0.1:2333", {"token": f"{TOKEN}\r\nX-Injected: 1"}),
    ],
)
def test_settings_refuse_what_spark_could_not_take_without_repeating_secrets(
    name: str, uri: str, options: dict[str, Any]
) -> None:
    with pytest.raises(InvalidInputError) as refused:
        lance_catalog_conf(name, uri, spark_version="3.5.9", **options)
    assert TOKEN not in str(refused.value)


def test_settings_fetch_the_connector_into_the_projects_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from lance_iceberg_ns.testing.build import cache_root

    monkeypatch.setenv("LANCE_ICEBERG_NS_CACHE", str(tmp_path / "cache"))
    settings = lance_catalog_conf("lance", "http://127.0.0.1:2333", spark_version="3.5.9")
    assert settings["spark.jars.ivy"] == str(cache_root() / "ivy") == str(tmp_path / "cache" / "ivy")


# --- Spark SQL over serve and over the reference server ----------------------------------------


@dataclass(frozen=True)
class Target:
    """One REST server as Spark SQL sees it: the catalog's name in SQL, pylance's client of the same
    server, the warehouse (the first level of every name), and for the bridge the bridge itself."""

    kind: str  # "bridge" or "reference"
    catalog: str
    client: Any  # lance.namespace.RestNamespace
    warehouse: str
    bridge: Any = None  # IcebergLanceNamespace on the same catalog and root, for the bridge

    def sql_name(self, *parts: str) -> str:
        return ".".join([self.catalog, self.warehouse, *parts])


@dataclass(frozen=True)
class Servers:
    spark: Any
    targets: dict[str, Target]


def _wait_for_line(log: Path, text: str, process: subprocess.Popen[bytes], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"no {text!r} from {log.name}:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)


@contextmanager
def standalone_cluster(work: Path, workers: int = 2) -> Iterator[str]:
    """A Spark standalone master and ``workers`` workers of one core each on loopback, started with
    PySpark's own ``spark-class``, every executor a process of its own; yields the master's URL."""
    import pyspark

    from lance_iceberg_ns.spark import LOOPBACK

    from ..liveness import free_port
    from ..servers import LoopbackServer

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    environment = {**os.environ, "SPARK_LOCAL_IP": LOOPBACK, "SPARK_NO_DAEMONIZE": "1"}
    started: list[LoopbackServer] = []

    def start(name: str, main_class: str, ready: str, *arguments: str) -> int:
        directory, log, port = work / name, work / f"{name}.log", free_port()
        directory.mkdir()
        command = [str(spark_class), main_class, "--host", LOOPBACK, "--port", str(port)]
        command += ["--webui-port", str(free_port()), *arguments]
        with open(log, "wb") as sink:
            process = subprocess.Popen(
                command, env=environment, cwd=directory, stdout=sink, stderr=sink, start_new_session=True
            )
        started.append(LoopbackServer(process, directory, port, log))
        _wait_for_line(log, ready, process)
        return port

    try:
        url = f"spark://{LOOPBACK}:{start('master', 'org.apache.spark.deploy.master.Master', 'elected leader')}"
        for index in range(workers):
            name = f"worker-{index}"
            worker_options = ("--cores", "1", "--memory", "1g", "--work-dir", str(work / name), url)
            start(name, "org.apache.spark.deploy.worker.Worker", "Successfully registered with master", *worker_options)
        yield url
    finally:
        for server in reversed(started):
            server.stop()


def _wait_for_executors(spark: Any, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while spark.sparkContext._jsc.sc().getExecutorIds().size() < count:
        assert time.monotonic() < deadline, f"fewer than {count} executors joined"
        time.sleep(0.5)


@pytest.fixture(scope="module", params=["local", "standalone"])
def servers(
    request: pytest.FixtureRequest, catalog_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Servers]:
    """``serve`` (a subprocess, bearer token required) on the session's Iceberg catalog, pylance's
    reference server beside it, and one Spark session (``local[2]``, or a standalone cluster of a
    master and two workers on loopback) with a lance-spark catalog on each: ``lance`` on the bridge,
    ``ref`` on the reference."""
    if not ON_SPARK_35:
        pytest.skip(needs_connector.kwargs["reason"])
    import lance.namespace

    from lance_iceberg_ns import IcebergLanceNamespace
    from lance_iceberg_ns.spark import local_spark_session

    from ..liveness import served_in_subprocess

    warehouse = f"wh_{uuid.uuid4().hex[:10]}"
    root = tmp_path_factory.mktemp("lance")
    token_env = {"LANCE_ICEBERG_NS_AUTH_TOKEN": TOKEN}
    with ExitStack() as stack:
        served = stack.enter_context(
            served_in_subprocess(
                catalog_server.endpoint, str(root), warehouse, properties={"warehouses": warehouse}, env=token_env
            )
        )
        reference_root = tmp_path_factory.mktemp("reference")
        reference = lance.namespace.RestAdapter("dir", {"root": str(reference_root)}, host="127.0.0.1", port=0)
        reference.start()
        stack.callback(reference.stop)
        reference_uri = f"http://127.0.0.1:{reference.port}"
        reference_client = lance.namespace.RestNamespace(uri=reference_uri)
        reference_client.create_namespace(CreateNamespaceRequest(id=[warehouse]))  # the bridge's warehouse level
        settings = {**lance_catalog_conf("lance", served.uri, token=TOKEN), **lance_catalog_conf("ref", reference_uri)}
        master = "local[2]"
        if request.param == "standalone":
            master = stack.enter_context(standalone_cluster(tmp_path_factory.mktemp("cluster")))
            settings |= {"spark.executor.cores": "1", "spark.executor.memory": "768m", "spark.cores.max": "2"}
        fresh_spark_jvm()
        stack.callback(fresh_spark_jvm)  # the next module's Spark starts without the connector
        spark = local_spark_session("lance-iceberg-ns: lance-spark over serve", master, settings)
        stack.callback(spark.stop)
        if request.param == "standalone":
            _wait_for_executors(spark, 2)
        bridge = stack.enter_context(IcebergLanceNamespace(endpoint=catalog_server.endpoint, root=str(root)))
        bridge_client = lance.namespace.RestNamespace(uri=served.uri, **{"header.Authorization": f"Bearer {TOKEN}"})
        targets = {
            "bridge": Target("bridge", "lance", bridge_client, warehouse, bridge),
            "reference": Target("reference", "ref", reference_client, warehouse),
        }
        yield Servers(spark, targets)


@pytest.fixture(params=["bridge", "reference"])
def target(request: pytest.FixtureRequest, servers: Servers) -> Target:
    return servers.targets[request.param]


@pytest.fixture
def spark(servers: Servers) -> Any:
    return servers.spark


@pytest.fixture
def db(spark: Any, target: Target) -> str:
    return new_namespace(spark, target)


def new_namespace(spark: Any, target: Target) -> str:
    """A fresh namespace ``<warehouse>.db_<random>`` of ``target``, created through Spark SQL."""
    name = f"db_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {target.sql_name(name)}")
    return name


def _rows(spark: Any, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in spark.sql(sql).collect()]


def _scan_rows(frame: Any) -> int:
    """Rows the scan of a collected single-table query handed Spark (its numOutputRows)."""
    leaves = frame._jdf.queryExecution().executedPlan().collectLeaves()
    assert leaves.size() == 1
    return int(leaves.head().metrics().apply("numOutputRows").value())


@needs_connector
def test_create_insert_and_select_with_the_filter_and_projection_pushed_into_lance(
    spark: Any, target: Target, db: str
) -> None:
    table = target.sql_name(db, "events")
    spark.sql(f"CREATE TABLE {table} (id BIGINT, name STRING, score DOUBLE)")
    spark.sql(f"INSERT INTO {table} SELECT id, concat('n', id), id * 0.5 FROM range(1000)")
    spark.sql(f"INSERT INTO {table} VALUES (1000, 'last', 1.0)")
    assert _rows(spark, f"SELECT count(*), sum(id) FROM {table}") == [(1001, 500500)]

    query = spark.sql(f"SELECT name FROM {table} WHERE id >= 995 ORDER BY name")
    assert [row.name for row in query.collect()] == ["last", "n995", "n996", "n997", "n998", "n999"]
    selected = spark.sql(f"SELECT name FROM {table} WHERE id >= 995")
    assert len(selected.collect()) == 6
    assert _scan_rows(selected) == 6  # Lance, not Spark, dropped the other 995 rows
    plan = "\n".join(
        row[0] for row in spark.sql(f"EXPLAIN FORMATTED SELECT name FROM {table} WHERE id >= 995").collect()
    )
    assert "BatchScan" in plan and "Filter" not in plan, plan  # nothing left for Spark to filter
    assert "whereConditions: Optional[(id IS NOT NULL) AND (id >= 995)]" in plan, plan
    assert "Output [1]: [name#" in plan, plan  # the projection: one column read

    location = target.client.describe_table(DescribeTableRequest(id=[target.warehouse, db, "events"])).location
    import lance

    written = lance.dataset(location)
    assert written.count_rows() == 1001 and written.schema.names == ["id", "name", "score"]


@needs_connector
def test_multi_level_namespaces_show_namespaces_and_show_tables(spark: Any, target: Target) -> None:
    top = f"a_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE {target.sql_name(top)}")
    spark.sql(f"CREATE NAMESPACE {target.sql_name(top, 'b')}")
    spark.sql(f"CREATE TABLE {target.sql_name(top, 'b', 't')} (id BIGINT)")
    spark.sql(f"INSERT INTO {target.sql_name(top, 'b', 't')} VALUES (1), (2)")
    spark.sql(f"CREATE TABLE {target.sql_name(top, 'u')} (id BIGINT)")

    assert (target.warehouse,) in _rows(spark, f"SHOW NAMESPACES IN {target.catalog}")
    assert (f"{target.warehouse}.{top}",) in _rows(spark, f"SHOW NAMESPACES IN {target.sql_name()}")
    assert _rows(spark, f"SHOW NAMESPACES IN {target.sql_name(top)}") == [(f"{target.warehouse}.{top}.b",)]
    assert _rows(spark, f"SHOW TABLES IN {target.sql_name(top, 'b')}") == [(f"{target.warehouse}.{top}.b", "t", False)]
    assert _rows(spark, f"SHOW TABLES IN {target.sql_name(top)}") == [(f"{target.warehouse}.{top}", "u", False)]
    assert _rows(spark, f"SELECT sum(id) FROM {target.sql_name(top, 'b', 't')}") == [(3,)]
    listed = target.client.list_tables(ListTablesRequest(id=[target.warehouse, top, "b"])).tables
    assert listed == ["t"]

    # DROP NAMESPACE takes an empty namespace only: the bridge refuses CASCADE as such (400), the
    # reference server answers it as a plain drop of a namespace holding tables (409)
    refused = "status=400 Bad Request.*Cascade" if target.kind == "bridge" else "status=409 Conflict"
    with pytest.raises(Exception, match=refused):  # noqa: PT011  (Py4J's error)
        spark.sql(f"DROP NAMESPACE {target.sql_name(top, 'b')} CASCADE")
    with pytest.raises(Exception, match="status=409 Conflict"):  # noqa: PT011
        spark.sql(f"DROP NAMESPACE {target.sql_name(top, 'b')}")
    spark.sql(f"CREATE NAMESPACE {target.sql_name(top, 'empty')}")
    spark.sql(f"DROP NAMESPACE {target.sql_name(top, 'empty')}")
    assert _rows(spark, f"SHOW NAMESPACES IN {target.sql_name(top)}") == [(f"{target.warehouse}.{top}.b",)]


@needs_connector
def test_every_query_reads_the_latest_version(spark: Any, target: Target, db: str) -> None:
    import lance

    table_id = [target.warehouse, db, "events"]
    table = target.sql_name(db, "events")
    spark.sql(f"CREATE TABLE {table} (id BIGINT, name STRING)")
    spark.sql(f"INSERT INTO {table} SELECT id, concat('n', id) FROM range(10)")
    assert _rows(spark, f"SELECT count(*) FROM {table}") == [(10,)]

    def pylance_writes(ids: range, mode: str) -> None:
        rows = pa.table({"id": pa.array(ids, pa.int64()), "name": [f"p{i}" for i in ids]})
        lance.write_dataset(rows, namespace_client=target.client, table_id=table_id, mode=mode)

    pylance_writes(range(10, 13), "append")
    assert _rows(spark, f"SELECT count(*) FROM {table}") == [(13,)]  # same session, no refresh
    assert _rows(spark, f"SELECT name FROM {table} WHERE id >= 11 ORDER BY id") == [("p11",), ("p12",)]
    pylance_writes(range(2), "overwrite")
    assert _rows(spark, f"SELECT id, name FROM {table} ORDER BY id") == [(0, "p0"), (1, "p1")]
    spark.sql(f"INSERT INTO {table} VALUES (7, 'spark')")
    assert lance.dataset(namespace_client=target.client, table_id=table_id).count_rows() == 3


@needs_connector
def test_pylance_and_lance_spark_read_each_others_tables_and_vector_index(spark: Any, target: Target, db: str) -> None:
    import lance

    vectors = np.random.default_rng(7).random((512, 16), dtype=np.float32)
    rows = pa.table(
        {
            "id": pa.array(range(512), pa.int64()),
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 16),
        }
    )
    table_id = [target.warehouse, db, "vectors"]
    written = lance.write_dataset(rows, namespace_client=target.client, table_id=table_id)
    assert written.data_storage_version == "2.2"  # pylance 14's default file format
    indexed = written.create_index("emb", index_type="IVF_PQ", num_partitions=2, num_sub_vectors=4).version
    table = target.sql_name(db, "vectors")

    assert _rows(spark, f"DESCRIBE TABLE {table}") == [("id", "bigint", None), ("emb", "array<float>", None)]
    assert _rows(spark, f"SELECT count(*), max(id) FROM {table}") == [(512, 511)]
    first = spark.sql(f"SELECT emb FROM {table} WHERE id = 3").collect()[0].emb
    assert np.array_equal(np.array(first, dtype=np.float32), vectors[3])
    spark.sql(f"INSERT INTO {table} SELECT 9999, array_repeat(CAST(0.5 AS FLOAT), 16)")

    after = lance.dataset(namespace_client=target.client, table_id=table_id)
    assert after.count_rows() == 513 and after.version == indexed + 1  # Spark's insert: one commit
    assert [index.name for index in after.describe_indices()] == ["emb_idx"]  # Spark's commit kept the index
    nearest = after.to_table(nearest={"column": "emb", "q": np.full(16, 0.5, np.float32), "k": 1})
    assert nearest["id"].to_pylist() == [9999]  # the unindexed fragment Spark wrote is searched too

    spark.sql(f"CREATE TABLE {target.sql_name(db, 'by_spark')} AS SELECT id, CAST(id AS STRING) AS s FROM range(5)")
    by_spark = lance.dataset(namespace_client=target.client, table_id=[target.warehouse, db, "by_spark"])
    assert sorted(by_spark.to_table()["id"].to_pylist()) == [0, 1, 2, 3, 4]
    assert by_spark.data_storage_version == "2.0"  # lance-spark's default file format


@needs_connector
def test_delete_update_overwrite_and_time_travel(spark: Any, target: Target, db: str) -> None:
    table = target.sql_name(db, "orders")
    spark.sql(f"CREATE TABLE {table} (id BIGINT, status STRING)")
    spark.sql(f"INSERT INTO {table} SELECT id, 'new' FROM range(6)")
    spark.sql(f"DELETE FROM {table} WHERE id < 2")
    spark.sql(f"UPDATE {table} SET status = 'paid' WHERE id = 4")
    assert _rows(spark, f"SELECT id, status FROM {table} WHERE id >= 3 ORDER BY id") == [
        (3, "new"),
        (4, "paid"),
        (5, "new"),
    ]
    assert _rows(spark, f"SELECT count(*) FROM {table} VERSION AS OF 2") == [(6,)]  # version 1: the empty table
    spark.sql(f"INSERT OVERWRITE {table} SELECT id, 'again' FROM range(2)")
    assert _rows(spark, f"SELECT id, status FROM {table} ORDER BY id") == [(0, "again"), (1, "again")]
    with pytest.raises(Exception, match="Table renaming is not supported"):  # noqa: PT011  (lance-spark's own)
        spark.sql(f"ALTER TABLE {table} RENAME TO {target.sql_name(db, 'renamed')}")


@needs_connector
def test_a_table_declared_managed_commits_every_spark_write_through_the_catalog(servers: Servers) -> None:
    spark, target = servers.spark, servers.targets["bridge"]
    db = new_namespace(spark, target)
    table = target.sql_name(db, "ledger")
    spark.sql(f"CREATE TABLE {table} (id BIGINT) TBLPROPERTIES ('table_version_management' = 'true')")
    spark.sql(f"INSERT INTO {table} SELECT id FROM range(5)")
    spark.sql(f"DELETE FROM {table} WHERE id = 0")
    table_id = [target.warehouse, db, "ledger"]
    versions = target.bridge.list_table_versions({"id": table_id}).versions
    assert [version.version for version in versions] == [1, 2, 3]  # in the Iceberg catalog
    assert target.bridge.dataset(table_id).count_rows() == 4


@needs_connector
def test_the_docs_spark_job_writes_vectors_in_format_2_2_through_the_catalog(servers: Servers) -> None:
    """The job of docs/spark.md ("A Spark job with lance-spark"), on the bridge: two appends of rows
    with a 768-d vector column into a format-2.2 table, read back filtered."""
    spark, target = servers.spark, servers.targets["bridge"]
    db = new_namespace(spark, target)
    table = target.sql_name(db, "orders")
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {table} (id BIGINT, amount DOUBLE, embedding ARRAY<FLOAT> NOT NULL) "
        "TBLPROPERTIES ('embedding.arrow.fixed-size-list.size' = '768', 'file_format_version' = '2.2')"
    )
    rows = "SELECT id, id * 1.5 AS amount, array_repeat(CAST(id AS FLOAT), 768) AS embedding FROM range({}, {})"
    spark.sql(rows.format(0, 1000)).writeTo(table).append()
    spark.sql(rows.format(1000, 1100)).writeTo(table).append()
    assert spark.table(table).where("amount > 100").select("id", "amount").count() == 1033
    dataset = target.bridge.dataset([target.warehouse, db, "orders"])
    assert (dataset.data_storage_version, dataset.version) == ("2.2", 3)
    embedding = dataset.schema.field("embedding").type
    assert pa.types.is_fixed_size_list(embedding) and embedding.list_size == 768


@needs_connector
def test_drop_table_keeps_the_data_and_drop_purge_follows_the_servers_delete_rules(
    spark: Any, target: Target, db: str
) -> None:
    """lance-spark sends DROP TABLE as deregister_table and DROP TABLE ... PURGE as drop_table."""
    import lance

    for name in ("kept", "purged"):
        spark.sql(f"CREATE TABLE {target.sql_name(db, name)} AS SELECT id FROM range(4)")
    kept_id, purged_id = [target.warehouse, db, "kept"], [target.warehouse, db, "purged"]
    kept_at = target.client.describe_table(DescribeTableRequest(id=kept_id)).location
    purged_at = target.client.describe_table(DescribeTableRequest(id=purged_id)).location

    spark.sql(f"DROP TABLE {target.sql_name(db, 'kept')}")
    spark.sql(f"DROP TABLE {target.sql_name(db, 'purged')} PURGE")
    assert _rows(spark, f"SHOW TABLES IN {target.sql_name(db)}") == []
    # lance-spark takes a 404 whose message says "not found" for a missing table; the reference
    # server's message does not say it, so Spark shows its raw error instead
    missing = "TABLE_OR_VIEW_NOT_FOUND" if target.kind == "bridge" else "status=404 Not Found"
    with pytest.raises(Exception, match=missing):  # noqa: PT011  (PySpark's AnalysisException, Py4J's error)
        spark.sql(f"SELECT * FROM {target.sql_name(db, 'kept')}").collect()
    assert lance.dataset(kept_at).count_rows() == 4  # deregistered: the data stays, nobody's

    if target.kind == "bridge":
        # the bridge: register the data again; PURGE is a soft delete, which undrop_table undoes
        target.bridge.register_table({"id": kept_id, "location": kept_at})
        assert target.bridge.undrop_table(purged_id).state == "exists"
        assert lance.dataset(purged_at).count_rows() == 4
        for name in ("kept", "purged"):
            assert _rows(spark, f"SELECT count(*) FROM {target.sql_name(db, name)}") == [(4,)]
    else:
        # the directory namespace deletes a dropped table's files at once
        assert not os.path.exists(purged_at.removeprefix("file://"))
        with pytest.raises(TableNotFoundError):
            target.client.describe_table(DescribeTableRequest(id=purged_id))


@needs_connector
def test_the_token_never_shows_in_spark_and_a_catalog_without_it_reads_nothing(servers: Servers) -> None:
    spark, target = servers.spark, servers.targets["bridge"]
    db = new_namespace(spark, target)
    table = target.sql_name(db, "private")
    spark.sql(f"CREATE TABLE {table} AS SELECT id FROM range(3)")
    shown = [str(_rows(spark, "SET")), str(_rows(spark, "SET spark.sql.catalog.lance.header.Authorization"))]
    shown += [str(_rows(spark, f"{query} {table}")) for query in ("DESCRIBE TABLE EXTENDED", "SHOW TBLPROPERTIES")]
    shown.append(str(_rows(spark, f"EXPLAIN EXTENDED SELECT * FROM {table} WHERE id > 0")))
    assert "Bearer" not in "\n".join(shown) and TOKEN not in "\n".join(shown)
    assert "*********(redacted)" in shown[1]

    # the same catalog without the token: every table is refused; lance-spark takes the refused
    # namespace listing at its start for a server without namespaces (its single-level mode), so
    # listing them fails as an unknown schema
    uri = spark.conf.get("spark.sql.catalog.lance.uri")
    for key, value in lance_catalog_conf("stranger", uri).items():
        if key.startswith("spark.sql.catalog."):
            spark.conf.set(key, value)  # a catalog is made at its first use: settable in a running session
    with pytest.raises(Exception, match="status=401 Unauthorized"):  # noqa: PT011  (Py4J's error)
        spark.sql(f"SELECT * FROM stranger.{target.warehouse}.{db}.private").collect()
    with pytest.raises(Exception, match="SCHEMA_NOT_FOUND"):  # noqa: PT011  (PySpark's AnalysisException)
        spark.sql("SHOW NAMESPACES IN stranger").collect()


@needs_connector
def test_on_a_cluster_every_executor_writes_and_reads_through_the_connector(servers: Servers, target: Target) -> None:
    spark = servers.spark
    executors = spark.sparkContext._jsc.sc().getExecutorIds().size()
    if executors < 2:
        pytest.skip("one process runs every task in local mode")
    db = new_namespace(spark, target)
    table = target.sql_name(db, "spread")
    spark.sql(f"CREATE TABLE {table} AS SELECT id FROM range(0, 40000, 1, 8)")  # 8 tasks, 8 fragments

    def executor_dir(rows: Iterator[Any]) -> Iterator[tuple[str, int]]:
        yield os.path.basename(os.getcwd()), sum(1 for _ in rows)  # an executor runs in work/<app>/<id>

    read = spark.sql(f"SELECT id FROM {table}").rdd.mapPartitions(executor_dir).collect()
    assert sum(count for _, count in read) == 40000
    assert len({name for name, _ in read}) == executors == 2, read
