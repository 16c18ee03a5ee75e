"""The data half of the namespace: every data operation resolves its table through the catalog,
in process and through the REST server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lance
import lance.namespace
import pytest
from lance_namespace import CountTableRowsRequest
from lance_namespace.errors import InvalidInputError, TableNotFoundError, TableVersionNotFoundError

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.server import RunningServer, serve_in_background

from .helpers import create_plain_iceberg_table, write_values


@pytest.fixture
def server(endpoint: str, lance_root: Path) -> Iterator[RunningServer]:
    with serve_in_background(properties={"endpoint": endpoint, "root": str(lance_root)}) as running:
        yield running


@pytest.fixture
def rest(server: RunningServer) -> lance.namespace.RestNamespace:
    return lance.namespace.RestNamespace(uri=server.uri)


def test_count_rows_sees_the_latest_version_with_a_predicate_and_at_a_version(
    ns: IcebergLanceNamespace, db: list[str], rest: lance.namespace.RestNamespace
) -> None:
    table_id = [*db, "t"]
    write_values(ns, table_id, list(range(10)))
    assert ns.count_table_rows(CountTableRowsRequest(id=table_id)) == 10
    write_values(ns, table_id, [100, 101], mode="append")  # another writer: seen at once
    assert ns.count_table_rows(CountTableRowsRequest(id=table_id)) == 12
    assert ns.count_table_rows({"id": table_id, "predicate": "v >= 100"}) == 2
    assert ns.count_table_rows({"id": table_id, "version": 1}) == 10
    assert rest.count_table_rows(CountTableRowsRequest(id=table_id, predicate="v < 3")).count == 3
    with pytest.raises(InvalidInputError):
        ns.count_table_rows({"id": table_id, "predicate": "nope >"})
    with pytest.raises(InvalidInputError):
        rest.count_table_rows(CountTableRowsRequest(id=table_id, predicate="missing_column = 1"))
    with pytest.raises(TableVersionNotFoundError):
        ns.count_table_rows({"id": table_id, "version": 99})


def test_data_operations_go_through_the_catalog(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, lance_root: Path
) -> None:
    write_values(ns, [*db, "gone"], [1])
    ns.drop_table({"id": [*db, "gone"]})  # soft-deleted: not found for data operations
    with pytest.raises(TableNotFoundError):
        ns.count_table_rows({"id": [*db, "gone"]})
    create_plain_iceberg_table(endpoint, db[0], (db[1], "plain"), str(lance_root / "plain"))
    with pytest.raises(InvalidInputError, match="not a Lance table"):
        ns.count_table_rows({"id": [*db, "plain"]})
