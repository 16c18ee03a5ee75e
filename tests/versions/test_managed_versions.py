"""Lance versions managed by the catalog: pylance through a managed table, the history in
Iceberg, concurrent writers (threads and processes), atomic multi-table commits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import Any

import lance
import pyarrow as pa
import pytest
from lance_namespace.errors import (
    ConcurrentModificationError,
    InvalidInputError,
    InvalidTableStateError,
    ServiceUnavailableError,
    TableAlreadyExistsError,
    TableNotFoundError,
    TableVersionNotFoundError,
    UnsupportedOperationError,
)

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.jobs.adoption import adopt_versions_written_by_location
from lance_iceberg_ns.jobs.atomic import write_together
from lance_iceberg_ns.jobs.orphans import find_orphan_files, remove_orphan_files
from lance_iceberg_ns.versions import operations as versioning
from lance_iceberg_ns.versions import snapshots
from lance_iceberg_ns.versions.manifests import manifest_name
from lance_iceberg_ns.versions.snapshots import MANIFEST_KEY, VERSION_KEY

from ..helpers import all_succeed, ipc
from ..stores import Store
from .stored import final_versions, iceberg_client, stage_manifest, staged_manifests

pytestmark = pytest.mark.usefixtures("store")  # every test on a local disk and on S3


def _snapshots(ns: IcebergLanceNamespace, table_id: list[str]) -> list[dict[str, str]]:
    """The companion table's snapshots as a plain Iceberg client sees them, oldest first."""
    table = ns.catalog(table_id[0]).load_table(tuple(table_id[1:]))
    return [
        {**snapshot.summary.additional_properties, "timestamp-ms": str(snapshot.timestamp_ms)}
        for snapshot in sorted(table.metadata.snapshots, key=lambda s: s.sequence_number or 0)
        if snapshot.summary is not None
    ]


def _listed(ns: IcebergLanceNamespace, table_id: list[str]) -> list[int]:
    return [v.version for v in ns.list_table_versions({"id": table_id}).versions]


def test_pylance_create_append_overwrite_and_time_travel(
    managed_ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    table_id = [*db, "events"]
    lance.write_dataset(pa.table({"id": [1, 2]}), namespace_client=managed_ns, table_id=table_id)
    lance.write_dataset(pa.table({"id": [3]}), namespace_client=managed_ns, table_id=table_id, mode="append")
    lance.write_dataset(pa.table({"id": [9]}), namespace_client=managed_ns, table_id=table_id, mode="overwrite")

    assert managed_ns.describe_table({"id": table_id}).managed_versioning is True
    assert lance.dataset(namespace_client=managed_ns, table_id=table_id).to_table()["id"].to_pylist() == [9]
    old = lance.dataset(namespace_client=managed_ns, table_id=table_id, version=2)
    assert sorted(old.to_table()["id"].to_pylist()) == [1, 2, 3]

    recorded = _snapshots(managed_ns, table_id)  # seen from Iceberg: the latest version and the one before
    assert [h[VERSION_KEY] for h in recorded] == ["2", "3"]
    assert all(int(h["timestamp-ms"]) > 0 and h["lance.manifest-path"] for h in recorded)
    iceberg_table = managed_ns.catalog(db[0]).load_table((*db[1:], "events"))
    assert iceberg_table.scan().to_arrow().num_rows == 0  # plain Iceberg readers read no Lance files

    listed = managed_ns.list_table_versions({"id": table_id, "descending": True, "limit": 2})
    assert [v.version for v in listed.versions] == [3, 2] and listed.page_token == "2"
    assert all(v.manifest_path.endswith(".manifest") for v in listed.versions)  # finalized
    assert managed_ns.describe_table_version({"id": table_id}).version.version == 3
    with pytest.raises(TableVersionNotFoundError):
        managed_ns.describe_table_version({"id": table_id, "version": 7})
    location = managed_ns.describe_table({"id": table_id}).location
    assert final_versions(store, location) == [1, 2, 3]

    # each commit finalized its manifest and removed the staged copy, so a reader by location sees
    # the latest version at once and nothing is left over
    assert store.dataset(location).version == 3
    assert find_orphan_files(location, store.storage_options, older_than=0, dry_run=True).files == []
    assert remove_orphan_files(managed_ns, table_id, older_than=0).files == []
    final = next(name for name in store.keys(f"{location}/_versions") if name.endswith(".manifest"))
    copying = f"_versions/{final}.{'0' * 32}.copying"  # a finalizing copy its process never finished
    store.write(f"{location}/{copying}", store.read(f"{location}/_versions/{final}") or b"")
    assert remove_orphan_files(managed_ns, table_id, older_than=0).files == [copying]
    for version, rows in ((1, 2), (2, 3), (3, 1)):
        assert lance.dataset(namespace_client=managed_ns, table_id=table_id, version=version).count_rows() == rows
    assert [v.version for v in managed_ns.list_table_versions({"id": table_id}).versions] == [1, 2, 3]


def test_the_catalog_arbitrates_a_version_exactly_once(
    managed_ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    table_id = [*db, "events"]
    location = lance.write_dataset(pa.table({"id": [1]}), namespace_client=managed_ns, table_id=table_id).uri
    entry = {"id": table_id, "version": 2, "manifest_path": stage_manifest(store, location, 2)}
    managed_ns.create_table_version(entry)
    with pytest.raises(ConcurrentModificationError):
        managed_ns.create_table_version({**entry, "manifest_path": stage_manifest(store, location, 2)})
    with pytest.raises(InvalidInputError):  # a gap
        managed_ns.create_table_version({**entry, "version": 5})
    assert [h[VERSION_KEY] for h in _snapshots(managed_ns, table_id)] == ["1", "2"]


def test_eight_threads_append_exactly_once_with_dense_versions(
    managed_ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    table_id = [*db, "events"]
    lance.write_dataset(pa.table({"id": [0]}), namespace_client=managed_ns, table_id=table_id)

    def append(worker: int) -> None:
        for round_ in range(3):
            data = pa.table({"id": [worker * 100 + round_ + 1]})
            lance.write_dataset(data, namespace_client=managed_ns, table_id=table_id, mode="append")

    all_succeed(8, append)
    ids = lance.dataset(namespace_client=managed_ns, table_id=table_id).to_table()["id"].to_pylist()
    expected = [0] + [w * 100 + r + 1 for w in range(8) for r in range(3)]
    assert sorted(ids) == sorted(expected)  # every append once
    assert [h[VERSION_KEY] for h in _snapshots(managed_ns, table_id)] == ["24", "25"]
    assert _listed(managed_ns, table_id) == list(range(1, 26))  # dense
    location = managed_ns.describe_table({"id": table_id}).location
    assert final_versions(store, location) == list(range(1, 26))  # every version finalized


# the store's properties (its keys among them) come in the environment, not on the command line
APPENDER = """
import json, os, sys, lance, pyarrow as pa
from lance_iceberg_ns import IcebergLanceNamespace
endpoint, root, worker = sys.argv[1], sys.argv[2], int(sys.argv[3])
table_id = sys.argv[4].split(".")
properties = json.loads(os.environ["STORE_PROPERTIES"])
ns = IcebergLanceNamespace(endpoint=endpoint, root=root, table_version_management="true", **properties)
for round_ in range(3):
    data = pa.table({"id": [worker * 100 + round_]})
    lance.write_dataset(data, namespace_client=ns, table_id=table_id, mode="append")
"""


def test_four_processes_append_exactly_once(
    managed_ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store
) -> None:
    table_id = [*db, "events"]
    lance.write_dataset(pa.table({"id": [-1]}), namespace_client=managed_ns, table_id=table_id)
    environment = {**os.environ, "STORE_PROPERTIES": json.dumps(store.properties)}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", APPENDER, endpoint, store.root, str(worker), ".".join(table_id)],
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
        )
        for worker in range(4)
    ]
    for process in processes:
        _out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-2000:]
    ids = lance.dataset(namespace_client=managed_ns, table_id=table_id).to_table()["id"].to_pylist()
    assert sorted(ids) == sorted([-1] + [w * 100 + r for w in range(4) for r in range(3)])
    assert [h[VERSION_KEY] for h in _snapshots(managed_ns, table_id)] == ["12", "13"]
    assert _listed(managed_ns, table_id) == list(range(1, 14))
    assert final_versions(store, managed_ns.describe_table({"id": table_id}).location) == list(range(1, 14))


