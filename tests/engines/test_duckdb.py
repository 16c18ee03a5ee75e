"""DuckDB's Lance extension writing a managed table through ``lance-iceberg-ns serve``.

The extension finds the table through the server (``describe_table``) and commits INSERT, UPDATE
and DELETE by the table's location, behind the catalog. Such a write is never answered and then
unseen: the server adopts the versions written by location (``adopt_before_answering``) before it
answers the next request on the table, so catalog readers see them and pylance's next commit
through the catalog follows them."""

from __future__ import annotations

import logging
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lance
import lance.namespace
import pyarrow as pa
import pytest
import requests

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.versions.manifests import manifest_name

from ..helpers import ipc

if TYPE_CHECKING:
    from lance_iceberg_ns.server import RunningServer

ROWS = 300


@pytest.fixture
def managed_ns(endpoint: str, lance_root: Path, db: list[str]) -> Iterator[IcebergLanceNamespace]:
    with IcebergLanceNamespace(endpoint=endpoint, root=str(lance_root), table_version_management="true") as ns:
        yield ns


@pytest.fixture
def table_id(managed_ns: IcebergLanceNamespace, db: list[str]) -> list[str]:
    """A managed table of ``ROWS`` rows at version 1: the catalog keeps its versions."""
    table_id = [*db, "t"]
    lance.write_dataset(_rows(0, ROWS), namespace_client=managed_ns, table_id=table_id)
    assert managed_ns.describe_table({"id": table_id}).managed_versioning
    return table_id


@pytest.fixture
def duck(duckdb_with_lance: Any, server: RunningServer, db: list[str]) -> Any:
    """DuckDB with the table's namespace attached through the server."""
    duckdb_with_lance.execute(f"ATTACH '{'$'.join(db)}' AS lake (TYPE LANCE, ENDPOINT '{server.uri}')")
    return duckdb_with_lance


def _rows(start: int, count: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + count), pa.int64()), "v": pa.array([0] * count, pa.int64())})


def _versions(ns: IcebergLanceNamespace, table_id: list[str]) -> list[int]:
    return [version.version for version in ns.list_table_versions({"id": table_id}).versions]


def _served_count(server: RunningServer, table_id: list[str]) -> int:
    answer = requests.post(f"{server.uri}/v1/table/{'$'.join(table_id)}/count_rows", json={}, timeout=30)
    assert answer.status_code == 200, answer.text
    return int(answer.json())


STATEMENTS = {
    "insert": ("INSERT INTO lake.main.t SELECT range + 1000, 1 FROM range(10)", 10, ROWS + 10, "v = 1", 10),
    "update": ("UPDATE lake.main.t SET v = 2 WHERE id < 3", 3, ROWS, "v = 2", 3),
    "delete": ("DELETE FROM lake.main.t WHERE id < 5", 5, ROWS - 5, "id < 5", 0),
}


@pytest.mark.parametrize("name", list(STATEMENTS))
def test_a_duckdb_write_through_serve_on_a_managed_table_is_what_catalog_readers_see_next(
    name: str, managed_ns: IcebergLanceNamespace, table_id: list[str], server: RunningServer, duck: Any
) -> None:
    statement, answered, rows, changed, matching = STATEMENTS[name]
    assert duck.execute(statement).fetchall() == [(answered,)]

    # pylance through the server's describe and managed versions: the first request after the write
    served = lance.dataset(namespace_client=lance.namespace.RestNamespace(uri=server.uri), table_id=table_id)
    assert (served.version, served.count_rows(), served.count_rows(changed)) == (2, rows, matching)
    assert _served_count(server, table_id) == rows
    assert _versions(managed_ns, table_id) == [1, 2]
    in_process = lance.dataset(namespace_client=managed_ns, table_id=table_id)
    assert (in_process.count_rows(), in_process.count_rows(changed)) == (rows, matching)

    # pylance's next commit through the catalog follows the version DuckDB wrote
    rest = lance.namespace.RestNamespace(uri=server.uri)
    lance.write_dataset(_rows(5000, 10), namespace_client=rest, table_id=table_id, mode="append")
    assert _versions(managed_ns, table_id) == [1, 2, 3]
    assert _served_count(server, table_id) == rows + 10


def test_duckdb_insert_update_and_delete_one_after_another_each_land_before_the_next(
    managed_ns: IcebergLanceNamespace, table_id: list[str], server: RunningServer, duck: Any
) -> None:
    """Each statement finds the table through the server, which adopts the one before: UPDATE and
    DELETE start from the version the statement before them wrote, and nothing is lost."""
    assert duck.execute(STATEMENTS["insert"][0]).fetchall() == [(10,)]
    assert duck.execute("UPDATE lake.main.t SET v = 2 WHERE id = 5").fetchall() == [(1,)]
    assert duck.execute(STATEMENTS["delete"][0]).fetchall() == [(5,)]
    summary = "SELECT count(*), count(*) FILTER (v = 1), count(*) FILTER (v = 2) FROM lake.main.t"
    assert duck.execute(summary).fetchall() == [(305, 10, 1)]

    assert _served_count(server, table_id) == 305
    assert _versions(managed_ns, table_id) == [1, 2, 3, 4]
    rest = lance.namespace.RestNamespace(uri=server.uri)
    lance.write_dataset(_rows(5000, 10), namespace_client=rest, table_id=table_id, mode="append")
    lance.write_dataset(_rows(6000, 10), namespace_client=managed_ns, table_id=table_id, mode="append")
    assert _versions(managed_ns, table_id) == [1, 2, 3, 4, 5, 6]
    assert lance.dataset(namespace_client=managed_ns, table_id=table_id).count_rows() == 325


def test_a_planted_manifest_is_never_adopted_and_writes_through_serve_stay_refused_by_name(
    managed_ns: IcebergLanceNamespace,
    table_id: list[str],
    server: RunningServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only a well-formed version of the table's own dataset is adopted: a manifest copied in from
    another dataset is no version of it, so reads through the server see the catalog's latest and
    writes are refused (409) naming the version on disk."""
    location = managed_ns.describe_table({"id": table_id}).location
    elsewhere = lance.write_dataset(_rows(0, 7), str(tmp_path / "elsewhere.lance"))
    elsewhere = lance.write_dataset(_rows(7, 7), elsewhere.uri, mode="append")
    manifest = next(Path(elsewhere.uri, "_versions").glob("*.manifest"))
    shutil.copyfile(manifest, Path(location, "_versions", manifest_name(2)))  # as the table's version 2

    refused = r"not adopted: .*no version a writer by location committed"
    with caplog.at_level(logging.WARNING):
        assert _served_count(server, table_id) == ROWS
        deadline = time.monotonic() + 10  # said in the data worker, and relayed to this log as it reads it
        while not re.search(refused, caplog.text) and time.monotonic() < deadline:
            time.sleep(0.05)
    assert re.search(refused, caplog.text)
    answer = requests.post(f"{server.uri}/v1/table/{'$'.join(table_id)}/insert", data=ipc(_rows(9, 1)), timeout=30)
    assert (answer.status_code, answer.json()["code"]) == (409, 19), answer.text
    assert _versions(managed_ns, table_id) == [1]
