"""Managed tables and other engines: every reader sees the version the catalog names right after
each commit, and a writer that went by location is refused by name at the next commit through
the namespace, in process and through the server."""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
import requests
from lance_namespace.errors import InvalidTableStateError

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.jobs.adoption import adopt_versions_written_by_location, refuse_if_written_by_location
from lance_iceberg_ns.jobs.atomic import write_together

from ..helpers import ipc, other_client, stage_manifest


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


def _duckdb_connection() -> Any:
    duckdb = pytest.importorskip("duckdb")
    extension = pytest.importorskip("duckdb_extension_lance")
    found = sorted(Path(extension.__file__).parent.glob("extensions/*/lance.duckdb_extension"))
    connection = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    connection.execute(f"LOAD '{found[-1]}'")
    return connection


def _duckdb_count(location: str) -> int:
    """DuckDB's Lance extension reading the location, on a connection of its own: a connection
    keeps the version it first read of a path, for any Lance dataset."""
    with _duckdb_connection() as connection:
        return int(connection.execute(f"SELECT count(*) FROM '{location}'").fetchall()[0][0])


def _latest(ns: IcebergLanceNamespace, table_id: list[str]) -> int | None:
    return ns.describe_table({"id": table_id, "load_detailed_metadata": True}).version


# --- readers ------------------------------------------------------------------------------------


def test_readers_by_location_and_describe_table_see_each_append_at_once(
    managed_ns: IcebergLanceNamespace, db: list[str]
) -> None:
    table_id = [*db, "events"]
    location = lance.write_dataset(_rows(0, 100), namespace_client=managed_ns, table_id=table_id).uri
    kept = _duckdb_connection()
    assert kept.execute(f"SELECT count(*) FROM '{location}'").fetchall() == [(100,)]
    for version, expected in ((1, 100), (2, 110), (3, 120)):
        if version > 1:
            _append(managed_ns, table_id, _rows(expected - 10, 10))
        assert lance.dataset(location).count_rows() == expected
        assert lance.dataset(location).version == version
        assert _duckdb_count(location) == expected
        assert _latest(managed_ns, table_id) == version
        assert managed_ns.describe_table({"id": table_id}).location == location
        assert lance.dataset(namespace_client=managed_ns, table_id=table_id).count_rows() == expected
    # a DuckDB connection keeps the version it first read of a path (any Lance dataset): DuckDB's own
    assert kept.execute(f"SELECT count(*) FROM '{location}'").fetchall() == [(100,)]
    kept.close()


def test_a_writer_reading_right_after_its_own_commit_sees_another_writers_commit(
    managed_ns: IcebergLanceNamespace, properties: dict[str, str], db: list[str]
) -> None:
    table_id = [*db, "events"]
    lance.write_dataset(_rows(0, 100), namespace_client=managed_ns, table_id=table_id)
    with IcebergLanceNamespace(**properties) as other:  # another writer, as another process would be
        _append(managed_ns, table_id, _rows(100, 10))  # managed_ns keeps the state it committed
        _append(other, table_id, _rows(110, 10))
        assert lance.dataset(namespace_client=managed_ns, table_id=table_id).count_rows() == 120
        assert managed_ns.list_table_versions({"id": table_id, "descending": True, "limit": 1}).versions[0].version == 3
        _append(managed_ns, table_id, _rows(120, 10))  # and builds on it
        assert lance.dataset(namespace_client=other, table_id=table_id).count_rows() == 130


