"""A managed table's version names only the table's own data: a staged manifest whose files live
under another base path (a shallow clone of another table, say) is refused before the commit,
through the bridge and through the REST server, and changes nothing."""

from __future__ import annotations

import uuid
from typing import Any

import lance
import pyarrow as pa
import pytest
import requests
from lance_namespace.errors import InvalidInputError, InvalidTableStateError, TableNotFoundError

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.data.datasets import dataset_of_manifest
from lance_iceberg_ns.jobs import adopt_versions_written_by_location
from lance_iceberg_ns.versions.bases import manifest_message
from lance_iceberg_ns.versions.manifests import manifest_name

from ..stores import Store
from .stored import as_pylance_spells, stage_manifest, staged_manifests

pytestmark = pytest.mark.usefixtures("store")  # every test on a local disk and on S3

FOREIGN = "names 1 base path outside the table's location"


def _create(ns: IcebergLanceNamespace, table_id: list[str], values: list[Any]) -> str:
    return str(lance.write_dataset(pa.table({"v": values}), namespace_client=ns, table_id=table_id).uri)


def _append(ns: IcebergLanceNamespace, table_id: list[str], values: list[Any]) -> None:
    lance.write_dataset(pa.table({"v": values}), namespace_client=ns, table_id=table_id, mode="append")


def _versions(ns: IcebergLanceNamespace, table_id: list[str]) -> list[int]:
    return [v.version for v in ns.list_table_versions({"id": table_id}).versions]


def _rows(ns: IcebergLanceNamespace, table_id: list[str]) -> list[Any]:
    return sorted(lance.dataset(namespace_client=ns, table_id=table_id).to_table()["v"].to_pylist())


def _stage_clone(store: Store, victim_location: str, location: str, version: int) -> str:
    """A shallow clone of ``version`` of the victim's dataset, its manifest staged in the table at
    ``location`` as pylance stages a new version: its files are the victim's. The staged path."""
    clone = store.at(f"clone-{uuid.uuid4().hex[:8]}.lance")
    options = store.storage_options or None
    lance.dataset(victim_location, storage_options=options).shallow_clone(clone, version, storage_options=options)
    manifest = store.read(f"{clone}/_versions/{manifest_name(version)}")
    assert manifest
    staged = f"{location}/_versions/{manifest_name(version)}-{uuid.uuid4()}"
    store.write(staged, manifest)
    store.delete(clone)
    return staged


@pytest.fixture
def tables(managed_ns: IcebergLanceNamespace, db: list[str], store: Store) -> tuple[list[str], str, list[str], str]:
    """A managed table ``mine`` at version 1 and another, ``victim``, at version 2."""
    mine, victim = [*db, "mine"], [*db, "victim"]
    location = _create(managed_ns, mine, ["mine"])
    victim_location = _create(managed_ns, victim, ["VICTIM-1"])
    _append(managed_ns, victim, ["VICTIM-2"])
    return mine, location, victim, victim_location


def test_a_staged_shallow_clone_of_another_table_is_refused_and_changes_nothing(
    managed_ns: IcebergLanceNamespace, store: Store, tables: tuple[list[str], str, list[str], str]
) -> None:
    mine, location, victim, victim_location = tables
    victim_files = store.contents(victim_location)
    for commit in (
        lambda path: managed_ns.create_table_version({"id": mine, "version": 2, "manifest_path": path}),
        lambda path: managed_ns.batch_create_table_versions(
            {"entries": [{"id": mine, "version": 2, "manifest_path": path}]}
        ),
    ):
        staged = _stage_clone(store, victim_location, location, 2)
        with pytest.raises(InvalidInputError, match=FOREIGN) as refused:
            commit(as_pylance_spells(staged))
        assert victim_location not in str(refused.value) and as_pylance_spells(victim_location) not in str(
            refused.value
        )
        assert not store.exists(staged)  # refused for good: the staged manifest does not pile up
    assert _versions(managed_ns, mine) == [1] and _rows(managed_ns, mine) == ["mine"]
    assert _versions(managed_ns, victim) == [1, 2] and _rows(managed_ns, victim) == ["VICTIM-1", "VICTIM-2"]
    assert store.contents(victim_location) == victim_files
    # the table's own next version is still taken
    _append(managed_ns, mine, ["more"])
    assert _versions(managed_ns, mine) == [1, 2] and _rows(managed_ns, mine) == ["mine", "more"]