def test_atomic_commit_moves_both_tables(managed_ns: IcebergLanceNamespace, db: list[str], store: Store) -> None:
    orders, lines = [*db, "orders"], [*db, "lines"]
    published = write_together(
        managed_ns, [(orders, pa.table({"id": [1]}), "create"), (lines, pa.table({"order": [1, 1]}), "create")]
    )
    assert [(p.table_id, p.version) for p in published] == [(orders, 1), (lines, 1)]
    write_together(managed_ns, [(orders, pa.table({"id": [2]}), "append"), (lines, pa.table({"order": [2]}), "append")])
    assert lance.dataset(namespace_client=managed_ns, table_id=orders).count_rows() == 2
    assert lance.dataset(namespace_client=managed_ns, table_id=lines).count_rows() == 3
    for table_id in (orders, lines):
        assert [h[VERSION_KEY] for h in _snapshots(managed_ns, table_id)] == ["1", "2"]
        assert _listed(managed_ns, table_id) == [1, 2]
        assert final_versions(store, managed_ns.describe_table({"id": table_id}).location) == [1, 2]


def test_an_atomic_commit_across_warehouses_is_refused_before_any_table_is_declared(
    managed_ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    elsewhere = [f"{db[0]}_b", "db"]
    managed_ns.create_namespace({"id": elsewhere})
    lance.write_dataset(pa.table({"id": [1]}), namespace_client=managed_ns, table_id=[*db, "orders"])
    before = store.keys()
    with pytest.raises(InvalidInputError, match="one warehouse"):
        write_together(
            managed_ns,
            [
                ([*db, "orders"], pa.table({"id": [2]}), "append"),
                ([*elsewhere, "lines"], pa.table({"id": [1]}), "create"),
            ],
        )
    assert managed_ns.list_tables({"id": elsewhere}).tables == []
    assert store.keys() == before


def test_orphan_removal_after_an_engine_rolled_main_back_keeps_the_versions_past_it(
    managed_ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store
) -> None:
    """Moving main forward again brings them back (the documented way out of a rollback): their
    files are still needed."""
    table_id = [*db, "events"]
    lance.write_dataset(pa.table({"id": [1]}), namespace_client=managed_ns, table_id=table_id)
    lance.write_dataset(pa.table({"id": [2]}), namespace_client=managed_ns, table_id=table_id, mode="append")
    location = managed_ns.describe_table({"id": table_id}).location
    companion = iceberg_client(endpoint, db[0], store).load_table((db[1], "events"))
    second = companion.current_snapshot().snapshot_id
    companion.manage_snapshots().rollback_to_snapshot(companion.current_snapshot().parent_snapshot_id).commit()
    assert remove_orphan_files(managed_ns, table_id, older_than=0).files == []
    companion = iceberg_client(endpoint, db[0], store).load_table((db[1], "events"))
    companion.manage_snapshots().set_current_snapshot(second).commit()
    assert managed_ns.count_table_rows({"id": table_id}).count == 2
    assert sorted(store.dataset(location).to_table()["id"].to_pylist()) == [1, 2]


def test_atomic_commit_stages_its_tables_side_by_side(
    managed_ns: IcebergLanceNamespace, db: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After each declined commit pylance pauses to check whether it landed: the tables of one
    atomic commit are staged at once, so that a commit of N tables does not wait N times."""
    from lance_iceberg_ns.jobs import atomic

    every_table_staging = threading.Barrier(3, timeout=60)  # broken if the tables were staged one by one
    staged_alone = atomic.stage

    def stage(staging: atomic.StagingNamespace, table_id: Any, write: Any) -> None:
        every_table_staging.wait()
        staged_alone(staging, table_id, write)

    monkeypatch.setattr(atomic, "stage", stage)
    tables = [[*db, name] for name in ("orders", "lines", "items")]
    published = write_together(managed_ns, [(t, pa.table({"id": [i]}), "create") for i, t in enumerate(tables)])
    assert [(p.table_id, p.version) for p in published] == [(t, 1) for t in tables]
    for i, table_id in enumerate(tables):
        assert lance.dataset(namespace_client=managed_ns, table_id=table_id).to_table()["id"].to_pylist() == [i]


def test_atomic_commit_naming_a_table_twice_writes_nothing(
    managed_ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    import unicodedata

    orders = [*db, "café"]
    write_together(managed_ns, [(orders, pa.table({"id": [1]}), "create")])
    location = managed_ns.describe_table({"id": orders}).location
    files_before = store.keys(location)
    decomposed = [*db, unicodedata.normalize("NFD", "café")]  # the same name, as the bridge reads names
    with pytest.raises(InvalidInputError, match="written twice"):
        write_together(
            managed_ns, [(orders, pa.table({"id": [2]}), "append"), (decomposed, pa.table({"id": [3]}), "append")]
        )
    assert store.keys(location) == files_before
    assert lance.dataset(namespace_client=managed_ns, table_id=orders).to_table()["id"].to_pylist() == [1]


def test_atomic_commit_with_a_moved_table_changes_neither(managed_ns: IcebergLanceNamespace, db: list[str]) -> None:
    from lance_iceberg_ns.jobs.atomic import StagingNamespace, publish, stage

    orders, lines = [*db, "orders"], [*db, "lines"]
    write_together(managed_ns, [(orders, pa.table({"id": [1]}), "create"), (lines, pa.table({"x": [1]}), "create")])
    staging = StagingNamespace(**managed_ns.properties)
    for table_id, data in ((orders, pa.table({"id": [2]})), (lines, pa.table({"x": [2]}))):
        stage(
            staging,
            table_id,
            lambda t=table_id, d=data: lance.write_dataset(d, namespace_client=staging, table_id=t, mode="append"),
        )
    # a concurrent writer moves `lines` between the staging and the publishing
    lance.write_dataset(pa.table({"x": [99]}), namespace_client=managed_ns, table_id=lines, mode="append")
    with pytest.raises(ConcurrentModificationError):
        publish(managed_ns, staging, [orders, lines])
    assert [h[VERSION_KEY] for h in _snapshots(managed_ns, orders)] == ["1"]  # unchanged
    assert lance.dataset(namespace_client=managed_ns, table_id=orders).to_table()["id"].to_pylist() == [1]
    assert sorted(lance.dataset(namespace_client=managed_ns, table_id=lines).to_table()["x"].to_pylist()) == [1, 99]
    staging.close()


def test_an_atomic_commit_is_staged_without_lance_warnings(endpoint: str, store: Store, db: list[str]) -> None:
    """Declined, a staged commit made pylance check with pauses whether it landed anyway and log
    two warnings per table; it is answered as its staged manifest instead."""
    script = f"""
import json, os
import pyarrow as pa
from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.jobs.atomic import write_together
tables = [{[*db, "one"]!r}, {[*db, "two"]!r}]
properties = json.loads(os.environ["STORE_PROPERTIES"])
with IcebergLanceNamespace(
    endpoint={endpoint!r}, root={store.root!r}, table_version_management="true", **properties
) as ns:
    write_together(ns, [(t, pa.table({{"id": [1]}}), "create") for t in tables])
    print([p.version for p in write_together(ns, [(t, pa.table({{"id": [2]}}), "append") for t in tables])])
"""
    environment = {name: value for name, value in os.environ.items() if name != "LANCE_LOG"}
    environment["STORE_PROPERTIES"] = json.dumps(store.properties)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=environment, timeout=300, check=True
    )
    assert done.stdout.strip() == "[2, 2]"
    assert " WARN " not in done.stderr, done.stderr


def test_an_atomic_commit_whose_write_fails_leaves_no_file_behind(
    managed_ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    orders, lines = [*db, "orders"], [*db, "lines"]
    write_together(managed_ns, [(orders, pa.table({"id": [1]}), "create"), (lines, pa.table({"x": [1]}), "create")])
    before = set(store.keys())
    with pytest.raises(InvalidInputError, match="Rows do not fit table .*lines"):  # after orders' data is written
        write_together(
            managed_ns, [(orders, pa.table({"id": [2] * 1000}), "append"), (lines, pa.table({"x": ["two"]}), "append")]
        )
    assert set(store.keys()) == before
    with pytest.raises(InvalidInputError, match="no column 'extra'"):  # never dropped unseen
        write_together(managed_ns, [(orders, pa.table({"id": [3], "extra": [3]}), "append")])
    with pytest.raises(InvalidInputError, match="Arrow data"):
        write_together(managed_ns, [(orders, pa.table({"id": [3]}), "append"), (lines, "x = 3", "append")])
    assert set(store.keys()) == before
    assert lance.dataset(namespace_client=managed_ns, table_id=orders).to_table()["id"].to_pylist() == [1]


def test_an_atomic_commit_takes_arrow_data_of_every_kind_and_changes_schemas_by_overwrite(
    managed_ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    import pyarrow.dataset

    t = [*db, "t"]
    write_together(managed_ns, [(t, {"id": [1]}, "create")])
    write_together(managed_ns, [(t, [{"id": 2}], "append")])
    write_together(managed_ns, [(t, pyarrow.dataset.dataset(pa.table({"id": [3]})), "append")])
    write_together(managed_ns, [(t, lance.dataset(namespace_client=managed_ns, table_id=t), "append")])  # itself
    assert sorted(lance.dataset(namespace_client=managed_ns, table_id=t).to_table()["id"].to_pylist()) == [
        1,
        1,
        2,
        2,
        3,
        3,
    ]
    write_together(managed_ns, [(t, pa.table({"name": ["a"], "score": [0.5]}), "overwrite")])  # another schema
    write_together(managed_ns, [(t, pa.table({"score": [1.5]}), "append")])  # a nullable column left out: nulls
    rows = lance.dataset(namespace_client=managed_ns, table_id=t).to_table().to_pylist()
    assert rows == [{"name": "a", "score": 0.5}, {"name": None, "score": 1.5}]
    before = set(store.keys())
    for rows_that_do_not_fit in (pa.table({"name": ["b"], "score": ["high"]}), {"name": ["c"], "score": [1], "x": [1]}):
        with pytest.raises(InvalidInputError, match="Rows do not fit"):
            write_together(managed_ns, [(t, rows_that_do_not_fit, "append")])
    not_null = [*db, "not_null"]
    write_together(
        managed_ns,
        [
            (
                not_null,
                pa.table({"id": pa.array([1], pa.int64())}, pa.schema([pa.field("id", pa.int64(), nullable=False)])),
                "create",
            )
        ],
    )
    before = set(store.keys())
    with pytest.raises(InvalidInputError, match="non-nullable"):
        write_together(managed_ns, [(not_null, pa.table({"id": pa.array([None], pa.int64())}), "append")])
    assert set(store.keys()) == before


def test_an_atomic_commit_writes_the_first_version_of_a_declared_table(
    managed_ns: IcebergLanceNamespace, db: list[str]
) -> None:
    declared, orders = [*db, "declared"], [*db, "orders"]
    managed_ns.declare_table({"id": declared})
    assert [p.version for p in write_together(managed_ns, [(declared, pa.table({"id": [1]}), "append")])] == [1]
    # a create that fails after its table was declared leaves it declared; its next write makes version 1
    write_together(managed_ns, [(orders, pa.table({"id": [1]}), "create")])
    with pytest.raises(InvalidInputError, match="Rows do not fit"):
        write_together(
            managed_ns, [(orders, pa.table({"id": ["one"]}), "append"), ([*db, "new"], pa.table({"x": [1]}), "create")]
        )
    with pytest.raises(TableAlreadyExistsError):
        write_together(managed_ns, [([*db, "new"], pa.table({"x": [1]}), "create")])
    assert [p.version for p in write_together(managed_ns, [([*db, "new"], pa.table({"x": [2]}), "overwrite")])] == [1]


def test_an_atomic_commit_of_a_table_in_small_slices_writes_few_pages(
    managed_ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    # Lance counts a slice as its whole buffer, and pages early: 36 pages here, were the slices not joined
    rows = pa.table({"id": pa.array(range(1_000_000), pa.int64())})
    sliced = pa.Table.from_batches(rows.to_batches(max_chunksize=10_000))
    write_together(managed_ns, [([*db, "sliced"], sliced, "create")])
    location = managed_ns.describe_table({"id": [*db, "sliced"]}).location
    (data_file,) = [name for name in store.keys(f"{location}/data") if name.endswith(".lance")]
    reader = lance.file.LanceFileReader(f"{location}/data/{data_file}", storage_options=store.storage_options)
    (pages,) = [len(column.pages) for column in reader.metadata().columns]
    assert pages <= 2
    assert store.dataset(location).to_table().column("id").to_pylist() == list(range(1_000_000))


def test_the_latest_version_of_a_declared_table_is_not_found_by_name(
    managed_ns: IcebergLanceNamespace, db: list[str]
) -> None:
    declared = [*db, "declared"]
    managed_ns.declare_table({"id": declared})
    with pytest.raises(TableVersionNotFoundError, match=r"Table .*declared has no version yet"):
        managed_ns.describe_table_version({"id": declared})
    with pytest.raises(TableVersionNotFoundError, match="Version 1 not found"):
        managed_ns.describe_table_version({"id": declared, "version": 1})


def test_an_atomic_commit_refused_for_its_mode_or_an_unmanaged_table_declares_nothing(
    endpoint: str, store: Store, db: list[str]
) -> None:
    with store.namespace(endpoint) as plain:
        with pytest.raises(InvalidInputError, match="mode must be"):
            write_together(
                plain, [([*db, "a"], pa.table({"id": [1]}), "create"), ([*db, "b"], pa.table({"id": [1]}), "upsert")]
            )
        with pytest.raises(InvalidInputError, match="manages"):
            write_together(plain, [([*db, "a"], pa.table({"id": [1]}), "create")])
        assert plain.list_tables({"id": db}).tables == []
    assert set(store.keys()) == set()


def test_an_atomic_commit_the_catalog_refuses_leaves_no_file_behind(
    managed_ns: IcebergLanceNamespace, db: list[str], store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lance_iceberg_ns.jobs import atomic

    orders, lines = [*db, "orders"], [*db, "lines"]
    write_together(managed_ns, [(orders, pa.table({"id": [1]}), "create"), (lines, pa.table({"x": [1]}), "create")])
    publish, before, other_writers = atomic.publish, set(store.keys()), set()

    def other_writer_first(*args: Any) -> Any:  # moves `lines` between the staging and the publishing
        staged = set(store.keys())
        lance.write_dataset(pa.table({"x": [99]}), namespace_client=managed_ns, table_id=lines, mode="append")
        other_writers.update(set(store.keys()) - staged)
        return publish(*args)

    monkeypatch.setattr(atomic, "publish", other_writer_first)
    with pytest.raises(ConcurrentModificationError):
        write_together(managed_ns, [(orders, pa.table({"id": [2]}), "append"), (lines, pa.table({"x": [2]}), "append")])
    assert other_writers and set(store.keys()) == before | other_writers  # none of the refused commit's
    assert lance.dataset(namespace_client=managed_ns, table_id=orders).to_table()["id"].to_pylist() == [1]
    assert sorted(lance.dataset(namespace_client=managed_ns, table_id=lines).to_table()["x"].to_pylist()) == [1, 99]
    # a table the refused commit created stays declared, never written: its next write makes version 1
    fresh = [*db, "fresh"]
    with pytest.raises(ConcurrentModificationError):
        write_together(managed_ns, [(fresh, pa.table({"id": [1]}), "create"), (lines, pa.table({"x": [3]}), "append")])
    with pytest.raises(TableNotFoundError, match="declared but has no data yet"):
        managed_ns.dataset(fresh)
    monkeypatch.setattr(atomic, "publish", publish)
    assert [p.version for p in write_together(managed_ns, [(fresh, pa.table({"id": [2]}), "append")])] == [1]


def test_an_atomic_commit_of_unknown_outcome_keeps_its_files(
    managed_ns: IcebergLanceNamespace, db: list[str], store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    orders, lines = [*db, "orders"], [*db, "lines"]
    write_together(managed_ns, [(orders, pa.table({"id": [1]}), "create"), (lines, pa.table({"x": [1]}), "create")])
    before = set(store.keys())

    def lost_answer(request: Any) -> Any:
        raise ServiceUnavailableError("the catalog's answer was lost")

    monkeypatch.setattr(managed_ns, "batch_create_table_versions", lost_answer)
    with pytest.raises(ServiceUnavailableError):
        write_together(managed_ns, [(orders, pa.table({"id": [2]}), "append"), (lines, pa.table({"x": [2]}), "append")])
    made = set(store.keys()) - before  # it may have landed: every file stays, for the catalog's readers
    for table in ("orders", "lines"):
        assert [name for name in made if f"/{table}-" in name and "/_versions/" in name and ".manifest-" in name]
        assert [name for name in made if f"/{table}-" in name and "/data/" in name]
        assert [name for name in made if f"/{table}-" in name and "/_transactions/" in name]


def test_deleting_versions_keeps_the_latest(managed_ns: IcebergLanceNamespace, db: list[str], store: Store) -> None:
    table_id = [*db, "events"]
    for i in range(3):
        lance.write_dataset(
            pa.table({"id": [i]}), namespace_client=managed_ns, table_id=table_id, mode="create" if i == 0 else "append"
        )
    with pytest.raises(InvalidInputError):
        managed_ns.batch_delete_table_versions({"id": table_id, "ranges": [{"start_version": 0, "end_version": -1}]})
    deleted = managed_ns.batch_delete_table_versions(
        {"id": table_id, "ranges": [{"start_version": 1, "end_version": 3}]}
    )
    assert deleted.deleted_count == 2
    assert [v.version for v in managed_ns.list_table_versions({"id": table_id}).versions] == [3]
    location = managed_ns.describe_table({"id": table_id}).location
    assert final_versions(store, location) == [3]  # a deleted version's manifest goes: it does not come back
    with pytest.raises(TableVersionNotFoundError):
        managed_ns.describe_table_version({"id": table_id, "version": 1})
    lance.write_dataset(pa.table({"id": [7]}), namespace_client=managed_ns, table_id=table_id, mode="append")
    assert lance.dataset(namespace_client=managed_ns, table_id=table_id).count_rows() == 4
    assert _listed(managed_ns, table_id) == [3, 4]


def test_deleting_a_range_as_wide_as_a_version_can_be_answers_at_once(
    managed_ns: IcebergLanceNamespace, db: list[str]
) -> None:
    table_id = [*db, "events"]
    for i in range(3):
        mode = "create" if i == 0 else "append"
        lance.write_dataset(pa.table({"id": [i]}), namespace_client=managed_ns, table_id=table_id, mode=mode)
    widest = {"start_version": 0, "end_version": 2**63 - 1}  # matched against the versions there are
    with pytest.raises(InvalidInputError, match="latest version"):
        managed_ns.batch_delete_table_versions({"id": table_id, "ranges": [widest]})
    assert _listed(managed_ns, table_id) == [1, 2, 3]  # refused: nothing deleted
    deleted = managed_ns.batch_delete_table_versions({"id": table_id, "ranges": [{**widest, "end_version": 3}]})
    assert deleted.deleted_count == 2 and _listed(managed_ns, table_id) == [3]


def test_unmanaged_tables_keep_lance_versions(ns: IcebergLanceNamespace, db: list[str]) -> None:
    table_id = [*db, "plain"]
    lance.write_dataset(pa.table({"id": [1]}), namespace_client=ns, table_id=table_id)
    lance.write_dataset(pa.table({"id": [2]}), namespace_client=ns, table_id=table_id, mode="append")
    assert ns.describe_table({"id": table_id}).managed_versioning is False
    assert [v.version for v in ns.list_table_versions({"id": table_id}).versions] == [1, 2]
    assert _snapshots(ns, table_id) == []  # nothing recorded in the catalog
    with pytest.raises(UnsupportedOperationError):
        ns.create_table_version({"id": table_id, "version": 3, "manifest_path": "x/_versions/3.manifest-1"})
    with pytest.raises(InvalidInputError):
        ns.register_table({"id": [*db, "again"], "location": "/x", "properties": {"table_version_management": "true"}})


def _count_loads(monkeypatch: pytest.MonkeyPatch, ns: IcebergLanceNamespace, warehouse: str) -> list[int]:
    """A counter of the ``loadTable`` requests the namespace's catalog client sends from now on."""
    catalog = ns.catalog(warehouse)
    loads = [0]
    load = catalog.load_table_summary

    def counted(*args: object, **kwargs: object) -> object:
        loads[0] += 1
        return load(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(catalog, "load_table_summary", counted)
    return loads


def test_a_writer_builds_on_its_own_commit_and_retries_when_another_moved_the_table(
    endpoint: str, store: Store, db: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    table_id = [*db, "events"]
    properties = {"endpoint": endpoint, "root": store.root, "table_version_management": "true", **store.properties}
    # a generous commit_cache_seconds: a slow machine must not turn the first assertion into luck
    managed_ns = IcebergLanceNamespace(**properties, commit_cache_seconds="300")
    lance.write_dataset(pa.table({"id": [1]}), namespace_client=managed_ns, table_id=table_id)
    loads = _count_loads(monkeypatch, managed_ns, db[0])
    lance.write_dataset(pa.table({"id": [2]}), namespace_client=managed_ns, table_id=table_id, mode="append")
    assert loads[0] == 0  # describe and the latest version answered from the version it committed

    # another writer (its own namespace object remembers nothing of this one's commits)
    with IcebergLanceNamespace(**properties) as other:
        lance.write_dataset(pa.table({"id": [3]}), namespace_client=other, table_id=table_id, mode="append")
    # what this writer remembers is now stale: its compare-and-swap fails and pylance retries on top
    lance.write_dataset(pa.table({"id": [4]}), namespace_client=managed_ns, table_id=table_id, mode="append")
    assert loads[0] >= 1
    assert sorted(lance.dataset(namespace_client=managed_ns, table_id=table_id).to_table()["id"].to_pylist()) == [
        1,
        2,
        3,
        4,
    ]
    assert [h[VERSION_KEY] for h in _snapshots(managed_ns, table_id)] == ["3", "4"]
    assert _listed(managed_ns, table_id) == [1, 2, 3, 4]
    assert final_versions(store, managed_ns.describe_table({"id": table_id}).location) == [1, 2, 3, 4]
    managed_ns.close()


def test_commit_cache_seconds_zero_always_asks_the_catalog(
    endpoint: str, store: Store, db: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    table_id = [*db, "events"]
    with store.namespace(endpoint, table_version_management="true", commit_cache_seconds="0") as ns:
        lance.write_dataset(pa.table({"id": [1]}), namespace_client=ns, table_id=table_id)
        loads = _count_loads(monkeypatch, ns, db[0])
        lance.write_dataset(pa.table({"id": [2]}), namespace_client=ns, table_id=table_id, mode="append")
        assert loads[0] >= 1
        assert ns.list_table_versions({"id": table_id}).versions[-1].version == 2


def test_a_dropped_or_renamed_table_is_not_answered_from_its_last_commit(
    managed_ns: IcebergLanceNamespace, db: list[str]
) -> None:
    table_id, renamed = [*db, "events"], [*db, "renamed"]
    lance.write_dataset(pa.table({"id": [1]}), namespace_client=managed_ns, table_id=table_id)
    managed_ns.rename_table({"id": table_id, "new_table_name": "renamed"})
    with pytest.raises(TableNotFoundError):
        managed_ns.describe_table({"id": table_id})
    lance.write_dataset(pa.table({"id": [2]}), namespace_client=managed_ns, table_id=renamed, mode="append")
    managed_ns.drop_table({"id": renamed})
    with pytest.raises(TableNotFoundError):
        managed_ns.describe_table({"id": renamed})


def _current_metadata_size(ns: IcebergLanceNamespace, table_id: list[str]) -> int:
    """The size of the table's metadata as the catalog answers it (its metadata file's content)."""
    return len(ns.catalog(table_id[0]).load_table(tuple(table_id[1:])).metadata.model_dump_json())


def test_managed_tables_keep_a_bounded_catalog_record_however_long_the_history(
    managed_ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    table_id = [*db, "events"]
    lance.write_dataset(pa.table({"id": [0]}), namespace_client=managed_ns, table_id=table_id)
    sizes = []
    for i in range(1, 40):
        lance.write_dataset(pa.table({"id": [i]}), namespace_client=managed_ns, table_id=table_id, mode="append")
        if i in (24, 39):  # once the log of the 20 previous metadata files is full
            sizes.append(_current_metadata_size(managed_ns, table_id))
    location = managed_ns.describe_table({"id": table_id}).location
    assert len(managed_ns.catalog(db[0]).load_table((*db[1:], "events")).metadata.metadata_log) <= 20
    # the current metadata file and 20 previous (the local catalog keeps an object store's in a directory of its own)
    metadata = store.keys(f"{location}/metadata")
    assert len([n for n in metadata if n.endswith(".metadata.json")]) <= 21
    # what the catalog rewrites on every commit stays the same size: two snapshots, two manifest lists
    assert [h[VERSION_KEY] for h in _snapshots(managed_ns, table_id)] == ["39", "40"]
    assert len([n for n in metadata if n.endswith(".avro")]) == 2
    assert sizes[1] <= sizes[0] + 20, sizes  # a few digits more at most
    # the versions before the latest are the dataset's own, read, described and opened from there
    assert _listed(managed_ns, table_id) == list(range(1, 41))
    assert managed_ns.describe_table_version({"id": table_id, "version": 7}).version.manifest_path.endswith(
        manifest_name(7)
    )
    assert lance.dataset(namespace_client=managed_ns, table_id=table_id, version=7).count_rows() == 7
    with pytest.raises(TableVersionNotFoundError):
        managed_ns.describe_table_version({"id": table_id, "version": 41})


def _engine_commit(
    endpoint: str, store: Store, table_id: list[str], summary: dict[str, str] | None = None, branch: str = "main"
) -> int:
    """What an Iceberg engine's commit does to ``branch`` (Spark's DELETE FROM, DuckDB's INSERT or
    DELETE on ``main``): a snapshot on top, without a Lance version, or with the ``summary`` of
    the engine's own making. Its snapshot id."""
    table = iceberg_client(endpoint, table_id[0], store).load_table(tuple(table_id[1:]))
    with (
        table.transaction() as transaction,
        transaction.update_snapshot(snapshot_properties=summary or {}, branch=branch).fast_append(),
    ):
        pass  # no data files: a snapshot all the same
    snapshot = iceberg_client(endpoint, table_id[0], store).load_table(tuple(table_id[1:])).snapshot_by_name(branch)
    assert snapshot is not None and snapshot.summary is not None
    assert summary is not None or VERSION_KEY not in snapshot.summary.additional_properties
    return snapshot.snapshot_id


@pytest.mark.parametrize("engine", ["drops", "renames"])
def test_a_version_whose_table_an_engine_drops_or_renames_as_it_commits_is_table_not_found(
    managed_ns: IcebergLanceNamespace,
    db: list[str],
    endpoint: str,
    store: Store,
    engine: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The catalog answers the commit 404: it was NamespaceNotFound ("Table does not exist")."""
    table_id = [*db, "events"]
    lance.write_dataset(pa.table({"id": [1]}), namespace_client=managed_ns, table_id=table_id)
    plan = snapshots.plan_version

    def engine_moves_it_first(*args: Any, **kwargs: Any) -> Any:
        planned = plan(*args, **kwargs)
        engine_catalog = iceberg_client(endpoint, db[0], store)
        if engine == "drops":
            engine_catalog.drop_table(tuple(table_id[1:]))
        else:
            engine_catalog.rename_table(tuple(table_id[1:]), (*table_id[1:-1], "moved"))
        return planned

    monkeypatch.setattr(snapshots, "plan_version", engine_moves_it_first)
    with pytest.raises(TableNotFoundError):
        managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"id": [2]})))


@pytest.mark.parametrize("writer", ["the last writer", "a new writer"])
def test_a_lance_write_after_an_iceberg_engine_commit_goes_on_top_of_it(
    managed_ns: IcebergLanceNamespace, db: list[str], endpoint: str, writer: str, store: Store
) -> None:
    table_id = [*db, "events"]
    lance.write_dataset(pa.table({"id": [1]}), namespace_client=managed_ns, table_id=table_id)
    lance.write_dataset(pa.table({"id": [2]}), namespace_client=managed_ns, table_id=table_id, mode="append")
    engine_snapshot = _engine_commit(endpoint, store, table_id)
    ns = managed_ns if writer == "the last writer" else IcebergLanceNamespace(**managed_ns.properties)

    assert [v.version for v in ns.list_table_versions({"id": table_id}).versions] == [1, 2]
    ns.describe_table({"id": table_id})  # as pylance asks: describe, then the latest version
    latest = ns.list_table_versions({"id": table_id, "descending": True, "limit": 1})
    assert [v.version for v in latest.versions] == [2]
    assert ns.describe_table_version({"id": table_id}).version.version == 2
    assert sorted(lance.dataset(namespace_client=ns, table_id=table_id).to_table()["id"].to_pylist()) == [1, 2]

    lance.write_dataset(pa.table({"id": [3]}), namespace_client=ns, table_id=table_id, mode="append")
    assert [v.version for v in ns.list_table_versions({"id": table_id}).versions] == [1, 2, 3]
    assert sorted(lance.dataset(namespace_client=ns, table_id=table_id).to_table()["id"].to_pylist()) == [1, 2, 3]
    old = lance.dataset(namespace_client=ns, table_id=table_id, version=2)
    assert sorted(old.to_table()["id"].to_pylist()) == [1, 2]
    companion = iceberg_client(endpoint, db[0], store).load_table((db[1], "events"))
    assert companion.current_snapshot().parent_snapshot_id == engine_snapshot  # on top of main, as usual
    assert [h.get(VERSION_KEY) for h in _snapshots(ns, table_id)] == ["2", None, "3"]  # the engine's stays
    assert final_versions(store, ns.describe_table({"id": table_id}).location) == [1, 2, 3]

    _engine_commit(endpoint, store, table_id)  # and again, before an atomic commit and a removal
    assert [p.version for p in write_together(ns, [(table_id, pa.table({"id": [4]}), "append")])] == [4]
    assert ns.batch_delete_table_versions({"id": table_id, "ranges": [{"start_version": 1, "end_version": 3}]})
    _engine_commit(endpoint, store, table_id)
    assert [v.version for v in ns.list_table_versions({"id": table_id}).versions] == [3, 4]
    assert lance.dataset(namespace_client=ns, table_id=table_id).count_rows() == 4
    if ns is not managed_ns:
        ns.close()


@pytest.mark.parametrize("recorded", ["abc", "-3", "1.5", "", "99999999999999999999999"])
def test_a_snapshot_recording_no_lance_version_is_the_tables_state_not_a_server_error(
    managed_ns: IcebergLanceNamespace, db: list[str], endpoint: str, recorded: str, store: Store
) -> None:
    table_id = [*db, "events"]
    lance.write_dataset(pa.table({"id": [1]}), namespace_client=managed_ns, table_id=table_id)
    _engine_commit(endpoint, store, table_id, {VERSION_KEY: recorded})  # a summary of the engine's own making
    location = managed_ns.describe_table({"id": table_id}).location
    files = store.keys(location)

    for namespace in (managed_ns, IcebergLanceNamespace(**managed_ns.properties)):
        with pytest.raises(InvalidTableStateError, match=f"records {VERSION_KEY}=.*not a Lance version"):
            namespace.list_table_versions({"id": table_id})
        with pytest.raises(InvalidTableStateError):
            namespace.insert_into_table({"id": table_id}, ipc(pa.table({"id": [2]})))
        with pytest.raises(InvalidTableStateError, match=f"records {VERSION_KEY}=.*not a Lance version"):
            namespace.describe_table({"id": table_id, "load_detailed_metadata": True})
    assert store.keys(location) == files  # refused before anything was written

    # the way out the message names: main rolled back past it, where it blocks nothing
    companion = iceberg_client(endpoint, db[0], store).load_table((db[1], "events"))
    forged = companion.current_snapshot().snapshot_id
    companion.manage_snapshots().rollback_to_snapshot(companion.current_snapshot().parent_snapshot_id).commit()
    managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"id": [2]})))
    lance.write_dataset(pa.table({"id": [3]}), namespace_client=managed_ns, table_id=table_id, mode="append")
    assert _listed(managed_ns, table_id) == [1, 2, 3] and managed_ns.count_table_rows({"id": table_id}).count == 3
    kept = iceberg_client(endpoint, db[0], store).load_table((db[1], "events")).snapshots()
    assert forged in {snapshot.snapshot_id for snapshot in kept}


def test_an_engines_commit_on_another_branch_between_two_lance_commits_is_no_conflict(
    managed_ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store
) -> None:
    """main does not move, but the catalog has given out the next sequence number: a commit built on
    the state kept from the last one is refused (400), and is made again on the catalog's."""
    table_id = [*db, "events"]
    lance.write_dataset(pa.table({"id": [1]}), namespace_client=managed_ns, table_id=table_id)
    lance.write_dataset(pa.table({"id": [2]}), namespace_client=managed_ns, table_id=table_id, mode="append")
    companion = iceberg_client(endpoint, db[0], store).load_table((db[1], "events"))
    companion.manage_snapshots().create_branch(companion.current_snapshot().snapshot_id, "audit").commit()
    _engine_commit(endpoint, store, table_id, {VERSION_KEY: "forged"}, branch="audit")  # its own branch and summary
    lance.write_dataset(pa.table({"id": [3]}), namespace_client=managed_ns, table_id=table_id, mode="append")
    managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"id": [4]})))
    assert _listed(managed_ns, table_id) == [1, 2, 3, 4]
    assert managed_ns.count_table_rows({"id": table_id}).count == 4

    _engine_commit(endpoint, store, table_id, branch="audit")  # and again, before an atomic commit
    assert [p.version for p in write_together(managed_ns, [(table_id, pa.table({"id": [5]}), "append")])] == [5]
    assert managed_ns.count_table_rows({"id": table_id}).count == 5


@pytest.mark.parametrize("dropped", ["soft delete", "purge"])
def test_a_table_dropped_and_made_again_elsewhere_right_after_a_commit_here_is_the_new_one(
    managed_ns: IcebergLanceNamespace, db: list[str], dropped: str, store: Store
) -> None:
    """Within ``commit_cache_seconds`` of its own commit a bridge answers from what it committed,
    but not once another process dropped the table: the name's new table is read and written,
    and the old location is not touched (or made again)."""
    table_id = [*db, "events"]
    lance.write_dataset(pa.table({"id": [1, 2]}), namespace_client=managed_ns, table_id=table_id)
    with IcebergLanceNamespace(**managed_ns.properties) as other:
        old = other.describe_table({"id": table_id}).location
        other.drop_table({"id": table_id})
        if dropped == "purge":
            other.purge_table(table_id)
        lance.write_dataset(pa.table({"id": [100]}), namespace_client=other, table_id=table_id)
    old_files = store.contents(old)

    new = managed_ns.describe_table({"id": table_id}).location
    assert new != old
    assert lance.dataset(namespace_client=managed_ns, table_id=table_id).to_table()["id"].to_pylist() == [100]
    lance.write_dataset(pa.table({"id": [101]}), namespace_client=managed_ns, table_id=table_id, mode="append")
    assert sorted(store.dataset(new).to_table()["id"].to_pylist()) == [100, 101]
    assert store.contents(old) == old_files


def test_an_engines_commit_on_another_branch_while_a_version_is_committed_is_no_conflict(
    managed_ns: IcebergLanceNamespace, db: list[str], endpoint: str, monkeypatch: pytest.MonkeyPatch, store: Store
) -> None:
    """The engine commits between the bridge's load of the table and its commit (each time a
    commit is planned, here): main did not move, so the commit is made again on the catalog's
    state, for a pylance commit and for an atomic one alike."""
    orders, lines = [*db, "orders"], [*db, "lines"]
    for table_id in (orders, lines):
        lance.write_dataset(pa.table({"id": [1]}), namespace_client=managed_ns, table_id=table_id)
    catalog = iceberg_client(endpoint, db[0], store)
    companion = catalog.load_table((db[1], "orders"))
    companion.manage_snapshots().create_branch(companion.current_snapshot().snapshot_id, "audit").commit()
    plan = snapshots.plan_version
    engine_commits: list[int] = []

    def engine_commits_on_its_branch_once(table: Any, *args: Any, **kwargs: Any) -> Any:
        planned = plan(table, *args, **kwargs)
        if not engine_commits and table.name()[-1] == "orders":
            engine_commits.append(1)
            _engine_commit(endpoint, store, orders, branch="audit")
        return planned

    monkeypatch.setattr(snapshots, "plan_version", engine_commits_on_its_branch_once)
    published = write_together(
        managed_ns, [(orders, pa.table({"id": [2]}), "append"), (lines, pa.table({"id": [2]}), "append")]
    )
    assert [p.version for p in published] == [2, 2] and engine_commits == [1]
    engine_commits.clear()
    with IcebergLanceNamespace(**managed_ns.properties) as fresh:  # no state kept: loaded for this commit
        lance.write_dataset(pa.table({"id": [3]}), namespace_client=fresh, table_id=orders, mode="append")
    assert engine_commits == [1]
    assert _listed(managed_ns, orders) == [1, 2, 3] and _listed(managed_ns, lines) == [1, 2]
    assert managed_ns.count_table_rows({"id": orders}).count == 3


def test_a_snapshot_recording_a_manifest_path_that_is_none_is_the_tables_state(
    managed_ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store
) -> None:
    table_id = [*db, "events"]
    lance.write_dataset(pa.table({"id": [1]}), namespace_client=managed_ns, table_id=table_id)
    _engine_commit(endpoint, store, table_id, {VERSION_KEY: "2", MANIFEST_KEY: "_versions/"})  # a folder for a manifest
    refused = f"records {MANIFEST_KEY}=.*not the path of a Lance manifest"
    with pytest.raises(InvalidTableStateError, match=refused):
        managed_ns.list_table_versions({"id": table_id})
    with pytest.raises(InvalidTableStateError, match=refused):
        managed_ns.describe_table_version({"id": table_id})
    with pytest.raises(InvalidTableStateError, match=refused):
        managed_ns.count_table_rows({"id": table_id})
    with pytest.raises(InvalidTableStateError, match=refused):
        managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"id": [2]})))


