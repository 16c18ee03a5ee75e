"""What the catalog records of a managed table: its two latest versions (and any a tag or branch
holds), the dataset's own ``_versions/`` answering for the ones before them, and nothing lost on
the way: a ref another client makes, a version whose manifest cannot be finalized yet, a stray
file in ``_versions/``, a commit whose outcome is unknown, a table that recorded every version."""

from __future__ import annotations

from collections.abc import Iterator

import lance
import pyarrow as pa
import pytest
from lance_namespace.errors import InvalidTableStateError, LanceNamespaceError
from pyiceberg import exceptions as iceberg

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.storage import files
from lance_iceberg_ns.versions import manifests, snapshots
from lance_iceberg_ns.versions.manifests import manifest_name
from lance_iceberg_ns.versions.snapshots import VERSION_KEY

from ..helpers import other_client
from ..stores import Store
from .stored import final_versions, iceberg_client, stage_manifest

pytestmark = pytest.mark.usefixtures("store")  # every test on a local disk and on S3


@pytest.fixture
def managed_ns(endpoint: str, store: Store, db: list[str]) -> Iterator[IcebergLanceNamespace]:
    # a long commit_cache_seconds: the writer keeps planning on its own commits, never reloading
    with store.namespace(endpoint, table_version_management="true", commit_cache_seconds="300") as ns:
        yield ns


def _append(ns: IcebergLanceNamespace, table_id: list[str], value: int) -> None:
    mode = "create" if value == 1 else "append"
    lance.write_dataset(pa.table({"id": [value]}), namespace_client=ns, table_id=table_id, mode=mode)


def _listed(ns: IcebergLanceNamespace, table_id: list[str]) -> list[int]:
    return [v.version for v in ns.list_table_versions({"id": table_id}).versions]


def _recorded(endpoint: str, table_id: list[str]) -> list[str | None]:
    """The Lance version of each snapshot the catalog holds, oldest first (None: an engine's)."""
    table = other_client(endpoint, table_id[0]).load_table(tuple(table_id[1:]))  # the catalog's answer alone
    ordered = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number or 0)
    return [s.summary.additional_properties.get(VERSION_KEY) if s.summary else None for s in ordered]


def test_a_tag_or_branch_made_on_the_latest_version_by_another_client_is_kept(
    managed_ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store
) -> None:
    table_id = [*db, "t"]
    for value in (1, 2):
        _append(managed_ns, table_id, value)  # the writer now plans on its own commit of version 2
    companion = iceberg_client(endpoint, db[0], store).load_table((db[1], "t"))
    held = companion.current_snapshot().snapshot_id
    companion.manage_snapshots().create_tag(held, "audited").create_branch(held, "review").commit()
    for value in (3, 4, 5):
        _append(managed_ns, table_id, value)
    refs = iceberg_client(endpoint, db[0], store).load_table((db[1], "t")).metadata.refs
    assert refs["audited"].snapshot_id == refs["review"].snapshot_id == held
    assert _recorded(endpoint, table_id) == ["2", "4", "5"]  # the held version, and the latest two
    assert _listed(managed_ns, table_id) == [1, 2, 3, 4, 5]
    assert iceberg_client(endpoint, db[0], store).load_table((db[1], "t")).scan().to_arrow().num_rows == 0


def test_deleting_a_version_a_tag_holds_is_refused_and_changes_nothing(
    managed_ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store
) -> None:
    table_id = [*db, "t"]
    for value in range(1, 5):
        _append(managed_ns, table_id, value)
    location = managed_ns.describe_table({"id": table_id}).location
    managed_ns.create_table_tag({"id": table_id, "tag": "keep", "version": 1})
    companion = iceberg_client(endpoint, db[0], store).load_table((db[1], "t"))
    companion.manage_snapshots().create_tag(companion.current_snapshot().snapshot_id, "v4").commit()
    with pytest.raises(InvalidTableStateError, match="1 \\(Lance tag 'keep'\\)"):
        managed_ns.batch_delete_table_versions({"id": table_id, "ranges": [{"start_version": 1, "end_version": 3}]})
    with pytest.raises(InvalidTableStateError, match="4 \\(Iceberg tag 'v4'\\)"):
        managed_ns.batch_delete_table_versions({"id": table_id, "ranges": [{"start_version": 4, "end_version": 5}]})
    assert final_versions(store, location) == [1, 2, 3, 4] and _listed(managed_ns, table_id) == [1, 2, 3, 4]
    assert lance.dataset(namespace_client=managed_ns, table_id=table_id, version="keep").count_rows() == 1
    unheld = {"start_version": 2, "end_version": 4}
    deleted = managed_ns.batch_delete_table_versions({"id": table_id, "ranges": [unheld]})
    assert deleted.deleted_count == 2 and _listed(managed_ns, table_id) == [1, 4]


