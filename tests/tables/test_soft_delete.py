"""Soft delete on the Iceberg catalog: DROP, UNDROP, PURGE, TTL, the purge/revive race, and a trash
that keeps no namespace from being dropped."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import lance
import pytest
from lance_namespace import (
    CreateNamespaceRequest,
    DescribeTableRequest,
    DropNamespaceRequest,
    DropTableRequest,
    ListTablesRequest,
)
from lance_namespace.errors import (
    InvalidTableStateError,
    NamespaceNotEmptyError,
    NamespaceNotFoundError,
    PermissionDeniedError,
    TableAlreadyExistsError,
    TableNotFoundError,
)

from lance_iceberg_ns import IcebergLanceNamespace, companion_table_schema
from lance_iceberg_ns.identifiers import TRASH_NAMESPACE
from lance_iceberg_ns.storage import files, ownership
from lance_iceberg_ns.tables.tombstones import TrashName

from ..conftest import RequestCounter
from ..helpers import other_client, together
from ..helpers import write_values as _write
from ..stores import Store

pytestmark = pytest.mark.usefixtures("store")  # every test on a local disk and on S3


def _written_then_dropped(ns: IcebergLanceNamespace, table_id: list[str]) -> str:
    """A table written with two rows and soft-deleted: its location."""
    location = _write(ns, table_id, [1, 2])
    ns.drop_table(DropTableRequest(id=table_id))
    return location


def test_drop_hides_the_table_keeps_the_data_and_undrop_brings_it_back(
    ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    table_id = [*db, "t"]
    location = _write(ns, table_id, [1, 2, 3])
    _write(ns, table_id, [4], mode="append")
    ns.drop_table(DropTableRequest(id=table_id))

    assert ns.list_tables(ListTablesRequest(id=db)).tables == []
    with pytest.raises(TableNotFoundError):
        ns.describe_table(DescribeTableRequest(id=table_id))
    with pytest.raises(TableNotFoundError):
        ns.table_exists({"id": table_id})
    with pytest.raises(TableNotFoundError):
        lance.dataset(namespace_client=ns, table_id=table_id)
    assert store.dataset(location).count_rows() == 4  # the data is intact
    status = ns.table_status(table_id)
    assert status.state == "soft_deleted" and status.deleted_at is not None

    ns.undrop_table(table_id)
    restored = lance.dataset(namespace_client=ns, table_id=table_id)
    assert (restored.version, restored.count_rows()) == (2, 4)
    assert ns.table_status(table_id).state == "exists"
    assert ns.list_tables(ListTablesRequest(id=db)).tables == ["t"]


def test_undrop_without_a_soft_deleted_table_or_over_a_live_one(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, tmp_path: Path
) -> None:
    with pytest.raises(TableNotFoundError):
        ns.undrop_table([*db, "never"])
    _write(ns, [*db, "t"], [1])
    ns.drop_table(DropTableRequest(id=[*db, "t"]))
    # meanwhile another client registers a new Lance table under the name
    other_client(endpoint, db[0]).create_table(
        (*db[1:], "t"),
        schema=companion_table_schema(),
        location=str(tmp_path / "new"),
        properties={"table_type": "lance"},
    )
    with pytest.raises(TableAlreadyExistsError):
        ns.undrop_table([*db, "t"])
    assert ns.table_status([*db, "t"]).state == "exists"
    assert len(ns.list_purgable_tables(db)) == 1  # the soft-deleted one is still there, untouched


def test_recreate_over_a_soft_deleted_table_makes_a_new_one_and_keeps_the_old_restorable(
    ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    table_id = [*db, "t"]
    location = _written_then_dropped(ns, table_id)
    declared = ns.declare_table({"id": table_id})  # a new table, at a location of its own
    assert declared.location != location
    _write(ns, table_id, [9], mode="overwrite")
    assert lance.dataset(namespace_client=ns, table_id=table_id).to_table().column("v").to_pylist() == [9]
    assert store.dataset(location).count_rows() == 2 and ns.list_purgable_tables(db)[0].id == table_id


def test_drop_then_purge_deletes_the_data(ns: IcebergLanceNamespace, db: list[str], store: Store) -> None:
    table_id = [*db, "t"]
    location = _write(ns, table_id, [1])
    ns.drop_table(DropTableRequest(id=table_id))
    assert ns.purge_table(table_id) == 1
    assert not store.exists(location)
    assert ns.table_status(table_id).state == "not_found"
    with pytest.raises(TableNotFoundError):
        ns.undrop_table(table_id)
    ns.drop_namespace(DropNamespaceRequest(id=db))


def test_purge_never_touches_a_live_table(ns: IcebergLanceNamespace, db: list[str], store: Store) -> None:
    location = _write(ns, [*db, "live"], [1])
    with pytest.raises(InvalidTableStateError) as caught:
        ns.purge_table([*db, "live"])
    assert caught.value.code == 19
    with pytest.raises(TableNotFoundError):
        ns.purge_table([*db, "absent"])
    assert store.dataset(location).count_rows() == 1


def test_ttl_decides_what_purge_tables_reclaims(endpoint: str, store: Store, db: list[str]) -> None:
    properties = {**store.properties, "soft_delete_ttl": "1h"}
    with IcebergLanceNamespace(endpoint=endpoint, root=store.root, **properties) as ns:
        for name in ("a", "b"):
            _write(ns, [*db, name], [1])
            ns.drop_table(DropTableRequest(id=[*db, name]))
        assert ns.purge_tables(namespace_id=db) == []  # within the TTL
        assert [p.id[-1] for p in ns.list_purgable_tables(db)] == ["a", "b"]
        later = datetime.now(timezone.utc) + timedelta(hours=2)
        assert [p.id[-1] for p in ns.list_purgable_tables(db, deleted_before=later)] == ["a", "b"]
        assert sorted(p[-1] for p in ns.purge_tables(namespace_id=db, deleted_before=later)) == ["a", "b"]
        assert ns.list_purgable_tables(db) == []


def test_a_namespace_whose_tables_were_all_dropped_is_empty_and_drops(ns: IcebergLanceNamespace, db: list[str]) -> None:
    """What a client that drops every table, then the namespace, expects; the soft-deleted tables
    stay in the warehouse's trash, listed and purgeable by the namespace they came from."""
    for name in ("a", "b"):
        _write(ns, [*db, name], [1])
        ns.drop_table(DropTableRequest(id=[*db, name]))
    assert ns.list_tables(ListTablesRequest(id=db)).tables == []
    assert ns.list_namespaces({"id": db}).namespaces == []
    ns.drop_namespace(DropNamespaceRequest(id=db))
    assert ns.list_namespaces({"id": db[:1]}).namespaces == []  # the trash is no child to Lance either
    assert [p.id for p in ns.list_purgable_tables(db)] == [[*db, "a"], [*db, "b"]]
    assert ns.table_status([*db, "a"]).state == "soft_deleted"
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    assert sorted(ns.purge_tables(namespace_id=db, deleted_before=later)) == [[*db, "a"], [*db, "b"]]
    with pytest.raises(NamespaceNotFoundError):  # gone, and nothing soft-deleted comes from it any more
        ns.list_purgable_tables(db)