@pytest.mark.parametrize("points_at", ["its own version 1", "another table's manifest", "outside, by ../"])
def test_a_snapshot_recording_the_manifest_of_another_version_is_refused_by_name_not_served(
    managed_ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store, points_at: str
) -> None:
    """An engine's snapshot names version 2 with the manifest of version 1 (this table's, or
    another's, the path rebuilt from its file name): it was served as version 2, and every write
    then lost to the catalog twenty times over (409 retry, forever)."""
    table_id, victim = [*db, "events"], [*db, "victim"]
    lance.write_dataset(pa.table({"id": [1]}), namespace_client=managed_ns, table_id=table_id)
    victim_location = lance.write_dataset(pa.table({"id": [9]}), namespace_client=managed_ns, table_id=victim).uri
    first = manifest_name(1)
    path = {
        "its own version 1": f"_versions/{first}",
        "another table's manifest": f"{victim_location}/_versions/{first}",
        "outside, by ../": f"../{victim_location.rsplit('/', 1)[-1]}/_versions/{first}",
    }[points_at]
    _engine_commit(endpoint, store, table_id, {VERSION_KEY: "2", MANIFEST_KEY: path})
    refused = f"records {MANIFEST_KEY}=.*not the manifest of the version it records \\(2\\)"
    for attempt in (
        lambda: managed_ns.list_table_versions({"id": table_id}),
        lambda: managed_ns.describe_table_version({"id": table_id}),
        lambda: managed_ns.count_table_rows({"id": table_id}),
        lambda: managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"id": [2]}))),
    ):
        with pytest.raises(InvalidTableStateError, match=refused):
            attempt()
    assert managed_ns.count_table_rows({"id": victim}).count == 1


