"""What an orphan cleanup costs: every version is read once by location, and the catalog is not
asked once per version (a managed table's versions read through the namespace would each ask it)."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.jobs.orphans import remove_orphan_files

from ..conftest import RequestCounter


def _catalog_requests_of_a_cleanup(
    endpoint: str, lance_root: Path, db: list[str], request_counter: RequestCounter, versions: int
) -> int:
    properties = {"endpoint": endpoint, "root": str(lance_root), "table_version_management": "true"}
    table_id = [*db, f"v{versions}"]
    with IcebergLanceNamespace(**properties) as ns:
        lance.write_dataset(pa.table({"id": [0]}), namespace_client=ns, table_id=table_id)
        for row in range(1, versions):
            lance.write_dataset(pa.table({"id": [row]}), namespace_client=ns, table_id=table_id, mode="append")
    with IcebergLanceNamespace(**properties) as ns:
        request_counter.reset()
        assert remove_orphan_files(ns, table_id, older_than=0).files == []
        return request_counter.count


def test_an_orphan_cleanup_of_a_managed_table_asks_the_catalog_the_same_for_any_number_of_versions(
    endpoint: str, lance_root: Path, db: list[str], request_counter: RequestCounter
) -> None:
    few = _catalog_requests_of_a_cleanup(endpoint, lance_root, db, request_counter, 2)
    many = _catalog_requests_of_a_cleanup(endpoint, lance_root, db, request_counter, 6)
    assert many == few
