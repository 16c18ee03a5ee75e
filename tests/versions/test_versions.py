"""Table versions of Lance tables in the catalog: listing (pages, both orders), describing and
restoring, read from the Lance dataset; missing versions are TableVersionNotFound."""

from __future__ import annotations

import time

import lance
import pyarrow as pa
import pytest
from lance_namespace import ListTableVersionsRequest
from lance_namespace.errors import (
    ErrorCode,
    InvalidInputError,
    TableNotFoundError,
    TableVersionNotFoundError,
    UnsupportedOperationError,
)

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.versions.manifests import final_manifest_name, is_staged, names_a_manifest, version_of_manifest

from ..helpers import ipc
from ..stores import Store

# the versions are read from the dataset's own _versions/: on a local disk and on S3
on_both_stores = pytest.mark.usefixtures("store")


def _write_versions(ns: IcebergLanceNamespace, table_id: list[str], count: int) -> None:
    lance.write_dataset(pa.table({"id": [1]}), namespace_client=ns, table_id=table_id)
    for i in range(2, count + 1):
        lance.write_dataset(pa.table({"id": [i]}), namespace_client=ns, table_id=table_id, mode="append")


@on_both_stores
def test_versions_are_listed_in_pages_in_both_orders(ns: IcebergLanceNamespace, db: list[str]) -> None:
    table_id = [*db, "events"]
    started = int(time.time() * 1000) - 1000
    _write_versions(ns, table_id, 5)

    listed = ns.list_table_versions(ListTableVersionsRequest(id=table_id))
    assert [v.version for v in listed.versions] == [1, 2, 3, 4, 5] and listed.page_token is None
    latest = listed.versions[-1]
    assert latest.manifest_path.startswith("_versions/") and latest.manifest_path.endswith(".manifest")
    assert latest.manifest_size and latest.manifest_size > 0
    assert started <= latest.timestamp_millis <= int(time.time() * 1000) + 1000
    assert latest.metadata and latest.metadata["total_rows"] == "5"

    pages, token = [], None
    while True:
        page = ns.list_table_versions({"id": table_id, "descending": True, "limit": 2, "page_token": token})
        pages.append([v.version for v in page.versions])
        token = page.page_token
        if token is None:
            break
    assert pages == [[5, 4], [3, 2], [1]]
    ascending = ns.list_table_versions({"id": table_id, "limit": 3, "page_token": "2"})
    assert [v.version for v in ascending.versions] == [3, 4, 5] and ascending.page_token is None


@on_both_stores
def test_describe_and_restore(ns: IcebergLanceNamespace, db: list[str]) -> None:
    table_id = [*db, "events"]
    _write_versions(ns, table_id, 3)
    assert ns.describe_table_version({"id": table_id, "version": 2}).version.metadata["total_rows"] == "2"
    assert ns.describe_table_version({"id": table_id}).version.version == 3

    ns.restore_table({"id": table_id, "version": 1})
    dataset = lance.dataset(namespace_client=ns, table_id=table_id)
    assert dataset.version == 4 and dataset.to_table()["id"].to_pylist() == [1]
    assert [v.version for v in ns.list_table_versions({"id": table_id}).versions] == [1, 2, 3, 4]


@on_both_stores
def test_writes_after_a_restore_build_on_the_restored_version(ns: IcebergLanceNamespace, db: list[str]) -> None:
    """The dataset the bridge keeps open predates the restore; pylance rebases an append on the
    versions it missed, but not on a restore, so a write must start from the latest version."""
    table_id = [*db, "events"]
    ns.create_table({"id": table_id}, ipc(pa.table({"id": [1]})))
    ns.insert_into_table({"id": table_id, "mode": "append"}, ipc(pa.table({"id": [2]})))
    ns.restore_table({"id": table_id, "version": 1})
    appended = ns.insert_into_table({"id": table_id, "mode": "append"}, ipc(pa.table({"id": [3]})))
    assert appended.version == 4
    assert sorted(lance.dataset(namespace_client=ns, table_id=table_id).to_table()["id"].to_pylist()) == [1, 3]


@on_both_stores
def test_missing_versions_tables_and_bad_requests_are_typed(ns: IcebergLanceNamespace, db: list[str]) -> None:
    table_id = [*db, "events"]
    _write_versions(ns, table_id, 2)
    with pytest.raises(TableVersionNotFoundError) as missing:
        ns.describe_table_version({"id": table_id, "version": 9})
    assert missing.value.code == ErrorCode.TABLE_VERSION_NOT_FOUND == 11
    with pytest.raises(TableVersionNotFoundError):
        ns.restore_table({"id": table_id, "version": 9})
    with pytest.raises(TableNotFoundError):
        ns.list_table_versions({"id": [*db, "missing"]})
    with pytest.raises(InvalidInputError):
        ns.list_table_versions({"id": table_id, "page_token": "not-a-version"})
    with pytest.raises(InvalidInputError):
        ns.restore_table({"id": table_id})
    with pytest.raises(UnsupportedOperationError):
        ns.list_table_versions({"id": table_id, "branch": "dev"})
    assert lance.dataset(namespace_client=ns, table_id=table_id).version == 2  # nothing changed


def test_manifest_names_of_both_naming_schemes() -> None:
    assert version_of_manifest("7.manifest") == 7
    assert version_of_manifest("18446744073709551613.manifest") == 2
    assert version_of_manifest("2.manifest-0b1c") is None
    assert version_of_manifest("latest_version_hint.json") is None


def test_a_staged_manifest_is_named_as_pylance_stages_it() -> None:
    """``<final name>-<uuid>``, the UUID as Rust's ``uuid`` spells it; anything else is no staged manifest."""
    staged = "18446744073709551613.manifest-0b1c2d3e-4f50-4a6b-8c7d-9e0f1a2b3c4d"
    assert is_staged(f"t.lance/_versions/{staged}") and final_manifest_name(staged) == "18446744073709551613.manifest"
    assert final_manifest_name(f"t.lance/_versions/{staged}") == "18446744073709551613.manifest"
    for other in ("2.manifest", "2.manifest-0b1c", "x.manifest-0b1c2d3e-4f50-4a6b-8c7d-9e0f1a2b3c4d", "2.manifest#1"):
        assert not is_staged(other) and final_manifest_name(other) == other
    assert names_a_manifest(staged) and names_a_manifest("2.manifest") and not names_a_manifest("2.manifest-0b1c")


@pytest.mark.parametrize("managed", ["false", "true"])
def test_restoring_a_table_declared_but_never_written_is_table_not_found(
    endpoint: str, store: Store, db: list[str], managed: str
) -> None:
    with store.namespace(endpoint, table_version_management=managed) as ns:
        table_id = [*db, "declared"]
        ns.declare_table({"id": table_id})
        with pytest.raises(TableNotFoundError, match="declared but has no data yet") as caught:
            ns.restore_table({"id": table_id, "version": 1})
        assert store.root not in str(caught.value)
        assert ns.describe_table({"id": table_id, "check_declared": True}).is_only_declared is True
