"""Every table owns its location, and only its own: ordinary sequences (rename, re-use a name,
drop, purge, register, restore, symbolic links) never touch another table's data."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import lance
import lancedb
import pyarrow as pa
import pytest
from lance_namespace import CreateNamespaceRequest, DescribeTableRequest, RegisterTableRequest
from lance_namespace.errors import (
    ConcurrentModificationError,
    InvalidInputError,
    PermissionDeniedError,
    ServiceUnavailableError,
    TableAlreadyExistsError,
    TableNotFoundError,
)

from lance_iceberg_ns import IcebergLanceNamespace, companion_table_schema
from lance_iceberg_ns.storage import files
from lance_iceberg_ns.storage.locations import LocationPolicy, normalize_location, overlaps
from lance_iceberg_ns.storage.ownership import MARKER

from ..helpers import catalog_state, files_under, ipc, other_client
from ..helpers import write_values as _write
from ..stores import Store


def _read(ns: IcebergLanceNamespace, table_id: list[str]) -> list[int]:
    return lance.dataset(namespace_client=ns, table_id=table_id).to_table().column("v").to_pylist()


@pytest.fixture(params=[True, False], ids=["soft_delete", "hard_delete"])
def any_ns(request: pytest.FixtureRequest, endpoint: str, store: Store) -> Iterator[IcebergLanceNamespace]:
    properties = {**store.properties, "soft_delete": "true" if request.param else "false"}
    with IcebergLanceNamespace(endpoint=endpoint, root=store.root, **properties) as namespace:
        yield namespace


# --- locations: normal form and confinement ----------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("/data/lance/", "/data/lance"),
        ("/data//lance/./t", "/data/lance/t"),
        ("/data/lance/a/../t", "/data/lance/t"),
        ("file:///data/lance/a/%2e%2e/t", "/data/lance/t"),
        ("file://localhost/data/%6Cance", "/data/lance"),
        ("file:/data/lance", "/data/lance"),
        ("S3A://Bucket/lake//x/./y/", "s3://bucket/lake/x/y"),
        ("s3://bucket/lake/%2e%2e/other", "s3://bucket/other"),
        ("gs://b/a%20b", "gs://b/a%20b"),
        ("gs://b/a b", "gs://b/a%20b"),
        # decoded once, as Lance decodes: an escaped escape stays a name, never a step up
        ("s3://b/root/%252e%252e/x", "s3://b/root/%252e%252e/x"),
    ],
)
def test_locations_are_compared_in_one_normal_form(raw: str, normal: str) -> None:
    assert normalize_location(raw) == normal


@pytest.mark.parametrize(
    "raw", ["/data/lance/../../..", "file:///%2e%2e/etc", "s3://bucket/%2e%2e/%2e%2e", "s3://bucket/lake/../.."]
)
def test_locations_climbing_above_their_top_are_permission_denied(raw: str) -> None:
    with pytest.raises(PermissionDeniedError):
        normalize_location(raw)


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "s3:///no-bucket",
        "file://otherhost/x",
        "s3://b/x?versionId=1",
        "/a\x00b",
        "relative/path",
        "FiLe:relative",
        "/lake/t ",
        "/lake/\udcff",
        "file:///lake/%ff%fe",
    ],
)
def test_what_is_not_a_location_is_invalid_input(raw: str) -> None:
    with pytest.raises(InvalidInputError):
        normalize_location(raw)


def test_a_location_must_lie_strictly_under_the_root_or_an_allowed_location(tmp_path: Path) -> None:
    policy = LocationPolicy.of(str(tmp_path / "root"), ["s3://lake/team-a/"])
    assert policy.confine(f"file://{tmp_path}/root/wh/ns/t") == f"{tmp_path}/root/wh/ns/t"
    assert policy.confine("s3a://LAKE/team-a/t") == "s3://lake/team-a/t"
    for outside in (
        str(tmp_path / "root"),  # the root itself would hold every table
        str(tmp_path / "root-b" / "t"),  # a sibling sharing the root's name as a prefix
        f"file://{tmp_path}/root/%2e%2e/victim",
        "/etc",
        "s3://lake/team-b/t",
        "s3://lake/team-a",
    ):
        with pytest.raises(PermissionDeniedError):
            policy.confine(outside)
    assert overlaps("/a/b", "/a/b/c") and overlaps("/a/b/c", "/a/b") and not overlaps("/a/b", "/a/bc")


def test_default_locations_escape_names_and_stay_under_an_object_store_root() -> None:
    policy = LocationPolicy.of("s3://lake/tenant/root")
    location = policy.default_location(["wh", "%2e%2e", "%2e%2e", "%2e%2e", "a b"])
    assert location.startswith("s3://lake/tenant/root/wh/%252e%252e/%252e%252e/%252e%252e/a%20b-")
    assert normalize_location(location) == location


def test_table_uris_escape_names_so_a_client_decoding_them_stays_put(tmp_path: Path) -> None:
    from lance_iceberg_ns.storage.locations import table_uri

    uri = table_uri(f"{tmp_path}/%2e%2e/%2e%2e/t.lance")
    assert uri == f"file://{tmp_path}/%252e%252e/%252e%252e/t.lance"
    assert normalize_location(uri) == f"{tmp_path}/%2e%2e/%2e%2e/t.lance"


def test_explicit_locations_under_the_root_cannot_hold_other_tables_directories(
    ns: IcebergLanceNamespace, db: list[str], store: Store, endpoint: str
) -> None:
    before = catalog_state(endpoint, db[0])
    for squatted in (store.at(db[0]), store.at(db[0], db[1]), store.at("x", "y")):
        with pytest.raises(PermissionDeniedError, match="layout|could hold"):
            ns.declare_table({"id": [*db, "squatter"], "location": squatted})
    assert catalog_state(endpoint, db[0]) == before
    assert ns.declare_table({"id": [*db, "t"], "location": store.at(db[0], "mine.lance")}).location


def test_declare_refuses_a_place_that_already_holds_files_and_deletes_nothing_later(
    endpoint: str, store: Store, db: list[str]
) -> None:
    allowed = store.beside("allowed")
    project = f"{allowed}/proj"
    store.write(f"{project}/data/customers.csv", b"x")
    store.write(f"{allowed}/afile", b"a file, not a directory")
    files = store.contents(allowed)
    properties = {**store.properties, "allowed_locations": allowed, "soft_delete": "false"}
    with IcebergLanceNamespace(endpoint=endpoint, root=store.root, **properties) as ns:
        refused = [project]
        if store.kind == "disk":  # a file where a directory must be, a name too long for one: a disk's own
            refused += [f"{allowed}/afile", f"{allowed}/afile/x", f"{allowed}/n" + "/x" * 3 + "/" + "y" * 300]
        for place in refused:
            with pytest.raises(InvalidInputError):
                ns.declare_table({"id": [*db, "t"], "location": place})
        assert store.contents(allowed) == files and not store.exists(f"{allowed}/n")


def test_a_drop_racing_a_rename_and_a_new_table_of_the_name_changes_nothing(
    endpoint: str, store: Store, db: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with (
        store.namespace(endpoint, soft_delete="false") as dropper,
        store.namespace(endpoint) as other,
    ):
        kept = _write(other, [*db, "t"], [1, 2])
        prove = dropper.placement.prove

        def meanwhile(entry: object) -> str:  # between the drop's load and its act
            location = prove(entry)  # type: ignore[arg-type]
            other.rename_table({"id": [*db, "t"], "new_table_name": "t_keep"})
            _write(other, [*db, "t"], [9])
            return location

        monkeypatch.setattr(dropper.placement, "prove", meanwhile)
        with pytest.raises(ConcurrentModificationError):
            dropper.drop_table({"id": [*db, "t"]})
        assert _read(other, [*db, "t_keep"]) == [1, 2] and _read(other, [*db, "t"]) == [9]
        assert store.dataset(kept).count_rows() == 2


def test_a_symbolic_link_under_the_root_cannot_lead_outside(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", tmp_path / "root" / "escape")
    with pytest.raises(PermissionDeniedError):
        LocationPolicy.of(str(tmp_path / "root")).confine(str(tmp_path / "root" / "escape" / "t"))


def test_default_locations_are_new_for_every_table(ns: IcebergLanceNamespace, db: list[str], store: Store) -> None:
    first = ns.declare_table({"id": [*db, "orders"]}).location
    ns.deregister_table({"id": [*db, "orders"]})
    second = ns.declare_table({"id": [*db, "orders"]}).location
    assert first != second
    for location in (first, second):
        assert location is not None and location.startswith(store.at(*db, "orders-"))
        assert location.endswith(".lance")


# --- ordinary sequences ----------------------------------------------------------------------


def test_rename_then_reuse_the_name_makes_an_independent_table(
    any_ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    ns = any_ns
    archived_location = _write(ns, [*db, "orders"], [1, 2, 3])
    ns.rename_table({"id": [*db, "orders"], "new_table_name": "orders_archived"})
    archived_files = store.contents(archived_location)

    new_location = _write(ns, [*db, "orders"], [7])  # pylance's default create mode
    assert new_location != archived_location
    assert _read(ns, [*db, "orders"]) == [7]
    ns.drop_table({"id": [*db, "orders"]})
    if ns.settings.soft_delete:
        assert ns.purge_table([*db, "orders"]) == 1
    assert not store.exists(new_location)

    assert _read(ns, [*db, "orders_archived"]) == [1, 2, 3]
    assert store.contents(archived_location) == archived_files


def test_reuse_after_a_soft_delete_leaves_the_dropped_table_restorable_and_purgeable(
    ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    old_location = _write(ns, [*db, "t"], [1, 2])
    ns.drop_table({"id": [*db, "t"]})
    old_files = store.contents(old_location)
    new_location = _write(ns, [*db, "t"], [9])
    assert new_location != old_location and _read(ns, [*db, "t"]) == [9]
    with pytest.raises(TableAlreadyExistsError):
        ns.undrop_table([*db, "t"])  # a live table holds the name
    assert store.contents(old_location) == old_files

    ns.rename_table({"id": [*db, "t"], "new_table_name": "t_new"})  # free the name: the old one comes back
    ns.undrop_table([*db, "t"])
    assert _read(ns, [*db, "t"]) == [1, 2] and _read(ns, [*db, "t_new"]) == [9]
    ns.drop_table({"id": [*db, "t"]})
    assert ns.purge_table([*db, "t"]) == 1
    assert not store.exists(old_location) and _read(ns, [*db, "t_new"]) == [9]


def test_lancedb_create_table_reuses_a_soft_deleted_name(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store
) -> None:
    old_location = _write(ns, [*db, "vectors"], [1])
    ns.drop_table({"id": [*db, "vectors"]})
    connection = lancedb.connect_namespace("iceberg", {"endpoint": endpoint, "root": store.root, **store.properties})
    created = connection.create_table("vectors", pa.table({"v": [5, 6]}), namespace_path=db)
    assert created.count_rows() == 2
    assert store.dataset(old_location).count_rows() == 1
    assert ns.list_purgable_tables(db)[0].id == [*db, "vectors"]


def test_deregister_and_register_again_and_a_second_entry_is_refused(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store
) -> None:
    location = _write(ns, [*db, "t"], [1, 2, 3])
    ns.deregister_table({"id": [*db, "t"]})
    assert not store.exists(f"{location}/{MARKER}")  # the data belongs to nobody now
    ns.register_table(RegisterTableRequest(id=[*db, "back"], location=location))
    before = catalog_state(endpoint, db[0])
    with pytest.raises(PermissionDeniedError, match="belongs to another table"):
        ns.register_table(RegisterTableRequest(id=[*db, "twin"], location=location))
    with pytest.raises(PermissionDeniedError):
        ns.declare_table({"id": [*db, "inside"], "location": location + "/data/nested"})
    with pytest.raises(PermissionDeniedError):
        ns.declare_table({"id": [*db, "around"], "location": location.rsplit("/", 1)[0]})
    assert catalog_state(endpoint, db[0]) == before
    assert _read(ns, [*db, "back"]) == [1, 2, 3]


def test_declare_over_an_unowned_dataset_points_to_register(
    ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    location = _write(ns, [*db, "t"], [1])
    ns.deregister_table({"id": [*db, "t"]})
    with pytest.raises(InvalidInputError, match="register"):
        ns.declare_table({"id": [*db, "t"], "location": location})
    assert not store.exists(f"{location}/{MARKER}")


def test_register_overwrite_that_fails_leaves_the_previous_table_whole(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _write(ns, [*db, "t"], [1])
    second = _write(ns, [*db, "other"], [2])
    ns.deregister_table({"id": [*db, "other"]})
    before = catalog_state(endpoint, db[0])

    def unavailable(*args: object, **kwargs: object) -> None:
        raise ServiceUnavailableError("the catalog went away")

    monkeypatch.setattr(ns.companions, "create", unavailable)
    with pytest.raises(ServiceUnavailableError):
        ns.register_table(RegisterTableRequest(id=[*db, "t"], location=second, mode="Overwrite"))
    monkeypatch.undo()
    assert catalog_state(endpoint, db[0]) == before
    assert _read(ns, [*db, "t"]) == [1] and not store.exists(f"{second}/{MARKER}")

    ns.register_table(RegisterTableRequest(id=[*db, "t"], location=second, mode="Overwrite"))
    assert _read(ns, [*db, "t"]) == [2]
    assert store.dataset(first).count_rows() == 1 and not store.exists(f"{first}/{MARKER}")
    ns.register_table(RegisterTableRequest(id=[*db, "first"], location=first))  # nobody's now: free to register


def test_restore_writes_only_into_data_the_entry_owns(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store
) -> None:
    location = _write(ns, [*db, "t"], [1])
    _write(ns, [*db, "t"], [2], mode="append")
    ns.restore_table({"id": [*db, "t"], "version": 1})
    assert store.dataset(location).version == 3 and _read(ns, [*db, "t"]) == [1]

    # another client's entry at that location, made directly in the catalog: it owns nothing
    other_client(endpoint, db[0]).create_table(
        (*db[1:], "impostor"), schema=companion_table_schema(), location=location, properties={"table_type": "lance"}
    )
    victim = store.contents(location)
    with pytest.raises(PermissionDeniedError, match="belongs to another table"):
        ns.restore_table({"id": [*db, "impostor"], "version": 1})
    assert store.contents(location) == victim


def test_hard_drop_deletes_only_the_datasets_own_files_and_never_follows_links(
    endpoint: str, lance_root: Path, db: list[str], tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    lance.write_dataset(pa.table({"v": [1]}), str(victim))
    victim_files = files_under(victim)
    with IcebergLanceNamespace(endpoint=endpoint, root=str(lance_root), soft_delete="false") as ns:
        location = _write(ns, [*db, "t"], [1, 2])
        os.symlink(victim, os.path.join(location, "data", "link-to-victim"))
        os.symlink(victim / "_versions", os.path.join(location, "_indices"))
        (Path(location) / "notes.txt").write_text("not Lance's")
        ns.drop_table({"id": [*db, "t"]})
    assert files_under(victim) == victim_files
    assert sorted(os.listdir(location)) == ["notes.txt"]  # the stranger's file stays


def test_an_entry_without_an_ownership_marker_is_not_dropped(endpoint: str, store: Store, db: list[str]) -> None:
    location = store.at("legacy", "t.lance")
    store.write_lance(location, rows=1)
    other_client(endpoint, db[0]).create_table(
        (*db[1:], "legacy"), schema=companion_table_schema(), location=location, properties={"table_type": "lance"}
    )
    files = store.contents(location)
    before = catalog_state(endpoint, db[0])
    with store.namespace(endpoint, soft_delete="false") as ns:
        with pytest.raises(PermissionDeniedError, match="no ownership marker"):
            ns.drop_table({"id": [*db, "legacy"]})
        assert catalog_state(endpoint, db[0]) == before and store.contents(location) == files
        ns.deregister_table({"id": [*db, "legacy"]})  # adopt it: deregister, register again
        ns.register_table(RegisterTableRequest(id=[*db, "legacy"], location=location))
        ns.drop_table({"id": [*db, "legacy"]})
    assert not store.exists(location)


def test_a_location_that_is_a_symbolic_link_is_refused(
    ns: IcebergLanceNamespace, db: list[str], lance_root: Path
) -> None:
    real = lance_root / "ext" / "real.lance"
    lance.write_dataset(pa.table({"v": [1]}), str(real))
    os.symlink(real, lance_root / "ext" / "alias.lance")
    with pytest.raises(PermissionDeniedError, match="symbolic link"):
        ns.register_table(RegisterTableRequest(id=[*db, "t"], location=str(lance_root / "ext" / "alias.lance")))
    assert not (real / MARKER).exists()


@pytest.mark.parametrize("link_to", ["the table", "its namespace's directory"])
@pytest.mark.parametrize("request_to", ["register", "declare"])
def test_a_location_through_a_link_to_another_tables_place_never_touches_its_marker(
    ns: IcebergLanceNamespace, db: list[str], lance_root: Path, link_to: str, request_to: str
) -> None:
    """A link under the root leads to a live table, or to its namespace's directory: a register
    at the link (or at the link and the table's directory name) removed the table's marker, as
    though no entry held it any more (entries are found by the location's spelling), then claimed
    the place, and a delete through the new entry emptied the table. Refused before anything."""
    victim = [*db, "victim"]
    location = ns.create_table({"id": victim}, ipc(pa.table({"id": [1, 2, 3]}))).location
    marker = (Path(location) / MARKER).read_bytes()
    link = lance_root / db[0] / "alias.lance"
    os.symlink(location if link_to == "the table" else os.path.dirname(location), link)
    via = str(link) if link_to == "the table" else f"{link}/{os.path.basename(location)}"
    ask = {
        "register": lambda: ns.register_table(RegisterTableRequest(id=[*db, "thief"], location=via)),
        "declare": lambda: ns.declare_table({"id": [*db, "thief"], "location": via}),
    }[request_to]
    with pytest.raises(PermissionDeniedError, match="symbolic link"):
        ask()
    assert (Path(location) / MARKER).read_bytes() == marker
    with pytest.raises(TableNotFoundError):
        ns.describe_table({"id": [*db, "thief"]})
    assert ns.count_table_rows({"id": victim}).count == 3 and ns.describe_table({"id": victim}).location == location


def test_request_properties_cannot_move_the_catalogs_files(ns: IcebergLanceNamespace, db: list[str]) -> None:
    for key in ("write.metadata.path", "write.data.path", "write.object-storage.path", "location", "Location"):
        with pytest.raises(InvalidInputError, match="cannot be set"):
            ns.declare_table({"id": [*db, "t"], "properties": {key: "/tmp/elsewhere"}})
    with pytest.raises(InvalidInputError, match="the bridge's own"):
        ns.declare_table({"id": [*db, "t"], "properties": {"lance-iceberg-ns.create-id": "forged"}})
    with pytest.raises(TableNotFoundError):
        ns.describe_table(DescribeTableRequest(id=[*db, "t"]))


def test_import_directory_copies_a_source_outside_the_root_and_widens_nothing(
    ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    from lance_iceberg_ns.jobs.directory_import import COPIED, import_directory

    source = store.beside("directory")
    store.write_lance(f"{source}/events.lance", rows=1)
    summary = import_directory(ns, source, db, storage_options=store.storage_options)
    assert [t.outcome for t in summary.tables] == [COPIED]
    copied = ns.describe_table(DescribeTableRequest(id=[*db, "events"], load_detailed_metadata=True))
    assert copied.location == summary.tables[0].copied_to and copied.location.startswith(ns.settings.root)
    store.write_lance(f"{source}/later.lance", rows=1)
    with pytest.raises(PermissionDeniedError):
        ns.register_table(RegisterTableRequest(id=[*db, "later"], location=f"{source}/later.lance"))


def test_import_directory_copies_nothing_into_a_place_another_client_declared_first(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store
) -> None:
    from lance_iceberg_ns.jobs.directory_import import ALREADY_REGISTERED, CONFLICT, copy_location, import_directory

    source = store.beside("directory")
    lance.write_dataset(pa.table({"v": [1, 2]}), f"{source}/secret.lance", storage_options=store.storage_options)
    predicted = copy_location(ns, [*db, "secret"], f"{source}/secret.lance")
    with store.namespace(endpoint) as other:
        other.declare_table({"id": [*db, "mine"], "location": predicted})
        summary = import_directory(ns, source, db, storage_options=store.storage_options)
        assert [(t.outcome, t.copied_to) for t in summary.tables] == [(CONFLICT, predicted)]
        # nothing copied into the other table: its marker, and the catalog's metadata where it writes there
        assert {key.split("/")[0] for key in store.keys(predicted)} - {"metadata"} == {MARKER}
        assert other.describe_table({"id": [*db, "mine"], "check_declared": True}).is_only_declared
        with pytest.raises(TableNotFoundError):
            ns.describe_table(DescribeTableRequest(id=[*db, "secret"]))
        other.drop_table({"id": [*db, "mine"]})
        other.purge_table([*db, "mine"])
    imported = import_directory(ns, source, db, storage_options=store.storage_options)
    assert [t.outcome for t in imported.tables] == ["copied"]
    assert _read(ns, [*db, "secret"]) == [1, 2]
    imported = import_directory(ns, source, db, storage_options=store.storage_options)
    assert [t.outcome for t in imported.tables] == [ALREADY_REGISTERED]


def test_import_directory_copies_nothing_over_files_in_its_place(
    ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    from lance_iceberg_ns.jobs.directory_import import CONFLICT, copy_location, import_directory

    source = store.beside("directory")
    store.write_lance(f"{source}/t.lance", rows=1)
    predicted = copy_location(ns, [*db, "t"], f"{source}/t.lance")
    store.write(f"{predicted}/someone-elses.bin", b"x")
    before = store.contents(predicted)
    imported = import_directory(ns, source, db, storage_options=store.storage_options)
    assert [t.outcome for t in imported.tables] == [CONFLICT]
    assert store.contents(predicted) == before


def test_an_import_whose_name_another_client_takes_meanwhile_is_a_conflict(
    ns: IcebergLanceNamespace, db: list[str], store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lance_iceberg_ns.jobs.directory_import import CONFLICT, copy_location, import_directory

    source = store.beside("directory")
    store.write_lance(f"{source}/t.lance", rows=1)
    theirs = _write(ns, [*db, "t"], [7])

    def not_yet_taken(request: object) -> None:  # the name is taken right after the import looked
        raise TableNotFoundError("no table")

    monkeypatch.setattr(ns, "describe_table", not_yet_taken)
    summary = import_directory(ns, source, db, storage_options=store.storage_options)
    assert [t.outcome for t in summary.tables] == [CONFLICT] and "already exists" in summary.tables[0].reason
    assert not store.exists(copy_location(ns, [*db, "t"], f"{source}/t.lance"))
    monkeypatch.undo()
    assert ns.describe_table(DescribeTableRequest(id=[*db, "t"])).location == theirs
    assert _read(ns, [*db, "t"]) == [7]


def test_a_failed_import_copy_takes_back_only_what_it_wrote(
    ns: IcebergLanceNamespace, db: list[str], store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lance_iceberg_ns.jobs import directory_import
    from lance_iceberg_ns.jobs.directory_import import copy_location, import_directory

    source = store.beside("directory")
    store.write_lance(f"{source}/t.lance", rows=1)
    store.write_lance(f"{source}/t.lance", rows=1, mode="append")
    predicted = copy_location(ns, [*db, "t"], f"{source}/t.lance")
    copied: list[str] = []
    real_copy = directory_import._copy_file

    def copy_then_fail(*arguments: Any) -> None:
        if copied:  # meanwhile someone writes into the place; then the disk fills up
            store.write(f"{predicted}/theirs.bin", b"x")
            raise OSError("No space left on device")
        real_copy(*arguments)
        copied.append(arguments[-2])

    monkeypatch.setattr(directory_import, "_copy_file", copy_then_fail)
    with pytest.raises(OSError, match="No space left"):
        import_directory(ns, source, db, storage_options=store.storage_options)
    assert copied and not store.exists(copied[0])
    assert list(store.keys(predicted)) == ["theirs.bin"]  # no marker either
    with pytest.raises(TableNotFoundError):
        ns.describe_table(DescribeTableRequest(id=[*db, "t"]))
    assert ns.list_tables({"id": db, "include_declared": True}).tables == []


@pytest.mark.parametrize("layout", ["v1", "v2"])
def test_import_directory_skips_a_table_directory_that_links_elsewhere(
    ns: IcebergLanceNamespace, db: list[str], tmp_path: Path, layout: str
) -> None:
    import shutil

    import lance.namespace

    from lance_iceberg_ns.jobs.directory_import import SKIPPED, import_directory

    victim = _write(ns, [*db, "payroll"], [42])
    source = tmp_path / "directory"
    source.mkdir()
    if layout == "v1":
        os.symlink(victim, source / "harmless.lance")
        name = ["harmless"]
    else:
        directory = lance.namespace.DirectoryNamespace(root=str(source))
        directory.create_namespace(CreateNamespaceRequest(id=["prod"]))
        name = ["prod", "harmless"]
        lance.write_dataset(pa.table({"v": [0]}), namespace_client=directory, table_id=name)
        place = directory.describe_table(DescribeTableRequest(id=name)).location.removeprefix("file://")
        shutil.rmtree(place)
        os.symlink(victim, place)
    summary = import_directory(ns, str(source), [db[0], "public"])
    assert [(t.source, t.outcome) for t in summary.tables] == [(name, SKIPPED)]
    assert "symbolic link" in summary.tables[0].reason
    assert ns.list_tables({"id": [db[0], "public"], "include_declared": True}).tables == []


@pytest.mark.parametrize("scheme", ["", "file://"], ids=["path", "file_uri"])  # V2 directories name file:// URIs
def test_import_directory_copies_no_file_that_resolves_outside_its_table(tmp_path: Path, scheme: str) -> None:
    from lance_iceberg_ns.jobs.directory_import import copy_dataset

    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "payroll.bin").write_bytes(b"secret")
    source = tmp_path / "directory" / "t.lance"
    lance.write_dataset(pa.table({"v": [1]}), str(source))
    os.symlink(secret, source / "data" / "linked")  # a link inside the table
    os.symlink(secret / "payroll.bin", source / "_versions" / "9.manifest")
    written = copy_dataset(f"{scheme}{source}", {}, str(tmp_path / "copy.lance"), {})
    assert written and not [path for path in written if "linked" in path or "9.manifest" in path]
    assert lance.dataset(str(tmp_path / "copy.lance")).to_table().column("v").to_pylist() == [1]
    with pytest.raises(InvalidInputError, match="already holds files"):  # never over what is there
        copy_dataset(f"{scheme}{source}", {}, str(tmp_path / "copy.lance"), {})


def test_import_directory_follows_no_link_swapped_in_after_its_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file or directory replaced by a symbolic link between the listing's checks and the copy
    is not followed: each file is opened one component at a time, none of them a link."""
    from lance_iceberg_ns.jobs import directory_import

    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "payroll.bin").write_bytes(b"secret")
    source = tmp_path / "directory" / "t.lance"
    lance.write_dataset(pa.table({"v": [1]}), str(source))
    os.symlink(secret, source / "data" / "linked")  # a directory swapped for a link
    os.symlink(secret / "payroll.bin", source / "_versions" / "9.manifest")  # a file swapped for a link
    monkeypatch.setattr(directory_import, "_behind_link", lambda top, relative: False)  # checked before the swap
    written = directory_import.copy_dataset(str(source), {}, str(tmp_path / "copy.lance"), {})
    assert written and not [path for path in written if "linked" in path or "9.manifest" in path]
    copied = [path.read_bytes() for path in (tmp_path / "copy.lance").rglob("*") if path.is_file()]
    assert b"secret" not in copied
    assert lance.dataset(str(tmp_path / "copy.lance")).to_table().column("v").to_pylist() == [1]


@pytest.mark.parametrize("swapped_for", ["pipe", "directory"])
def test_import_directory_copies_around_a_file_swapped_for_a_pipe_or_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swapped_for: str
) -> None:
    """A pipe put in a file's place after the listing would block the copy for good, waiting for
    a writer; a directory would abort it: either is left out, like a link."""
    import threading

    from lance_iceberg_ns.jobs import directory_import

    source = tmp_path / "directory" / "t.lance"
    lance.write_dataset(pa.table({"v": [1]}), str(source))
    (source / "data" / "extra.bin").write_bytes(b"extra")
    checked = directory_import._behind_link

    def swap_after_the_check(top: str, relative: str) -> bool:
        if relative == "data/extra.bin":
            (source / "data" / "extra.bin").unlink()
            if swapped_for == "pipe":
                os.mkfifo(source / "data" / "extra.bin")
            else:
                (source / "data" / "extra.bin").mkdir()
        return checked(top, relative)

    monkeypatch.setattr(directory_import, "_behind_link", swap_after_the_check)
    copies: list[list[str]] = []
    copying = threading.Thread(
        target=lambda: copies.append(directory_import.copy_dataset(str(source), {}, str(tmp_path / "copy.lance"), {})),
        daemon=True,
    )
    copying.start()
    copying.join(timeout=60)
    assert not copying.is_alive(), "the copy waits on the pipe"
    assert copies and not [path for path in copies[0] if "extra.bin" in path]
    assert lance.dataset(str(tmp_path / "copy.lance")).to_table().column("v").to_pylist() == [1]