def test_a_table_of_a_dropped_namespace_comes_back_once_the_namespace_exists_again(
    ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    table_id = [*db, "t"]
    location = _written_then_dropped(ns, table_id)
    ns.drop_namespace(DropNamespaceRequest(id=db))
    with pytest.raises(NamespaceNotFoundError, match="create it again"):
        ns.undrop_table(table_id)
    assert ns.table_status(table_id).state == "soft_deleted" and store.dataset(location).count_rows() == 2
    ns.create_namespace(CreateNamespaceRequest(id=db))
    ns.undrop_table(table_id)
    assert lance.dataset(namespace_client=ns, table_id=table_id).count_rows() == 2


def test_a_namespace_with_a_live_table_is_still_not_empty(ns: IcebergLanceNamespace, db: list[str]) -> None:
    _write(ns, [*db, "kept"], [1])
    _write(ns, [*db, "dropped"], [1])
    ns.drop_table(DropTableRequest(id=[*db, "dropped"]))
    with pytest.raises(NamespaceNotEmptyError):
        ns.drop_namespace(DropNamespaceRequest(id=db))


def test_plain_iceberg_clients_do_not_see_tombstones_as_tables(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str
) -> None:
    _write(ns, [*db, "t"], [1])
    ns.drop_table(DropTableRequest(id=[*db, "t"]))
    spark_like = other_client(endpoint, db[0])
    assert spark_like.list_tables(tuple(db[1:])) == []
    assert spark_like.list_namespaces(tuple(db[1:])) == []
    assert (TRASH_NAMESPACE,) in spark_like.list_namespaces()  # one namespace, at the warehouse's top
    trash = spark_like.list_tables((TRASH_NAMESPACE,))
    assert len(trash) == 1 and TrashName.parse(trash[0][-1]) is not None


def test_a_reader_keeps_reading_across_a_soft_delete(ns: IcebergLanceNamespace, db: list[str]) -> None:
    table_id = [*db, "t"]
    _write(ns, table_id, list(range(100)))
    reader = lance.dataset(namespace_client=ns, table_id=table_id)
    ns.drop_table(DropTableRequest(id=table_id))
    assert reader.count_rows() == 100 and reader.to_table().num_rows == 100


def test_soft_deleted_tables_cost_listings_nothing(
    ns: IcebergLanceNamespace, db: list[str], request_counter: RequestCounter
) -> None:
    for i in range(3):
        _write(ns, [*db, f"live{i}"], [i])
    ns.list_tables(ListTablesRequest(id=db))
    request_counter.reset()
    ns.list_tables(ListTablesRequest(id=db))
    without = request_counter.count
    for i in range(5):
        _write(ns, [*db, f"gone{i}"], [i])
        ns.drop_table(DropTableRequest(id=[*db, f"gone{i}"]))
    request_counter.reset()
    assert ns.list_tables(ListTablesRequest(id=db)).tables == ["live0", "live1", "live2"]
    assert request_counter.count == without == 1
    request_counter.reset()
    assert len(ns.list_purgable_tables(db)) == 5
    # the child namespaces, the warehouse's trash, and one loadTable per tombstone (side by side):
    # each is read for where it was dropped from, and checked to be one the bridge made, whose
    # location's marker names it
    assert request_counter.count == 2 + 5


def _race(first: Callable[[], object], second: Callable[[], object]) -> list[object]:
    """The two actions started at once; each one's result, or its (the loser's) failure."""
    return together(2, lambda index: (first, second)[index](), timeout=60)


ITERATIONS = {"disk": 200, "s3": 60}  # each round writes a dataset: an S3 round takes several times longer


def test_purge_racing_undrop_has_exactly_one_winner_and_never_loses_revived_data(
    ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    table_id = [*db, "raced"]
    location = _write(ns, table_id, [1, 2, 3])
    wins = {"purge": 0, "undrop": 0}
    for _ in range(ITERATIONS[store.kind]):
        if ns.table_status(table_id).state == "not_found":
            location = _write(ns, table_id, [1, 2, 3])
        ns.drop_table(DropTableRequest(id=table_id))
        purged, undropped = _race(lambda: ns.purge_table(table_id), lambda: ns.undrop_table(table_id))
        purge_won = purged == 1
        undrop_won = not isinstance(undropped, Exception)
        assert purge_won != undrop_won, (purged, undropped)
        if undrop_won:
            assert ns.table_status(table_id).state == "exists"
            assert lance.dataset(namespace_client=ns, table_id=table_id).count_rows() == 3  # data survived
            # the purge found the tombstone gone (0), or, when the undrop had finished before it
            # looked, a live table it must not touch
            assert purged == 0 or isinstance(purged, InvalidTableStateError), purged
        else:
            assert isinstance(undropped, TableNotFoundError)
            assert ns.table_status(table_id).state == "not_found" and not store.exists(location)
        wins["purge" if purge_won else "undrop"] += 1
    assert sum(wins.values()) == ITERATIONS[store.kind]


def test_purge_racing_a_new_table_of_the_name_never_touches_it(
    ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    table_id = [*db, "recreated"]
    for _ in range(ITERATIONS[store.kind] // 4):
        old_location = _write(ns, table_id, [7, 8])
        ns.drop_table(DropTableRequest(id=table_id))
        purged, declared = _race(lambda: ns.purge_table(table_id), lambda: ns.declare_table({"id": table_id}))
        assert purged == 1 and not isinstance(declared, Exception), (purged, declared)
        assert declared.location != old_location and not store.exists(old_location)  # type: ignore[union-attr]
        _write(ns, table_id, [7, 8], mode="overwrite")  # the new table, whole and usable
        assert lance.dataset(namespace_client=ns, table_id=table_id).count_rows() == 2
        ns.drop_table(DropTableRequest(id=table_id))
        assert ns.purge_table(table_id) == 1


def _record_deletions(
    store: Store, location: str, monkeypatch: pytest.MonkeyPatch, check: Callable[[], None]
) -> list[str]:
    """The entries of ``location`` in the order the bridge deletes them (on a disk each directory it
    removes whole, on S3 the first part of each key it deletes), ``check`` run before each deletion."""
    removed: list[str] = []
    if store.kind == "disk":
        rmtree = shutil.rmtree

        def recording_rmtree(path: str, *args: Any, **kwargs: Any) -> None:
            check()
            removed.append(os.path.basename(path))
            rmtree(path, *args, **kwargs)

        monkeypatch.setattr(shutil, "rmtree", recording_rmtree)
        return removed
    _, prefix = files.object_store(location, store.storage_options)
    delete = files.obstore.delete

    def recording_delete(object_store: Any, paths: str | list[str], *args: Any, **kwargs: Any) -> None:
        check()
        for path in [paths] if isinstance(paths, str) else list(paths):
            entry = path.removeprefix(prefix + "/").split("/")[0]
            if not removed or removed[-1] != entry:
                removed.append(entry)
        delete(object_store, paths, *args, **kwargs)

    monkeypatch.setattr(files.obstore, "delete", recording_delete)
    return removed


def test_a_purge_deletes_the_manifests_then_the_marker_last(
    ns: IcebergLanceNamespace, db: list[str], store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Until everything else is gone the location stays owned, so nobody can declare a table there
    while the purge is still deleting."""
    table_id = [*db, "ordered"]
    location = _written_then_dropped(ns, table_id)

    def still_owned() -> None:
        assert ns.table_status(table_id).state == "not_found"
        with pytest.raises(PermissionDeniedError):  # the location is still owned
            ns.declare_table({"id": [*db, "squatter"], "location": location})

    entries = {key.split("/")[0] for key in store.keys(location)}  # the catalog's metadata/ where it writes there
    removed = _record_deletions(store, location, monkeypatch, still_owned)
    assert ns.purge_table(table_id) == 1
    monkeypatch.undo()
    assert "data" in removed and removed.index("_versions") > removed.index("data"), removed
    if "metadata" in entries:
        assert removed.index("metadata") > removed.index("_versions"), removed
    if store.kind == "s3":  # on a disk the marker is a file, removed without rmtree
        last = removed[removed.index(ownership.MARKER) :]  # the marker, wherever a store keeps it, goes last
        assert set(last) <= {ownership.MARKER, ownership.MARKER_DIRECTORY}, removed
    assert not store.exists(location)


def test_a_client_the_store_refuses_is_told_so_never_that_a_soft_deleted_table_is_gone(
    ns: IcebergLanceNamespace, db: list[str], store: Store, endpoint: str
) -> None:
    """Without the store's credentials a client cannot prove a tombstone's location is its own, nor
    that it is another's: status, undrop and purge say the store refused it (PermissionDenied), not
    "not found" nor "not made by this bridge"; a listing keeps the table, marked as unreadable."""
    if store.kind != "s3":
        pytest.skip("a local disk asks for no credentials")
    table_id = [*db, "t"]
    location = _written_then_dropped(ns, table_id)
    wrong = {**store.properties, "storage.aws_secret_access_key": "not-the-SECRET"}
    with IcebergLanceNamespace(endpoint=endpoint, root=store.root, **wrong) as refused:
        for step in (refused.table_status, refused.undrop_table, refused.purge_table):
            with pytest.raises(PermissionDeniedError) as raised:
                step(table_id)
            assert "not made by this bridge" not in str(raised.value) and "SECRET" not in str(raised.value)
        [listed] = refused.list_purgable_tables(db)
        assert listed.id == table_id and listed.foreign is None and "cannot be read" in (listed.unreadable or "")
        report = refused.purge_tables(namespace_id=db, deleted_before=datetime.now(timezone.utc))  # due: left whole
        assert report == [] and [skipped.reason.split(":")[0] for skipped in report.skipped] == ["location unreadable"]
    assert ns.table_status(table_id).state == "soft_deleted" and store.dataset(location).count_rows() == 2
    ns.undrop_table(table_id)
    assert ns.table_status(table_id).state == "exists"
