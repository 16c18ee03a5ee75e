"""The hand-off to pylance and lancedb: they create, write, list and open tables through us."""

from __future__ import annotations

from pathlib import Path

import lance
import lancedb
import pyarrow as pa
import pytest
from lance_namespace import ListTablesRequest
from lance_namespace.errors import TableAlreadyExistsError, TableNotFoundError

from lance_iceberg_ns import IcebergLanceNamespace


def test_write_dataset_create_append_overwrite_and_read_versions(ns: IcebergLanceNamespace, db: list[str]) -> None:
    table_id = [*db, "events"]
    lance.write_dataset(pa.table({"id": [1, 2, 3]}), namespace_client=ns, table_id=table_id, mode="create")
    lance.write_dataset(pa.table({"id": [4]}), namespace_client=ns, table_id=table_id, mode="append")
    lance.write_dataset(pa.table({"id": [9, 9]}), namespace_client=ns, table_id=table_id, mode="overwrite")

    latest = lance.dataset(namespace_client=ns, table_id=table_id)
    assert latest.version == 3
    assert latest.to_table().column("id").to_pylist() == [9, 9]
    assert lance.dataset(namespace_client=ns, table_id=table_id, version=2).count_rows() == 4
    assert lance.dataset(namespace_client=ns, table_id=table_id, version=1).count_rows() == 3
    assert ns.list_tables(ListTablesRequest(id=db)).tables == ["events"]


def test_write_dataset_create_twice_raises_table_already_exists(ns: IcebergLanceNamespace, db: list[str]) -> None:
    lance.write_dataset(pa.table({"id": [1]}), namespace_client=ns, table_id=[*db, "t"])
    with pytest.raises(TableAlreadyExistsError):
        lance.write_dataset(pa.table({"id": [1]}), namespace_client=ns, table_id=[*db, "t"], mode="create")


def test_opening_a_missing_table_raises_table_not_found(ns: IcebergLanceNamespace, db: list[str]) -> None:
    with pytest.raises(TableNotFoundError):
        lance.dataset(namespace_client=ns, table_id=[*db, "absent"])


def test_lancedb_connect_namespace_creates_lists_and_opens_tables(
    endpoint: str, lance_root: Path, db: list[str]
) -> None:
    conn = lancedb.connect_namespace("iceberg", {"endpoint": endpoint, "root": str(lance_root)})
    data = pa.table({"id": [1, 2, 3], "vector": pa.array([[0.1, 0.2]] * 3, pa.list_(pa.float32(), 2))})
    conn.create_table("vectors", data, namespace_path=db)
    assert list(conn.list_tables(namespace_path=db).tables) == ["vectors"]
    table = conn.open_table("vectors", namespace_path=db)
    assert table.count_rows() == 3
    hits = table.search([0.1, 0.2]).limit(2).to_arrow()
    assert hits.num_rows == 2
    # the table is a companion table in the catalog, readable by pylance through the bridge too
    with IcebergLanceNamespace(endpoint=endpoint, root=str(lance_root)) as ns:
        assert lance.dataset(namespace_client=ns, table_id=[*db, "vectors"]).count_rows() == 3
