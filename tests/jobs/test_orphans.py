"""Orphan data files: found and deleted only when no version references them and they are older
than the margin; every version stays readable."""

from __future__ import annotations

import os
import time
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance_namespace.errors import InvalidInputError, TableNotFoundError

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.jobs.orphans import find_orphan_files, remove_orphan_files


def _uncommitted_fragment(location: str, storage_options: dict[str, str] | None = None) -> list[str]:
    """Write a fragment the way a failed task attempt does, without committing it; its file names."""
    fragments = lance.fragment.write_fragments(pa.table({"id": [100, 101]}), location, storage_options=storage_options)
    return [f"data/{data_file.path}" for fragment in fragments for data_file in fragment.files]


def _age(location: str, files: list[str], seconds: float) -> None:
    then = time.time() - seconds
    for name in files:
        os.utime(os.path.join(location, name), (then, then))


def _all_data_files(location: str) -> set[str]:
    return {f"data/{name}" for name in os.listdir(os.path.join(location, "data"))}


def test_only_old_unreferenced_files_are_deleted_and_every_version_still_reads(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, lance_root: Path
) -> None:
    table_id = [*db, "events"]
    first = lance.write_dataset(pa.table({"id": [1, 2, 3]}), namespace_client=ns, table_id=table_id)
    location = first.uri
    lance.write_dataset(pa.table({"id": [4]}), namespace_client=ns, table_id=table_id, mode="overwrite")
    committed = _all_data_files(location)  # version 1's file is referenced only by version 1 now
    old_orphans = _uncommitted_fragment(location)
    fresh_orphans = _uncommitted_fragment(location)
    _age(location, sorted(committed) + old_orphans, 4 * 86400)

    dry = remove_orphan_files(ns, table_id, dry_run=True)
    assert dry.files == sorted(old_orphans) and dry.dry_run and dry.bytes > 0
    assert _all_data_files(location) == committed | set(old_orphans) | set(fresh_orphans)

    removed = remove_orphan_files(ns, table_id)  # default margin: 3 days
    assert removed.files == sorted(old_orphans)
    assert _all_data_files(location) == committed | set(fresh_orphans)
    assert lance.dataset(location, version=1).to_table()["id"].to_pylist() == [1, 2, 3]
    assert lance.dataset(location).to_table()["id"].to_pylist() == [4]

    assert remove_orphan_files({"endpoint": endpoint, "root": str(lance_root)}, table_id, older_than=0).files == sorted(
        fresh_orphans
    )
    assert _all_data_files(location) == committed
    assert remove_orphan_files(ns, table_id, older_than="1s").files == []


def test_bad_margin_and_missing_table_are_typed_errors(ns: IcebergLanceNamespace, db: list[str]) -> None:
    table_id = [*db, "events"]
    lance.write_dataset(pa.table({"id": [1]}), namespace_client=ns, table_id=table_id)
    with pytest.raises(InvalidInputError):
        remove_orphan_files(ns, table_id, older_than="soon")
    with pytest.raises(TableNotFoundError):
        remove_orphan_files(ns, [*db, "missing"])


def test_orphans_on_an_object_store(s3_endpoint: str, endpoint: str, warehouse: str, tmp_path: Path) -> None:
    storage = {
        "aws_access_key_id": "test-AK",
        "aws_secret_access_key": "test-secret",
        "aws_endpoint": s3_endpoint,
        "aws_region": "us-east-1",
        "allow_http": "true",
        "aws_virtual_hosted_style_request": "false",
    }
    properties = {"endpoint": endpoint, "root": f"s3://lake/orphans-{tmp_path.name}"}
    properties.update({f"storage.{key}": value for key, value in storage.items()})
    with IcebergLanceNamespace(**properties) as ns:
        ns.create_namespace({"id": [warehouse, "s3db"], "mode": "exist_ok"})
        table_id = [warehouse, "s3db", "events"]
        dataset = lance.write_dataset(pa.table({"id": [1, 2]}), namespace_client=ns, table_id=table_id)
        orphans = _uncommitted_fragment(dataset.uri, storage)
        found = find_orphan_files(dataset.uri, storage, older_than=0, dry_run=True)
        assert found.files == sorted(orphans)
        assert remove_orphan_files(ns, table_id, older_than=0).files == sorted(orphans)
        assert find_orphan_files(dataset.uri, storage, older_than=0).files == []
        assert lance.dataset(namespace_client=ns, table_id=table_id).count_rows() == 2