def _refused(*args: object) -> bool:
    raise OSError("the store refuses the copy")


def test_a_version_that_cannot_be_finalized_yet_stays_recorded_with_every_version_after_it(
    managed_ns: IcebergLanceNamespace, db: list[str], endpoint: str, monkeypatch: pytest.MonkeyPatch, store: Store
) -> None:
    table_id = [*db, "t"]
    _append(managed_ns, table_id, 1)
    with monkeypatch.context() as writer_dies:  # version 2's writer dies between the catalog commit and the copy
        writer_dies.setattr(manifests, "finalize", lambda location, options, version: version)
        _append(managed_ns, table_id, 2)
    location = managed_ns.describe_table({"id": table_id}).location
    with monkeypatch.context() as store_refuses:  # and the store refuses the copy to its final name for now
        store_refuses.setattr(files, "copy_unless_taken", _refused)
        for version in (3, 4, 5):
            with IcebergLanceNamespace(**managed_ns.properties) as other_writer:
                other_writer.create_table_version(
                    {"id": table_id, "version": version, "manifest_path": stage_manifest(store, location, version)}
                )
        assert _recorded(endpoint, table_id) == ["2", "3", "4", "5"]  # 2 stays on main's history, and all after it
        assert _listed(managed_ns, table_id) == [1, 2, 3, 4, 5]
    # the store recovers: the next commit finalizes version 2 and lets it go
    with IcebergLanceNamespace(**managed_ns.properties) as other_writer:
        other_writer.create_table_version(
            {"id": table_id, "version": 6, "manifest_path": stage_manifest(store, location, 6)}
        )
    assert _recorded(endpoint, table_id) == ["5", "6"]
    assert _listed(managed_ns, table_id) == [1, 2, 3, 4, 5, 6]
    assert final_versions(store, location) == [1, 2, 3, 4, 5, 6]


def test_a_stray_file_above_the_latest_version_does_not_hide_the_earlier_versions(
    managed_ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    table_id = [*db, "t"]
    for value in range(1, 5):
        _append(managed_ns, table_id, value)
    location = managed_ns.describe_table({"id": table_id}).location
    # planted, or left by a writer by location that died
    store.write(f"{location}/_versions/{manifest_name(5)}", b"not a manifest")
    assert _listed(managed_ns, table_id) == [1, 2, 3, 4]  # keyed by the manifests' names, none read
    assert managed_ns.describe_table_version({"id": table_id, "version": 2}).version.version == 2
    assert lance.dataset(namespace_client=managed_ns, table_id=table_id, version=2).count_rows() == 2


def test_a_commit_whose_outcome_is_unknown_keeps_its_manifest_list(
    managed_ns: IcebergLanceNamespace, db: list[str], endpoint: str, monkeypatch: pytest.MonkeyPatch, store: Store
) -> None:
    table_id = [*db, "t"]
    _append(managed_ns, table_id, 1)
    catalog = managed_ns.catalog(db[0])
    commit = catalog.commit_changes

    def landed_but_lost(changes: list) -> None:  # type: ignore[type-arg]
        commit(changes)
        raise iceberg.CommitStateUnknownException("gateway timeout")

    location = managed_ns.describe_table({"id": table_id}).location
    monkeypatch.setattr(catalog, "commit_changes", landed_but_lost)
    with pytest.raises(LanceNamespaceError, match="gateway timeout"):
        managed_ns.create_table_version(
            {"id": table_id, "version": 2, "manifest_path": stage_manifest(store, location, 2)}
        )
    monkeypatch.undo()
    companion = iceberg_client(endpoint, db[0], store).load_table((db[1], "t"))
    assert store.exists(companion.current_snapshot().manifest_list)
    assert companion.scan().to_arrow().num_rows == 0  # Iceberg readers still read the companion


def test_a_table_that_recorded_every_version_lets_the_old_ones_go_at_its_next_commit(
    managed_ns: IcebergLanceNamespace, db: list[str], endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table_id = [*db, "t"]
    with monkeypatch.context() as recorded_all:  # as tables were recorded before: a snapshot per version
        recorded_all.setattr(snapshots, "superseded", lambda table, options, finalized: [])
        for value in range(1, 9):
            _append(managed_ns, table_id, value)
    assert _recorded(endpoint, table_id) == [str(v) for v in range(1, 9)]
    _append(managed_ns, table_id, 9)
    assert _recorded(endpoint, table_id) == ["8", "9"]
    assert _listed(managed_ns, table_id) == list(range(1, 10))
    assert lance.dataset(namespace_client=managed_ns, table_id=table_id, version=3).count_rows() == 3