def test_an_atomic_batch_with_one_foreign_manifest_commits_no_table(
    managed_ns: IcebergLanceNamespace, db: list[str], store: Store, tables: tuple[list[str], str, list[str], str]
) -> None:
    mine, location, _victim, victim_location = tables
    third = [*db, "third"]
    third_location = _create(managed_ns, third, ["third"])
    own = stage_manifest(store, third_location, 2)  # the third table's own next version
    foreign = _stage_clone(store, victim_location, location, 2)
    with pytest.raises(InvalidInputError, match=FOREIGN):
        managed_ns.batch_create_table_versions(
            {
                "entries": [
                    {"id": third, "version": 2, "manifest_path": as_pylance_spells(own)},
                    {"id": mine, "version": 2, "manifest_path": as_pylance_spells(foreign)},
                ]
            }
        )
    assert _versions(managed_ns, third) == [1] and _versions(managed_ns, mine) == [1]
    assert _rows(managed_ns, mine) == ["mine"] and _rows(managed_ns, third) == ["third"]


def test_the_rest_server_refuses_a_staged_shallow_clone_as_bad_input(
    managed_ns: IcebergLanceNamespace,
    server: Any,
    rest: Any,
    store: Store,
    tables: tuple[list[str], str, list[str], str],
) -> None:
    mine, location, victim, victim_location = tables
    staged = _stage_clone(store, victim_location, location, 2)
    answer = requests.post(
        f"{server.uri}/v1/table/{'$'.join(mine)}/version/create",
        json={"version": 2, "manifest_path": as_pylance_spells(staged)},
        timeout=30,
    )
    assert (answer.status_code, answer.json()["code"]) == (400, 13), answer.text
    assert FOREIGN in answer.json()["error"] and as_pylance_spells(victim_location) not in answer.text
    staged = _stage_clone(store, victim_location, location, 2)
    with pytest.raises(InvalidInputError, match=FOREIGN):  # pylance's Rust client, typed as the server answered
        rest.create_table_version({"id": mine, "version": 2, "manifest_path": as_pylance_spells(staged)})
    assert _versions(managed_ns, mine) == [1] and _rows(managed_ns, mine) == ["mine"]
    assert _versions(managed_ns, victim) == [1, 2] and staged_manifests(store, location) == []


def test_a_staged_manifest_that_is_not_a_lance_manifest_is_refused_by_name(
    managed_ns: IcebergLanceNamespace, store: Store, tables: tuple[list[str], str, list[str], str]
) -> None:
    mine, location, _victim, _victim_location = tables
    garbage = b"\x01\x02 not protobuf"
    framed = len(garbage).to_bytes(4, "little") + garbage + (0).to_bytes(8, "little") + b"\x00\x00\x01\x00LANC"
    for planted in (b"", b"not a manifest", b"x" * 20 + b"LANC", framed):
        staged = f"{location}/_versions/{manifest_name(2)}-{uuid.uuid4()}"
        store.write(staged, planted)
        with pytest.raises(InvalidInputError, match="not a Lance manifest"):
            managed_ns.create_table_version({"id": mine, "version": 2, "manifest_path": as_pylance_spells(staged)})
    assert _versions(managed_ns, mine) == [1] and _rows(managed_ns, mine) == ["mine"]
    assert staged_manifests(store, location) == []


def test_the_manifest_message_is_what_pylance_reads_from_a_manifest_file(
    managed_ns: IcebergLanceNamespace, store: Store, tables: tuple[list[str], str, list[str], str]
) -> None:
    """The framing of a manifest file is Lance's: if pylance changes it, this fails first."""
    _mine, _location, _victim, victim_location = tables
    options = store.storage_options
    dataset = lance.dataset(victim_location, storage_options=options or None)
    stored = store.read(f"{victim_location}/_versions/{manifest_name(dataset.version)}")
    assert stored
    read = dataset_of_manifest(victim_location, options, manifest_message(stored))
    assert read.version == dataset.version == 2
    assert [f.data_files()[0].path for f in read.get_fragments()] == [
        f.data_files()[0].path for f in dataset.get_fragments()
    ]
    assert read.to_table()["v"].to_pylist() == ["VICTIM-1", "VICTIM-2"]


