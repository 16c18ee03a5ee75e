"""What one append through pylance costs on a table whose versions the catalog manages: the
catalog requests and file operations of the namespace, against what is strictly needed (one
compare-and-swap commit, one look that the version is not already on disk, one rename)."""

from __future__ import annotations

from typing import Any

import lance
import pyarrow as pa
import pytest

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.versions import manifests

from ..conftest import RequestCounter

ROW = pa.table({"id": [1]})


class _CountedFiles:
    """The storage module, noting every operation the namespace makes on a table's files."""

    def __init__(self, module: Any, operations: list[str]) -> None:
        self._module, self._operations = module, operations

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._module, name)
        if not callable(found):
            return found

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._operations.append(name)
            return found(*args, **kwargs)

        return counted


@pytest.fixture
def file_operations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The operations on a table's files made through the modules that read managed versions."""
    operations: list[str] = []
    monkeypatch.setattr(manifests, "files", _CountedFiles(manifests.files, operations))
    return operations


def test_an_append_costs_one_catalog_commit_two_looks_and_one_rename(
    managed_ns: IcebergLanceNamespace, db: list[str], request_counter: RequestCounter, file_operations: list[str]
) -> None:
    table_id = [*db, "appended"]
    lance.write_dataset(ROW, namespace_client=managed_ns, table_id=table_id)
    lance.write_dataset(ROW, namespace_client=managed_ns, table_id=table_id, mode="append")
    request_counter.reset()
    file_operations.clear()

    lance.write_dataset(ROW, namespace_client=managed_ns, table_id=table_id, mode="append")

    # the describe and the latest version come from the state this process committed a moment ago
    assert [method for method, _ in request_counter.requests] == ["POST"]
    # a look past the latest version (a writer by location) when pylance asks for it, a look that
    # the new version's final manifest is not there before the commit, and after it the move into
    # place (on a local disk a hard link, made by name: no look); the latest version's own final
    # manifest, moved into place by this process, is not looked up again; the staged manifest is
    # read once, to check that it names only the table's own files
    assert file_operations == ["stat_files", "stat_files", "read_file", "move_unless_taken"]
    listed = managed_ns.list_table_versions({"id": table_id, "descending": True, "limit": 1}).versions
    assert [v.version for v in listed] == [3] and listed[0].manifest_path.endswith(".manifest")
    assert lance.dataset(namespace_client=managed_ns, table_id=table_id).count_rows() == 3


def test_a_state_loaded_from_the_catalog_still_looks_for_the_final_manifest(
    managed_ns: IcebergLanceNamespace, db: list[str], file_operations: list[str]
) -> None:
    table_id = [*db, "loaded"]
    lance.write_dataset(ROW, namespace_client=managed_ns, table_id=table_id)
    with IcebergLanceNamespace(**managed_ns.properties) as other:
        other.describe_table({"id": table_id})  # keeps the loaded state for the latest-version request
        file_operations.clear()
        listed = other.list_table_versions({"id": table_id, "descending": True, "limit": 1}).versions
    assert [v.version for v in listed] == [1] and listed[0].manifest_path.endswith(".manifest")
    assert file_operations == ["stat_files", "stat_files"]  # past the latest, and its final manifest