@pytest.mark.parametrize(
    "forgery", ["another table's manifest of that version", "an earlier version on top", "the latest again on top"]
)
def test_a_snapshot_recording_a_manifest_the_bridge_never_records_is_refused_by_name_not_served(
    managed_ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store, forgery: str
) -> None:
    """An engine's snapshot names version 3 with another table's version 3 (its own name, another
    directory: it was answered as 'gone, a writer by location removed it'), or version 1 again on
    top of version 2 (every insert was told to adopt version 2, which the catalog already had), or
    version 2 again on top of itself (an insert went on top of it, and the history stayed forged)."""
    table_id, victim = [*db, "events"], [*db, "victim"]
    for value in (1, 2):
        location = lance.write_dataset(
            pa.table({"id": [value]}), namespace_client=managed_ns, table_id=table_id, mode=_create_then_append(value)
        ).uri
    for value in (1, 2, 3):
        victim_location = lance.write_dataset(
            pa.table({"id": [value]}), namespace_client=managed_ns, table_id=victim, mode=_create_then_append(value)
        ).uri
    version, path, refused = {
        "another table's manifest of that version": (
            3,
            f"{victim_location}/_versions/{manifest_name(3)}",
            "not in the table's own _versions/",
        ),
        "an earlier version on top": (
            1,
            f"{location}/_versions/{manifest_name(1)}",
            "not after the version before it on main \\(2\\)",
        ),
        "the latest again on top": (
            2,
            f"{location}/_versions/{manifest_name(2)}",
            "not after the version before it on main \\(2\\)",
        ),
    }[forgery]
    _engine_commit(endpoint, store, table_id, {VERSION_KEY: str(version), MANIFEST_KEY: path})
    refused = f"records lance\\..*{refused}.*an engine other than lance-iceberg-ns"
    attempts = [
        lambda: managed_ns.list_table_versions({"id": table_id}),
        lambda: managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"id": [3]}))),
    ]
    if version == 3:  # the snapshot itself shows it: every read of it is refused
        attempts += [
            lambda: managed_ns.describe_table_version({"id": table_id}),
            lambda: managed_ns.count_table_rows({"id": table_id}),
        ]
    else:  # only main's history shows it; a read of the latest alone answers what main names, as after a rollback
        assert managed_ns.describe_table_version({"id": table_id}).version.version == version
        assert managed_ns.count_table_rows({"id": table_id}).count == version
    for attempt in attempts:
        with pytest.raises(InvalidTableStateError, match=refused):
            attempt()
    assert managed_ns.count_table_rows({"id": victim}).count == 3


