"""Entries someone made in the catalog by hand, as anyone who can write to an Iceberg catalog can:
a copy of a Lance table's entry (Iceberg's ``register_table`` of its metadata file gives the copy
the same UUID, properties and location), a tombstone planted in the trash, an entry dropped by an
Iceberg engine. None of them reaches, deletes or revives another table's data; each attack gets its
error code, and the victim's files stay the same byte for byte."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import lance
import pyarrow as pa
import pytest
import requests
from lance_namespace import CreateTableRequest, RegisterTableRequest
from lance_namespace.errors import InternalError, PermissionDeniedError, TableNotFoundError

from lance_iceberg_ns import IcebergLanceNamespace, companion_table_schema
from lance_iceberg_ns.data import writes
from lance_iceberg_ns.identifiers import TRASH_NAMESPACE
from lance_iceberg_ns.storage import ownership
from lance_iceberg_ns.storage.ownership import MARKER
from lance_iceberg_ns.tables.tombstones import Tombstone

from ..helpers import CommandLine, files_under, ipc, other_client
from ..scene import Scene
from ..scene import refused as _refused


def _copy_entry(scene: Scene, source: tuple[str, ...], target: tuple[str, ...]) -> None:
    """What Iceberg's register_table does with a table's current metadata file."""
    catalog = other_client(scene.endpoint, scene.db[0])
    metadata_location = catalog.load_table(source).metadata_location
    if len(target) > 1 and not catalog.namespace_exists(target[:-1]):
        catalog.create_namespace(target[:-1])
    catalog.register_table(target, metadata_location)


def _every_way_in(scene: Scene, table: list[str]) -> None:
    """Reads, metadata reads, writes and deletes through ``table``: each is refused (403, code 15)."""
    body = ipc(pa.table({"v": [99]}))
    for operation, payload in (
        ("count_rows", {}),
        ("query", {"k": 10, "vector": {}}),
        ("describe", {}),  # the location, which pylance would read and write by
        ("describe", {"load_detailed_metadata": True}),
        ("version/list", {}),
        ("version/describe", {"version": 1}),
        ("exists", {"version": 1}),
        ("delete", {"predicate": "v > 0"}),
        ("restore", {"version": 1}),
    ):
        _refused(scene.call(operation, table, payload), 403, 15)
    path_id = "$".join(table)
    answer = requests.post(f"{scene.server.uri}/v1/table/{path_id}/insert", data=body, timeout=30)
    _refused(answer, 403, 15)


def test_a_catalog_copy_of_an_entry_reaches_none_of_its_data(scene: Scene) -> None:
    warehouse, namespace = scene.db
    _copy_entry(scene, (namespace, "victim"), ("elsewhere", "copy"))
    _copy_entry(scene, (namespace, "victim"), (namespace, "twin"))
    victim_files = files_under(scene.victim_location)
    for copy in ([warehouse, "elsewhere", "copy"], [warehouse, namespace, "twin"]):
        _every_way_in(scene, copy)
    assert files_under(scene.victim_location) == victim_files
    assert lance.dataset(namespace_client=scene.operator, table_id=[*scene.db, "victim"]).count_rows() == 3


@pytest.mark.parametrize("managed", [False, True], ids=["lance-versions", "managed-versions"])
def test_pylance_through_a_catalog_copy_neither_reads_nor_writes_the_original(
    endpoint: str, lance_root: Path, db: list[str], managed: bool
) -> None:
    """pylance reads and writes by the location the namespace hands it (or commits a managed
    version through it): a copy is handed nothing, and the original stays writable."""
    properties = {"endpoint": endpoint, "root": str(lance_root), "table_version_management": str(managed).lower()}
    original, copy = [*db, "original"], [*db, "copy"]
    with IcebergLanceNamespace(**properties) as ns:
        lance.write_dataset(pa.table({"v": [1, 2]}), namespace_client=ns, table_id=original)
        catalog = other_client(endpoint, db[0])
        catalog.register_table((db[1], "copy"), catalog.load_table((db[1], "original")).metadata_location)
        location = Path(ns.describe_table({"id": original}).location)
        files = files_under(location)
        with pytest.raises((PermissionDeniedError, OSError, ValueError), match="belongs to another table"):
            lance.dataset(namespace_client=ns, table_id=copy).count_rows()
        with pytest.raises((PermissionDeniedError, OSError, ValueError), match="belongs to another table"):
            lance.write_dataset(pa.table({"v": [666]}), namespace_client=ns, table_id=copy, mode="append")
        with pytest.raises(PermissionDeniedError):
            ns.describe_table({"id": copy})
        assert files_under(location) == files
        lance.write_dataset(pa.table({"v": [3]}), namespace_client=ns, table_id=original, mode="append")
        assert sorted(lance.dataset(str(location)).to_table()["v"].to_pylist()) == [1, 2, 3]


def test_an_entry_planted_at_another_tables_location_reaches_none_of_its_data_or_metadata(scene: Scene) -> None:
    other_client(scene.endpoint, scene.db[0]).create_table(
        (scene.db[1], "planted"),
        schema=companion_table_schema(),
        location=str(scene.victim_location),
        properties={"table_type": "lance"},
    )
    victim_files = files_under(scene.victim_location)
    _every_way_in(scene, [*scene.db, "planted"])
    assert files_under(scene.victim_location) == victim_files


def test_dropping_and_purging_a_copy_leaves_the_original_whole(scene: Scene) -> None:
    warehouse, namespace = scene.db
    _copy_entry(scene, (namespace, "victim"), (namespace, "twin"))
    victim_files = files_under(scene.victim_location)
    assert scene.call("drop", [*scene.db, "twin"]).status_code == 200  # the copy's entry goes to the trash
    purgable = scene.operator.list_purgable_tables(scene.db)
    assert [p.foreign is not None for p in purgable] == [True]  # its location is not its own
    later = datetime.now(timezone.utc) + timedelta(days=30)
    assert scene.operator.purge_tables(namespace_id=[warehouse], deleted_before=later) == []
    with pytest.raises(PermissionDeniedError, match="not made by this bridge"):
        scene.operator.purge_table([*scene.db, "twin"])
    assert files_under(scene.victim_location) == victim_files
    assert lance.dataset(namespace_client=scene.operator, table_id=[*scene.db, "victim"]).count_rows() == 3


def test_a_tombstone_copied_from_a_live_table_is_foreign_and_the_routine_purge_keeps_the_data(
    scene: Scene, endpoint: str, lance_root: Path, cli: CommandLine
) -> None:
    warehouse, namespace = scene.db
    planted = Tombstone((namespace, "victim"), 1, "planted0000")  # long expired, by its name
    _copy_entry(scene, (namespace, "victim"), planted.identifier)
    victim_files = files_under(scene.victim_location)
    found = scene.operator.list_purgable_tables([warehouse])
    assert [(p.tombstone, p.foreign is not None) for p in found] == [(planted.name, True)]
    flags = ["--endpoint", endpoint, "--root", str(lance_root)]
    purged = cli(*flags, "--json", "tables", "purge", warehouse, "--older-than", "7d")
    assert purged.returncode == 1, purged.stderr  # it skipped something: says what and why
    answer = json.loads(purged.stdout)
    assert answer["purged"] == [] and answer["skipped"][0]["reason"].startswith("foreign tombstone: its location")
    listed = cli(*flags, "--json", "tables", "purgable", warehouse)
    assert json.loads(listed.stdout)[0]["foreign"].startswith("its location is not its own")
    # an undrop or a create never brings the planted entry back over the live table
    with pytest.raises(TableNotFoundError):
        scene.operator.undrop_table([*scene.db, "victim-gone"])
    assert files_under(scene.victim_location) == victim_files
    assert scene.call("count_rows", [*scene.db, "victim"], {}).json() == 3


def test_a_planted_tombstone_outside_the_root_dated_in_the_future_never_makes_its_name_live(
    scene: Scene, tmp_path: Path
) -> None:
    warehouse, namespace = scene.db
    elsewhere = tmp_path / "elsewhere" / "data.lance"
    lance.write_dataset(pa.table({"v": [7]}), str(elsewhere))
    in_a_year = int((datetime.now(timezone.utc) + timedelta(days=365)).timestamp() * 1000)
    future = Tombstone((namespace, "orders"), in_a_year, "x1")
    catalog = other_client(scene.endpoint, warehouse)
    catalog.create_namespace((TRASH_NAMESPACE,))
    catalog.create_table(
        future.identifier,
        schema=companion_table_schema(),
        location=str(elsewhere),
        properties={"table_type": "lance"},
    )
    catalog.create_table(
        (TRASH_NAMESPACE, "not-a-tombstone"),
        schema=companion_table_schema(),
        location=str(elsewhere),
        properties={"table_type": "lance"},
    )
    before = files_under(elsewhere)
    rows = ipc(pa.table({"v": [1, 2]}))
    created = requests.post(
        f"{scene.server.uri}/v1/table/{'$'.join([*scene.db, 'orders'])}/create", data=rows, timeout=30
    )
    assert created.status_code == 200, created.text
    assert not created.json()["location"].startswith(str(tmp_path / "elsewhere"))
    assert scene.call("count_rows", [*scene.db, "orders"], {}).json() == 2
    reasons = {p.tombstone: p.foreign for p in scene.operator.list_purgable_tables([warehouse])}
    assert reasons[future.name] == "its deletion time is in the future"
    assert reasons["not-a-tombstone"] == "its name is not a tombstone's"
    assert files_under(elsewhere) == before


def test_a_rename_carries_ownership_and_a_copy_made_after_it_is_refused(scene: Scene) -> None:
    warehouse, namespace = scene.db
    assert scene.call("rename", [*scene.db, "victim"], {"new_table_name": "moved"}).status_code == 200
    assert scene.call("count_rows", [*scene.db, "moved"], {}).json() == 3
    _copy_entry(scene, (namespace, "moved"), (namespace, "copy"))
    _refused(scene.call("count_rows", [*scene.db, "copy"], {}), 403, 15)
    assert scene.call("count_rows", [*scene.db, "moved"], {}).json() == 3


def test_soft_delete_and_undrop_carry_ownership(ns: IcebergLanceNamespace, db: list[str]) -> None:
    table = [*db, "t"]
    location = lance.write_dataset(pa.table({"v": [1]}), namespace_client=ns, table_id=table).uri
    ns.drop_table({"id": table})
    with open(os.path.join(location, MARKER)) as handle:
        assert json.load(handle)["entry"][1] == TRASH_NAMESPACE  # the warehouse's trash
    ns.undrop_table(table)
    with open(os.path.join(location, MARKER)) as handle:
        assert json.load(handle)["entry"] == [*db, "t"]
    assert lance.dataset(namespace_client=ns, table_id=table).count_rows() == 1


def test_a_companion_dropped_by_an_iceberg_engine_leaves_its_data_findable_and_a_register_adopts_it(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, cli: CommandLine
) -> None:
    table = [*db, "t"]
    location = lance.write_dataset(pa.table({"v": [1, 2]}), namespace_client=ns, table_id=table).uri
    files = files_under(Path(location))
    assert ns.unregistered_locations(db[0]) == []
    other_client(endpoint, db[0]).drop_table((db[1], "t"))  # Spark's DROP TABLE, without the bridge
    found = ns.unregistered_locations(db[0])
    assert [(u.location, u.was) for u in found] == [(location, ".".join(table))]
    root = ns.properties["root"]
    listed = cli("--endpoint", endpoint, "--root", root, "--json", "tables", "unregistered", db[0])
    assert json.loads(listed.stdout) == [{"location": location, "was": ".".join(table)}], listed.stderr
    assert files_under(Path(location)) == files
    ns.register_table(RegisterTableRequest(id=[*db, "back"], location=location))
    assert lance.dataset(namespace_client=ns, table_id=[*db, "back"]).count_rows() == 2
    assert ns.unregistered_locations(db[0]) == []


def test_data_whose_entry_still_exists_is_never_adopted(ns: IcebergLanceNamespace, db: list[str]) -> None:
    location = lance.write_dataset(pa.table({"v": [1]}), namespace_client=ns, table_id=[*db, "t"]).uri
    with pytest.raises(PermissionDeniedError, match="belongs to another table"):
        ns.register_table(RegisterTableRequest(id=[*db, "thief"], location=location))
    assert lance.dataset(namespace_client=ns, table_id=[*db, "t"]).count_rows() == 1


def test_a_failed_create_leaves_no_trash_namespace(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def storage_fails(*_: object) -> None:
        raise OSError("the object store went away")

    monkeypatch.setattr(writes, "create", storage_fails)
    with pytest.raises(InternalError):
        ns.create_table(CreateTableRequest(id=[*db, "t"]), ipc(pa.table({"v": [1]})))
    catalog = other_client(endpoint, db[0])
    assert catalog.list_namespaces((db[1],)) == []
    assert catalog.list_tables((db[1],)) == []


# --- renames made outside the bridge, and markers left behind ---------------------------------------


def test_a_table_renamed_by_an_iceberg_engine_keeps_working_and_its_marker_follows(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str
) -> None:
    location = lance.write_dataset(pa.table({"v": [1, 2]}), namespace_client=ns, table_id=[*db, "t"]).uri
    other_client(endpoint, db[0]).rename_table((db[1], "t"), (db[1], "renamed"))  # Spark's ALTER TABLE RENAME
    assert ns.count_table_rows({"id": [*db, "renamed"]}).count == 2
    with open(os.path.join(location, MARKER)) as handle:
        assert json.load(handle)["entry"] == [*db, "renamed"]
    assert ns.unregistered_locations(db[0]) == []


def test_after_an_engine_rename_neither_a_copy_nor_a_thiefs_register_gets_the_data(scene: Scene) -> None:
    warehouse, namespace = scene.db
    catalog = other_client(scene.endpoint, warehouse)
    catalog.rename_table((namespace, "victim"), (namespace, "renamed"))
    _copy_entry(scene, (namespace, "renamed"), (namespace, "copy"))
    victim_files = files_under(scene.victim_location)
    _refused(scene.call("count_rows", [*scene.db, "copy"], {}), 403, 15)
    _refused(scene.call("register", [*scene.db, "thief"], {"location": str(scene.victim_location)}), 403, 15)
    # two entries of one table: neither is trusted until a person removes the copy
    _refused(scene.call("count_rows", [*scene.db, "renamed"], {}), 403, 15)
    assert scene.operator.unregistered_locations(warehouse) == []
    assert files_under(scene.victim_location) == victim_files
    catalog.drop_table((namespace, "copy"))
    assert scene.call("count_rows", [*scene.db, "renamed"], {}).json() == 3  # the marker follows it now
    victim_files.pop(MARKER)
    assert {
        name: digest for name, digest in files_under(scene.victim_location).items() if name != MARKER
    } == victim_files


def test_a_marker_left_behind_by_a_failed_rewrite_follows_on_the_next_read(
    ns: IcebergLanceNamespace, db: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lance.write_dataset(pa.table({"v": [1]}), namespace_client=ns, table_id=[*db, "t"])
    rewrite = ownership.rewrite

    def crash(*_: object) -> bool:
        raise OSError("the process ended here")

    monkeypatch.setattr(ownership, "rewrite", crash)
    ns.rename_table({"id": [*db, "t"], "new_table_name": "u"})  # the rename stands
    monkeypatch.setattr(ownership, "rewrite", rewrite)
    assert ns.count_table_rows({"id": [*db, "u"]}).count == 1


def test_a_symbolic_link_in_place_of_the_marker_is_refused_as_owned(
    ns: IcebergLanceNamespace, db: list[str], lance_root: Path
) -> None:
    location = lance_root / db[0] / "linked.lance"
    lance.write_dataset(pa.table({"v": [1]}), str(location))
    os.symlink(lance_root / "elsewhere.json", location / MARKER)
    with pytest.raises(PermissionDeniedError):
        ns.register_table(RegisterTableRequest(id=[*db, "t"], location=str(location)))