def test_a_version_another_writer_committed_through_the_catalog_is_no_write_by_location(
    managed_ns: IcebergLanceNamespace, properties: dict[str, str], db: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The final manifest of another writer's version is on disk only after the catalog has it: a
    write that loaded the table just before another writer committed asks the catalog again
    rather than taking that version for a write by location."""
    from lance_iceberg_ns.versions import snapshots

    table_id = [*db, "events"]
    lance.write_dataset(_rows(0, 100), namespace_client=managed_ns, table_id=table_id)
    looked = snapshots.written_by_path_after
    with IcebergLanceNamespace(**properties) as other:
        raced: list[int] = []

        def another_writer_commits_first(table: Any, storage_options: Any) -> int | None:
            if not raced:  # between this write's load of the table and its look at the disk
                raced.append(1)
                other.insert_into_table({"id": table_id}, ipc(_rows(100, 10)))
            return looked(table, storage_options)

        monkeypatch.setattr(snapshots, "written_by_path_after", another_writer_commits_first)
        managed_ns.insert_into_table({"id": table_id}, ipc(_rows(110, 10)))
    assert raced and lance.dataset(namespace_client=managed_ns, table_id=table_id).count_rows() == 120


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
    assert lance.dataset(location).count_rows() == 130
    assert read_lance(spark, properties, table_id, version=2).count() == 110

    lance.write_dataset(_rows(500, 5), location, mode="append")  # by path: version 4, behind the catalog's back
    assert read_lance(spark, properties, table_id).count() == 130  # Spark reads what the catalog names
    with pytest.raises(InvalidTableStateError, match=r"Version 4 of .* went by its location.*names version 3"):
        write_lance(spark.range(130, 140), properties, table_id, mode="append")
    assert adopt_versions_written_by_location(properties, table_id) == [4]
    assert write_lance(spark.range(130, 140), properties, table_id, mode="append").rows == 145
    assert read_lance(spark, properties, table_id).count() == 145


def test_the_spark_data_source_reads_the_version_the_catalog_names_after_each_append(
    spark: Any, managed_ns: IcebergLanceNamespace, properties: dict[str, str], db: list[str]
) -> None:
    import pyspark

    if int(pyspark.__version__.split(".")[0]) < 4:
        pytest.skip("Python data sources arrived in PySpark 4")
    from lance_iceberg_ns.spark.source import register_lance_data_source

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
    assert lance.dataset(location).count_rows() == 120


# --- writers by location ------------------------------------------------------------------------


def _versions(ns: IcebergLanceNamespace, table_id: list[str]) -> list[int]:
    return [v.version for v in ns.list_table_versions({"id": table_id}).versions]


def _staged(location: str) -> list[str]:
    return sorted(name for name in os.listdir(os.path.join(location, "_versions")) if ".manifest-" in name)


def _merge(rows: pa.Table) -> Callable[[lance.LanceDataset], Any]:
    return lambda dataset: (
        dataset.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(rows)
    )


WRITTEN_BY_LOCATION = r"Version 3 of .* went by its location.*names version 2.*adopt_versions_written_by_location"


def test_a_write_by_location_is_refused_by_name_at_the_next_commit_through_the_namespace_until_adopted(
    managed_ns: IcebergLanceNamespace, db: list[str], capfd: pytest.CaptureFixture[str]
) -> None:
    table_id = [*db, "events"]
    location = lance.write_dataset(_rows(0, 100), namespace_client=managed_ns, table_id=table_id).uri
    _append(managed_ns, table_id, _rows(100, 10))
    lance.write_dataset(_rows(500, 5), location, mode="append")  # by path: version 3, behind the catalog's back
    assert lance.dataset(location).count_rows() == 115  # readers by location see it, the catalog does not
    assert lance.dataset(namespace_client=managed_ns, table_id=table_id).count_rows() == 110
    capfd.readouterr()

    # pylance through the namespace numbers its commit 4, after the version on disk: refused, by name
    with pytest.raises(OSError, match="Commit result for version 4 is unknown"):
        _append(managed_ns, table_id, _rows(110, 10))
    with pytest.raises(OSError, match="Commit result for version 4 is unknown"):
        _merge(_rows(0, 3))(lance.dataset(namespace_client=managed_ns, table_id=table_id))
    assert re.search(WRITTEN_BY_LOCATION, capfd.readouterr().err)  # pylance logs the namespace's refusal
    with pytest.raises(InvalidTableStateError, match=WRITTEN_BY_LOCATION):  # and the typed reason, on asking
        refuse_if_written_by_location(managed_ns, table_id)
    # the bridge's own writes are the typed error, before pylance stages anything
    for write in (
        lambda: managed_ns.insert_into_table({"id": table_id}, ipc(_rows(110, 10))),
        lambda: managed_ns.merge_insert_into_table(
            {"id": table_id, "on": ["id"], "when_matched_update_all": True, "when_not_matched_insert_all": True},
            ipc(_rows(0, 3)),
        ),
        lambda: managed_ns.delete_from_table({"id": table_id, "predicate": "id < 5"}),
    ):
        with pytest.raises(InvalidTableStateError, match=WRITTEN_BY_LOCATION):
            write()
    assert _versions(managed_ns, table_id) == [1, 2] and _staged(location) == []  # refusals leave nothing

    # the way out the message names: the catalog records the version, and writes work again
    assert adopt_versions_written_by_location(managed_ns, table_id) == [3]
    assert adopt_versions_written_by_location(managed_ns, table_id) == []
    _append(managed_ns, table_id, _rows(110, 10))
    _merge(_rows(0, 3))(lance.dataset(namespace_client=managed_ns, table_id=table_id))
    assert _versions(managed_ns, table_id) == [1, 2, 3, 4, 5]
    assert lance.dataset(namespace_client=managed_ns, table_id=table_id).count_rows() == 125
    assert lance.dataset(location).count_rows() == 125 and lance.dataset(location).version == 5
    managed_ns.restore_table({"id": table_id, "version": 2})  # the data written by location need not stay
    assert lance.dataset(location).count_rows() == 110 and _versions(managed_ns, table_id)[-1] == 6


LATEST_GONE = r"Version 2 of .*the latest the catalog names, is gone.*cleanup_old_versions.*register_table"


def test_a_cleanup_by_location_that_removed_the_catalogs_latest_version_is_refused_by_name(
    managed_ns: IcebergLanceNamespace, db: list[str]
) -> None:
    table_id = [*db, "events"]
    location = lance.write_dataset(_rows(0, 100), namespace_client=managed_ns, table_id=table_id).uri
    _append(managed_ns, table_id, _rows(100, 10))
    lance.write_dataset(_rows(500, 5), location, mode="append")  # by path: versions 3 and 4
    lance.write_dataset(_rows(600, 5), location, mode="append")
    lance.dataset(location).cleanup_old_versions(older_than=datetime.timedelta(0))  # 1 to 3 go, the catalog's 2 too
    files = sorted(str(path) for path in Path(location).rglob("*"))

    for refused in (
        lambda: managed_ns.insert_into_table({"id": table_id}, ipc(_rows(110, 10))),
        lambda: managed_ns.restore_table({"id": table_id, "version": 2}),
        lambda: refuse_if_written_by_location(managed_ns, table_id),
        lambda: adopt_versions_written_by_location(managed_ns, table_id),
        # reads too: never the staged path of a manifest that is gone, nor a reason hidden
        lambda: managed_ns.count_table_rows({"id": table_id}),
        lambda: managed_ns.list_table_versions({"id": table_id}),
        lambda: managed_ns.list_table_versions({"id": table_id, "descending": True, "limit": 1}),
        lambda: managed_ns.describe_table_version({"id": table_id}),
    ):
        with pytest.raises(InvalidTableStateError, match=LATEST_GONE):
            refused()
    with pytest.raises(ValueError, match=LATEST_GONE):  # pylance, opening it through the namespace
        lance.dataset(namespace_client=managed_ns, table_id=table_id)
    assert sorted(str(path) for path in Path(location).rglob("*")) == files  # refused before anything was written

    # the way out the message names: the dataset as it is on disk, keeping Lance's own versions
    managed_ns.deregister_table({"id": table_id})
    managed_ns.register_table({"id": table_id, "location": location})
    managed_ns.insert_into_table({"id": table_id}, ipc(_rows(110, 10)))
    assert managed_ns.count_table_rows({"id": table_id}).count == 130


def test_a_version_written_by_location_is_adopted_before_the_server_answers_on_the_table(
    managed_ns: IcebergLanceNamespace, server: Any, db: list[str]
) -> None:
    """Through the server, a version written by location (by a client that found the location
    there) is what the next answer on the table sees: adopted first, then the write lands after it."""
    table_id = [*db, "events"]
    location = lance.write_dataset(_rows(0, 100), namespace_client=managed_ns, table_id=table_id).uri
    _append(managed_ns, table_id, _rows(100, 10))
    lance.write_dataset(_rows(500, 5), location, mode="append")
    table = f"{server.uri}/v1/table/{'$'.join(table_id)}"
    merge = "on=id&when_matched_update_all=true&when_not_matched_insert_all=true"
    for answer in (
        requests.post(f"{table}/insert", data=ipc(_rows(110, 10)), timeout=30),
        requests.post(f"{table}/merge_insert?{merge}", data=ipc(_rows(0, 3)), timeout=30),
    ):
        assert answer.status_code == 200, answer.text
    assert _versions(managed_ns, table_id) == [1, 2, 3, 4, 5]
    rest = lance.namespace.RestNamespace(uri=server.uri)  # pylance over REST: its append lands too
    lance.write_dataset(_rows(120, 10), namespace_client=rest, table_id=table_id, mode="append")
    assert _versions(managed_ns, table_id) == [1, 2, 3, 4, 5, 6] and _staged(location) == []
    assert lance.dataset(location).count_rows() == 135


def test_a_table_an_engine_makes_managed_is_answered_at_once_through_the_server(
    properties: dict[str, str], db: list[str], endpoint: str
) -> None:
    """A plain table the server has just answered on (and so took as unmanaged for a few seconds)
    is made managed by an engine: its versions are Lance's own, none in the catalog yet. The
    server's next answers on it adopt them at once rather than refuse the table as written by
    location until the server looks again."""
    from lance_iceberg_ns.server import serve_in_background

    table_id = [*db, "turned"]
    with IcebergLanceNamespace(**{**properties, "table_version_management": "false"}) as plain:
        lance.write_dataset(_rows(0, 10), namespace_client=plain, table_id=table_id)
        _append(plain, table_id, _rows(10, 5))
    plain_properties = {**properties, "table_version_management": "false"}
    with serve_in_background(properties=plain_properties, data_threads=1) as server:  # one data worker answers all
        table = f"{server.uri}/v1/table/{'$'.join(table_id)}"
        assert requests.post(f"{table}/count_rows", json={}, timeout=30).json() == 15
        companion = other_client(endpoint, table_id[0]).load_table(tuple(table_id[1:]))
        with companion.transaction() as transaction:  # ALTER TABLE ... SET TBLPROPERTIES, by an engine
            transaction.set_properties({"table_version_management": "true"})
        answer = requests.post(f"{table}/insert", data=ipc(_rows(15, 5)), timeout=30)
        assert answer.status_code == 200, answer.text
        assert requests.post(f"{table}/count_rows", json={}, timeout=30).json() == 20
    with IcebergLanceNamespace(**properties) as reader:
        assert _versions(reader, table_id) == [1, 2, 3]
        assert reader.describe_table({"id": table_id}).managed_versioning


def test_an_atomic_batch_refuses_a_version_written_by_location_and_moves_no_table(
    managed_ns: IcebergLanceNamespace, db: list[str]
) -> None:
    orders, lines = [*db, "orders"], [*db, "lines"]
    write_together(managed_ns, [(orders, _rows(0, 2), "create"), (lines, _rows(0, 3), "create")])
    write_together(managed_ns, [(orders, _rows(2, 2), "append"), (lines, _rows(3, 3), "append")])
    lines_location = managed_ns.describe_table({"id": lines}).location
    lance.write_dataset(_rows(99, 1), lines_location, mode="append")  # lines: version 3 by path
    with pytest.raises(InvalidTableStateError, match=WRITTEN_BY_LOCATION):
        write_together(managed_ns, [(orders, _rows(4, 1), "append"), (lines, _rows(6, 1), "append")])
    assert _versions(managed_ns, orders) == [1, 2] and _versions(managed_ns, lines) == [1, 2]
    # the same version number taken by a writer by location: refused too, not ConcurrentModification
    staged = {"manifest_path": stage_manifest(lines_location, 3), "version": 3}
    orders_location = managed_ns.describe_table({"id": orders}).location
    orders_staged = {"manifest_path": stage_manifest(orders_location, 3), "version": 3}
    with pytest.raises(InvalidTableStateError, match=WRITTEN_BY_LOCATION):
        managed_ns.batch_create_table_versions({"entries": [{"id": orders, **orders_staged}, {"id": lines, **staged}]})
    assert _versions(managed_ns, orders) == [1, 2] and _versions(managed_ns, lines) == [1, 2]
    assert _staged(lines_location) == []  # the refused table's staged manifests are deleted
    assert adopt_versions_written_by_location(managed_ns, lines) == [3]
    write_together(managed_ns, [(orders, _rows(4, 1), "append"), (lines, _rows(6, 1), "append")])
    assert _versions(managed_ns, orders) == [1, 2, 3] and _versions(managed_ns, lines) == [1, 2, 3, 4]
    assert lance.dataset(lines_location).count_rows() == 8


def test_polars_reads_each_append_and_its_sink_lance_is_a_write_by_location(
    managed_ns: IcebergLanceNamespace, db: list[str]
) -> None:
    polars = pytest.importorskip("polars")
    polars_pylance = pytest.importorskip("polars_pylance")
    table_id = [*db, "events"]
    location = lance.write_dataset(_rows(0, 100), namespace_client=managed_ns, table_id=table_id).uri
    _append(managed_ns, table_id, _rows(100, 10))
    through_namespace = lance.dataset(namespace_client=managed_ns, table_id=table_id)
    for source in (location, through_namespace):
        assert polars_pylance.scan_lance(source).select(polars.len()).collect().item() == 110

    # sink_lance commits by location even when given the dataset opened through the namespace
    polars_pylance.sink_lance(polars.DataFrame({"id": [500, 501]}), through_namespace, mode="append")
    assert _versions(managed_ns, table_id) == [1, 2] and lance.dataset(location).count_rows() == 112
    with pytest.raises(InvalidTableStateError, match=WRITTEN_BY_LOCATION):
        managed_ns.insert_into_table({"id": table_id}, ipc(_rows(110, 10)))
    assert adopt_versions_written_by_location(managed_ns, table_id) == [3]
    managed_ns.insert_into_table({"id": table_id}, ipc(_rows(110, 10)))
    assert polars_pylance.scan_lance(location).select(polars.len()).collect().item() == 122


def test_lancedb_and_pylance_through_the_server_commit_every_version_through_the_catalog(
    managed_ns: IcebergLanceNamespace, properties: dict[str, str], server: Any, db: list[str]
) -> None:
    lancedb = pytest.importorskip("lancedb")
    table_id = [*db, "events"]
    conn = lancedb.connect_namespace("iceberg", properties)
    table = conn.create_table("events", _rows(0, 100), namespace_path=db)
    table.add(_rows(100, 10))
    table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(_rows(105, 10))
    rest = lance.namespace.RestNamespace(uri=server.uri)  # a client of the server: pylance over REST
    lance.write_dataset(_rows(200, 5), namespace_client=rest, table_id=table_id, mode="append")
    location = managed_ns.describe_table({"id": table_id}).location
    assert _versions(managed_ns, table_id) == [1, 2, 3, 4]
    assert lance.dataset(location).version == 4 and lance.dataset(location).count_rows() == 120
    assert conn.open_table("events", namespace_path=db).count_rows() == 120


def test_a_version_committed_through_the_catalog_after_the_table_was_loaded_is_no_write_by_location(
    managed_ns: IcebergLanceNamespace, properties: dict[str, str], db: list[str]
) -> None:
    from lance_namespace import CreateTableVersionRequest

    from lance_iceberg_ns.identifiers import parse_table_id
    from lance_iceberg_ns.versions.snapshots import latest_version

    table_id = [*db, "events"]
    location = lance.write_dataset(_rows(0, 1), namespace_client=managed_ns, table_id=table_id).uri
    table = parse_table_id(table_id)
    loaded_before = managed_ns.companions.load_table(table, False)
    with IcebergLanceNamespace(**properties) as other:
        _append(other, table_id, _rows(1, 1))  # version 2 through the catalog: its final manifest is on disk
    following = CreateTableVersionRequest(id=table_id, version=3, manifest_path=stage_manifest(location, 3))
    current = managed_ns._versions._refuse_written_by_path(table, loaded_before, {}, following, False)
    assert latest_version(current) == 2  # asked again, not refused