def _create_then_append(value: int) -> str:
    return "create" if value == 1 else "append"


def test_a_declared_table_written_by_location_first_is_refused_until_its_versions_are_recorded(
    managed_ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    """The catalog names no version, so its readers would otherwise get the version on disk that it
    does not have (as lance-ray's write does on a namespace that manages versions)."""
    table_id = [*db, "events"]
    location = managed_ns.declare_table({"id": table_id}).location
    lance.write_dataset(pa.table({"id": [1, 2, 3]}), location, storage_options=store.storage_options)
    refused = "Version 1 of .* was written by a writer that went by its location.*drop the table"
    with pytest.raises(InvalidTableStateError, match=refused):
        managed_ns.list_table_versions({"id": table_id})
    with pytest.raises(InvalidTableStateError, match=refused):
        managed_ns.count_table_rows({"id": table_id})
    with pytest.raises((OSError, ValueError), match="went by its location"):
        lance.dataset(namespace_client=managed_ns, table_id=table_id).count_rows()
    with pytest.raises(InvalidTableStateError, match=refused):
        managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"id": [4]})))
    adopt_versions_written_by_location(managed_ns, table_id)
    assert _listed(managed_ns, table_id) == [1] and managed_ns.count_table_rows({"id": table_id}).count == 3


def test_a_first_version_another_process_commits_while_the_versions_are_listed_is_answered(
    managed_ns: IcebergLanceNamespace, db: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """It lands between this bridge's load of the table (no version yet) and its look at the disk
    (a version there): the catalog is asked again before anything is blamed on a writer by location."""
    table_id = [*db, "events"]
    managed_ns.declare_table({"id": table_id})
    with IcebergLanceNamespace(**managed_ns.properties) as other:
        look = versioning.Versions._files_of
        landed: list[int] = []

        def first_version_lands_meanwhile(self: Any, table: Any, loaded: Any) -> dict[str, str]:
            if not landed:
                landed.append(1)
                lance.write_dataset(pa.table({"id": [1]}), namespace_client=other, table_id=table_id, mode="append")
            return look(self, table, loaded)

        monkeypatch.setattr(versioning.Versions, "_files_of", first_version_lands_meanwhile)
        latest = managed_ns.list_table_versions({"id": table_id, "descending": True, "limit": 1}).versions
    assert [v.version for v in latest] == [1] and landed == [1]


def test_main_rolled_back_past_every_lance_version_is_refused_as_a_rollback(
    managed_ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store
) -> None:
    """Not as a version written by location (whose way out, adoption, a rollback refuses)."""
    table_id = [*db, "events"]
    managed_ns.declare_table({"id": table_id})
    before_lance = _engine_commit(endpoint, store, table_id)  # an engine's snapshot before any Lance version
    for value in (1, 2):
        lance.write_dataset(pa.table({"id": [value]}), namespace_client=managed_ns, table_id=table_id, mode="append")
    companion = iceberg_client(endpoint, db[0], store).load_table((db[1], "events"))
    companion.manage_snapshots().rollback_to_snapshot(before_lance).commit()
    with IcebergLanceNamespace(**managed_ns.properties) as reader:
        for listing in ({}, {"descending": True, "limit": 1}):
            with pytest.raises(InvalidTableStateError, match="moved back") as refused:
                reader.list_table_versions({"id": table_id, **listing})
            assert "went by its location" not in str(refused.value)
        with pytest.raises((OSError, ValueError), match="moved back"):
            lance.dataset(namespace_client=reader, table_id=table_id).count_rows()


def test_a_write_after_an_iceberg_rollback_is_refused_until_main_moves_forward(
    managed_ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store
) -> None:
    table_id = [*db, "events"]
    lance.write_dataset(pa.table({"id": [1]}), namespace_client=managed_ns, table_id=table_id)
    companion = iceberg_client(endpoint, db[0], store).load_table((db[1], "events"))
    first = companion.current_snapshot().snapshot_id
    companion.manage_snapshots().create_tag(first, "kept").commit()  # a tag keeps version 1 in the catalog
    with IcebergLanceNamespace(**managed_ns.properties) as writer:  # one that loads the table's refs, tag and all
        lance.write_dataset(pa.table({"id": [2]}), namespace_client=writer, table_id=table_id, mode="append")
    companion = iceberg_client(endpoint, db[0], store).load_table((db[1], "events"))
    second = companion.current_snapshot().snapshot_id
    companion.manage_snapshots().rollback_to_snapshot(first).commit()
    location = managed_ns.describe_table({"id": table_id}).location

    # main is the truth: reads and the version list follow it (another process: no commit of its own to build on)
    reader = IcebergLanceNamespace(**managed_ns.properties)
    assert [v.version for v in reader.list_table_versions({"id": table_id}).versions] == [1]
    assert reader.describe_table_version({"id": table_id}).version.version == 1
    assert lance.dataset(namespace_client=reader, table_id=table_id).to_table()["id"].to_pylist() == [1]

    # a write cannot reuse version 2: refused, every attempt, and refused attempts leave no staged manifest
    staged = staged_manifests(store, location)
    for writer in (managed_ns, reader, reader):
        with pytest.raises(OSError):
            lance.write_dataset(pa.table({"id": [3]}), namespace_client=writer, table_id=table_id, mode="append")
    with pytest.raises(InvalidTableStateError, match="moved back to version 1.*versions up to 2.*restore_table"):
        managed_ns.create_table_version(
            {"id": table_id, "version": 2, "manifest_path": stage_manifest(store, location, 2)}
        )
    for namespace in (managed_ns, reader):  # the bridge's own writes are refused before anything is staged
        with pytest.raises(InvalidTableStateError, match="moved back to version 1"):
            namespace.insert_into_table({"id": table_id}, ipc(pa.table({"id": [3]})))
    assert staged_manifests(store, location) == staged
    assert [h.get(VERSION_KEY) for h in _snapshots(managed_ns, table_id)] == ["1", "2"]
    # adoption, which finds version 2 on disk past main, answers the rollback's own way out: version 2
    # is the table's own, and removing it (a planted file's way out) would lose its data
    with pytest.raises(InvalidTableStateError, match="moved back to version 1") as refused:
        adopt_versions_written_by_location(managed_ns, table_id)
    assert "remove" not in str(refused.value)

    # the way out the message names: main forward again, then restore the version to keep
    companion = iceberg_client(endpoint, db[0], store).load_table((db[1], "events"))
    companion.manage_snapshots().set_current_snapshot(second).commit()
    managed_ns.restore_table({"id": table_id, "version": 1})
    lance.write_dataset(pa.table({"id": [4]}), namespace_client=managed_ns, table_id=table_id, mode="append")
    assert [v.version for v in managed_ns.list_table_versions({"id": table_id}).versions] == [1, 2, 3, 4]
    assert sorted(lance.dataset(namespace_client=managed_ns, table_id=table_id).to_table()["id"].to_pylist()) == [1, 4]
    assert [h.get(VERSION_KEY) for h in _snapshots(managed_ns, table_id)] == ["1", "3", "4"]  # the tagged one stays
    reader.close()


def test_a_commit_finalizes_its_manifest_so_readers_by_location_see_it_at_once(
    managed_ns: IcebergLanceNamespace, db: list[str], capfd: pytest.CaptureFixture[str], store: Store
) -> None:
    table_id = [*db, "fresh"]
    location = lance.write_dataset(pa.table({"id": [1]}), namespace_client=managed_ns, table_id=table_id).uri
    assert store.dataset(location).count_rows() == 1  # by location, right after the first commit
    for appended in range(2, 5):
        lance.write_dataset(pa.table({"id": [appended]}), namespace_client=managed_ns, table_id=table_id, mode="append")
        assert store.dataset(location).count_rows() == appended
    assert "external manifest index could not be updated" not in capfd.readouterr().err
    assert not staged_manifests(store, location)


def test_a_version_written_by_location_behind_the_catalog_is_refused_at_the_next_commit(
    managed_ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    table_id = [*db, "bypassed"]
    location = lance.write_dataset(pa.table({"id": [1]}), namespace_client=managed_ns, table_id=table_id).uri
    # a writer that goes by path
    lance.write_dataset(pa.table({"id": [99]}), location, mode="append", storage_options=store.storage_options)
    staged = stage_manifest(store, location, 2)  # version 2, as pylance stages it
    with pytest.raises(InvalidTableStateError, match="went by its location"):
        managed_ns.create_table_version({"id": table_id, "version": 2, "manifest_path": staged})
    assert [v.version for v in managed_ns.list_table_versions({"id": table_id}).versions] == [1]


def test_a_name_an_engine_dropped_is_created_anew_right_after_this_process_committed_to_it(
    managed_ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store
) -> None:
    """The state kept of the last commit (``commit_cache_seconds``) is the dropped table's: the
    new table's create must not be answered from it (pylance then wrote at the old location)."""
    table_id = [*db, "t"]
    lance.write_dataset(pa.table({"id": [0]}), namespace_client=managed_ns, table_id=table_id)
    lance.write_dataset(pa.table({"id": [1]}), namespace_client=managed_ns, table_id=table_id, mode="append")
    old = managed_ns.describe_table({"id": table_id}).location
    iceberg_client(endpoint, db[0], store).drop_table((db[1], "t"))  # an Iceberg engine drops the companion
    created = lance.write_dataset(pa.table({"id": [500]}), namespace_client=managed_ns, table_id=table_id)
    assert created.to_table().column("id").to_pylist() == [500]
    assert managed_ns.describe_table({"id": table_id}).location not in (None, old)
    assert store.dataset(old).count_rows() == 2  # the dropped table's data, untouched
