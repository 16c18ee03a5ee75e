"""Orphan data files: found and deleted only when no version references them and they are older
than the margin; every version stays readable."""

from __future__ import annotations

import os
import time

import lance
import pyarrow as pa
import pytest
from lance_namespace.errors import InvalidInputError, TableNotFoundError

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.jobs.orphans import find_orphan_files, remove_orphan_files
from lance_iceberg_ns.storage import files
from lance_iceberg_ns.storage.locations import local_path

from ..stores import Store

on_each_store = pytest.mark.usefixtures("store")  # the test runs on a local disk and on S3


def _uncommitted_fragment(location: str, storage_options: dict[str, str]) -> list[str]:
    """Write a fragment the way a failed task attempt does, without committing it; its file names."""
    fragments = lance.fragment.write_fragments(pa.table({"id": [100, 101]}), location, storage_options=storage_options)
    return [f"data/{data_file.path}" for fragment in fragments for data_file in fragment.files]


def _data_files(location: str, store: Store) -> set[str]:
    return {f"data/{found.path}" for found in files.list_files(location, "data", store.storage_options)}


def _margin_to(cutoff: float) -> float:
    """The margin (seconds) that makes a cleanup started now spare exactly what was written after ``cutoff``."""
    return time.time() - cutoff


@on_each_store
def test_only_old_unreferenced_files_are_deleted_and_every_version_still_reads(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store
) -> None:
    table_id = [*db, "events"]
    first = lance.write_dataset(pa.table({"id": [1, 2, 3]}), namespace_client=ns, table_id=table_id)
    location = first.uri
    lance.write_dataset(pa.table({"id": [4]}), namespace_client=ns, table_id=table_id, mode="overwrite")
    committed = _data_files(location, store)  # version 1's file is referenced only by version 1 now
    old_orphans = _uncommitted_fragment(location, store.storage_options)
    # an object store may keep modification times to the second: a second on either side of the cutoff
    time.sleep(1.1)
    cutoff = time.time()
    time.sleep(2.1)
    fresh_orphans = _uncommitted_fragment(location, store.storage_options)
    everything = committed | set(old_orphans) | set(fresh_orphans)

    kept = remove_orphan_files(ns, table_id)  # default margin: 3 days
    assert kept.files == [] and kept.skipped == sorted(old_orphans + fresh_orphans)
    dry = remove_orphan_files(ns, table_id, older_than=_margin_to(cutoff), dry_run=True)
    assert dry.files == sorted(old_orphans) and dry.dry_run and dry.bytes > 0
    assert _data_files(location, store) == everything

    removed = remove_orphan_files(ns, table_id, older_than=_margin_to(cutoff))
    assert removed.files == sorted(old_orphans) and removed.skipped == sorted(fresh_orphans)
    assert _data_files(location, store) == committed | set(fresh_orphans)
    assert store.dataset(location, version=1).to_table()["id"].to_pylist() == [1, 2, 3]
    assert store.dataset(location).to_table()["id"].to_pylist() == [4]

    properties = {"endpoint": endpoint, "root": store.root, **store.properties}
    assert remove_orphan_files(properties, table_id, older_than=0).files == sorted(fresh_orphans)
    assert _data_files(location, store) == committed
    assert remove_orphan_files(ns, table_id, older_than="1s").files == []
    assert lance.dataset(namespace_client=ns, table_id=table_id).count_rows() == 1


# disk only: it ages files by setting their modification time, which an object store does not allow
def test_files_past_the_default_margin_of_three_days_are_deleted(ns: IcebergLanceNamespace, db: list[str]) -> None:
    table_id = [*db, "events"]
    location = lance.write_dataset(pa.table({"id": [1]}), namespace_client=ns, table_id=table_id).uri
    old, recent = _uncommitted_fragment(location, {}), _uncommitted_fragment(location, {})
    for names, days in ((old, 4), (recent, 2)):
        then = time.time() - days * 86400
        for name in names:
            os.utime(os.path.join(local_path(location), name), (then, then))
    removed = remove_orphan_files(ns, table_id)
    assert removed.files == sorted(old) and removed.skipped == sorted(recent)


@on_each_store
def test_bad_margin_and_missing_table_are_typed_errors(ns: IcebergLanceNamespace, db: list[str]) -> None:
    table_id = [*db, "events"]
    lance.write_dataset(pa.table({"id": [1]}), namespace_client=ns, table_id=table_id)
    with pytest.raises(InvalidInputError):
        remove_orphan_files(ns, table_id, older_than="soon")
    with pytest.raises(TableNotFoundError):
        remove_orphan_files(ns, [*db, "missing"])


@on_each_store
def test_orphans_are_found_by_location_with_the_store_s_options(
    ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    table_id = [*db, "events"]
    dataset = lance.write_dataset(pa.table({"id": [1, 2]}), namespace_client=ns, table_id=table_id)
    orphans = _uncommitted_fragment(dataset.uri, store.storage_options)
    found = find_orphan_files(dataset.uri, store.storage_options, older_than=0, dry_run=True)
    assert found.files == sorted(orphans) and store.exists(f"{dataset.uri}/{orphans[0]}")
    assert remove_orphan_files(ns, table_id, older_than=0).files == sorted(orphans)
    assert find_orphan_files(dataset.uri, store.storage_options, older_than=0).files == []
    assert not any(store.exists(f"{dataset.uri}/{name}") for name in orphans)
    assert lance.dataset(namespace_client=ns, table_id=table_id).count_rows() == 2