def test_a_base_path_at_the_tables_own_root_is_taken_and_any_other_refused_through_pylance(
    managed_ns: IcebergLanceNamespace,
    store: Store,
    tables: tuple[list[str], str, list[str], str],
    capfd: pytest.CaptureFixture[str],
) -> None:
    mine, location, _victim, victim_location = tables
    through_namespace = lance.dataset(namespace_client=managed_ns, table_id=mine)
    through_namespace.add_bases([lance.DatasetBasePath(location, name="own", is_dataset_root=True)])
    lance.write_dataset(
        pa.table({"v": ["own base"]}), namespace_client=managed_ns, table_id=mine, mode="append", target_bases=["own"]
    )
    assert _versions(managed_ns, mine) == [1, 2, 3] and _rows(managed_ns, mine) == ["mine", "own base"]
    capfd.readouterr()
    # a base registered elsewhere is refused even before any file is written there; pylance 14 answers
    # any refusal of its commit as of unknown outcome, and logs the namespace's reason
    with pytest.raises(OSError, match="Commit result for version 4 is unknown"):
        lance.dataset(namespace_client=managed_ns, table_id=mine).add_bases(
            [lance.DatasetBasePath(victim_location, name="victim", is_dataset_root=True)]
        )
    assert FOREIGN in capfd.readouterr().err
    assert _versions(managed_ns, mine) == [1, 2, 3] and staged_manifests(store, location) == []
    assert _rows(managed_ns, mine) == ["mine", "own base"]


def test_a_shallow_clone_written_by_location_into_a_declared_table_is_refused_not_read(
    managed_ns: IcebergLanceNamespace, store: Store, tables: tuple[list[str], str, list[str], str]
) -> None:
    """A writer by location shallow-clones another table into a managed table declared and never
    written: the clone keeps its source's version number (2), so it is no first version to adopt,
    and reads of the table must not answer the other table's rows from its files."""
    _mine, _location, victim, victim_location = tables
    declared = [*victim[:-1], "declared"]
    location = str(managed_ns.declare_table({"id": declared}).location)
    options = store.storage_options or None
    lance.dataset(victim_location, storage_options=options).shallow_clone(location, 2, storage_options=options)
    for read in (
        lambda: managed_ns.count_table_rows({"id": declared}),
        lambda: managed_ns.list_table_versions({"id": declared}),
    ):
        with pytest.raises(InvalidTableStateError, match="begins at version 2, not 1.*deep copy") as refusal:
            read()
        assert "adopt" not in str(refusal.value)  # adoption is no way out for it
    with pytest.raises(ValueError, match="Invalid table state"):  # pylance opening it through the bridge
        _rows(managed_ns, declared)
    with pytest.raises(InvalidTableStateError, match="begins at version 2, not 1"):  # and never adopted
        adopt_versions_written_by_location(managed_ns, declared)
    assert _versions(managed_ns, victim) == [1, 2] and _rows(managed_ns, victim) == ["VICTIM-1", "VICTIM-2"]


def test_a_shallow_clone_of_another_table_cannot_be_registered(
    managed_ns: IcebergLanceNamespace, store: Store, tables: tuple[list[str], str, list[str], str]
) -> None:
    """Registered, a shallow clone would read another table's files, and its writes could reach
    them: the register is refused as bad input, and nothing is made."""
    _mine, _location, victim, victim_location = tables
    clone = f"{victim_location.rstrip('/').rsplit('/', 1)[0]}/registered.lance"  # where a table of its namespace goes
    options = store.storage_options or None
    lance.dataset(victim_location, storage_options=options).shallow_clone(clone, 2, storage_options=options)
    registered = [*victim[:-1], "registered"]
    with pytest.raises(InvalidInputError, match="cannot be registered: a shallow clone"):
        managed_ns.register_table({"id": registered, "location": clone})
    with pytest.raises(TableNotFoundError):
        managed_ns.describe_table({"id": registered})