def test_a_copy_failing_part_way_through_a_file_takes_that_file_back(
    ns: IcebergLanceNamespace, db: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lance_iceberg_ns.jobs.directory_import import copy_location, import_directory

    source = tmp_path / "directory"
    lance.write_dataset(pa.table({"v": [1]}), str(source / "t.lance"))
    predicted = Path(copy_location(ns, [*db, "t"], str(source / "t.lance")))

    def disk_full_half_way(reading: Any, writing: Any, _chunk: int) -> None:
        writing.write(reading.read(8))
        raise OSError("No space left on device")

    monkeypatch.setattr(files.shutil, "copyfileobj", disk_full_half_way)
    with pytest.raises(OSError, match="No space left"):
        import_directory(ns, str(source), db)
    assert not predicted.exists() or files_under(predicted) == {}
    monkeypatch.undo()
    summary = import_directory(ns, str(source), db)  # nothing left behind: the next run copies it
    assert [t.outcome for t in summary.tables] == ["copied"]


# --- one purge job per warehouse -----------------------------------------------------------------


def test_list_and_purge_cover_every_namespace_of_a_warehouse(
    ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    warehouse = db[0]
    child = [*db, "child"]
    sibling = [warehouse, "sibling"]
    ns.create_namespace({"id": child})
    ns.create_namespace({"id": sibling})
    locations = {}
    for namespace in (db, child, sibling):
        table_id = [*namespace, "t"]
        locations[tuple(table_id)] = _write(ns, table_id, [1])
        ns.drop_table({"id": table_id})
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    listed = ns.list_purgable_tables([warehouse], deleted_before=later)
    assert sorted(tuple(p.id) for p in listed) == sorted(locations)
    assert ns.list_purgable_tables([warehouse]) != [] and ns.purge_tables(namespace_id=[warehouse]) == []  # TTL
    purged = ns.purge_tables(namespace_id=[warehouse], deleted_before=later)
    assert sorted(tuple(p) for p in purged) == sorted(locations)
    assert not any(store.exists(location) for location in locations.values())


@pytest.mark.usefixtures("store")
def test_an_entry_made_at_another_tables_location_reads_none_of_its_metadata(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str
) -> None:
    """Every dataset the bridge opens goes through the one opener, which proves ownership: the
    metadata reads (detailed describe, exists at a version, versions, the dataset itself) too."""
    location = _write(ns, [*db, "t"], [1, 2])
    other_client(endpoint, db[0]).create_table(
        (*db[1:], "impostor"), schema=companion_table_schema(), location=location, properties={"table_type": "lance"}
    )
    impostor = [*db, "impostor"]
    reads = {
        "describe": lambda: ns.describe_table({"id": impostor, "load_detailed_metadata": True}),
        "exists at a version": lambda: ns.table_exists({"id": impostor, "version": 1}),
        "versions": lambda: ns.list_table_versions({"id": impostor}),
        "a version": lambda: ns.describe_table_version({"id": impostor, "version": 1}),
        "the dataset": lambda: ns.dataset(impostor),
    }
    for what, read in reads.items():
        with pytest.raises(PermissionDeniedError, match="belongs to another table"):
            read()
            pytest.fail(f"{what} read another table's metadata")
    assert ns.dataset([*db, "t"]).count_rows() == 2  # the owner's own reads go through
    assert ns.describe_table({"id": [*db, "t"], "load_detailed_metadata": True}).version == 1
    with pytest.raises(InvalidInputError):
        ns.dataset("t")  # type: ignore[arg-type]  # a string is not an identifier
