"""What a managed table's versions may point at: only manifests of the table's own ``_versions/``.
A client cannot point its table's version at another table's manifest or at any other path, a
file planted in ``_versions/`` is refused by name (never a 500) and never adopted, and a commit
refused because a writer by location raced it is a 409."""

from __future__ import annotations

import contextlib
import os
from datetime import timedelta
from typing import Any

import lance
import pyarrow as pa
import pytest
import requests
from lance_namespace.errors import (
    ConcurrentModificationError,
    InternalError,
    InvalidInputError,
    InvalidTableStateError,
    ServiceUnavailableError,
    UnsupportedOperationError,
)

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.errors.pylance import pylance_failures
from lance_iceberg_ns.jobs import adoption
from lance_iceberg_ns.jobs.adoption import adopt_versions_written_by_location, answer_after_adopting
from lance_iceberg_ns.jobs.atomic import write_together
from lance_iceberg_ns.storage import files
from lance_iceberg_ns.versions import manifests, operations, refusals
from lance_iceberg_ns.versions.manifests import manifest_name

from ..helpers import ipc
from ..stores import Store
from .stored import as_pylance_spells, iceberg_client, stage_manifest, staged_manifests

WRITTEN_BY_LOCATION = "written by a writer that went by its location"


def _create(ns: IcebergLanceNamespace, table_id: list[str], values: list[Any]) -> str:
    return str(lance.write_dataset(pa.table({"v": values}), namespace_client=ns, table_id=table_id).uri)


def _versions(ns: IcebergLanceNamespace, table_id: list[str]) -> list[int]:
    return [v.version for v in ns.list_table_versions({"id": table_id}).versions]


def _rows(ns: IcebergLanceNamespace, table_id: list[str]) -> list[Any]:
    return sorted(lance.dataset(namespace_client=ns, table_id=table_id).to_table()["v"].to_pylist())


def _plant(store: Store, location: str, version: int, content: bytes, v2: bool = True) -> str:
    path = f"{location}/_versions/{manifest_name(version, v2)}"
    store.write(path, content)
    return path


def _by_location(store: Store, location: str, values: list[Any]) -> None:
    """An append by a writer that goes by the table's location, not through the namespace."""
    lance.write_dataset(pa.table({"v": values}), location, mode="append", storage_options=store.storage_options)


def test_a_version_names_only_a_staged_manifest_of_the_tables_own_versions_directory(
    managed_ns: IcebergLanceNamespace, server: Any, db: list[str], store: Store
) -> None:
    mine, victim = [*db, "mine"], [*db, "victim"]
    location = _create(managed_ns, mine, ["mine"])
    victim_location = _create(managed_ns, victim, ["VICTIM-1", "VICTIM-2"])
    victim_staged = stage_manifest(store, victim_location, 2)
    victim_final = f"{victim_location}/_versions/{manifest_name(1)}"
    wrong_version = stage_manifest(store, location, 3)
    missing = f"{location}/_versions/{manifest_name(2)}-00000000-0000-0000-0000-000000000000"
    for path in (
        victim_staged,  # another table's staged manifest of the right version
        as_pylance_spells(victim_staged),
        f"{location}/../{os.path.basename(victim_location)}/_versions/{os.path.basename(victim_staged)}",
        victim_final,
        "../../../../etc/passwd",
        "a",
        "",
        "a\x00b",
        missing,  # the table's own directory, but nothing staged there
        wrong_version,  # staged, but for another version
        f"{location}/_versions/{manifest_name(2)}-not-a-uuid",
    ):
        with pytest.raises(InvalidInputError):
            managed_ns.create_table_version({"id": mine, "version": 2, "manifest_path": path})
        with pytest.raises(InvalidInputError):
            managed_ns.batch_create_table_versions({"entries": [{"id": mine, "version": 2, "manifest_path": path}]})
    answer = requests.post(
        f"{server.uri}/v1/table/{'$'.join(mine)}/version/create",
        json={"version": 2, "manifest_path": as_pylance_spells(victim_staged)},
        timeout=30,
    )
    assert (answer.status_code, answer.json()["code"]) == (400, 13), answer.text
    # nothing changed: each table keeps its versions and rows, the victim's staged manifest stays
    assert _versions(managed_ns, mine) == [1] and _rows(managed_ns, mine) == ["mine"]
    assert _versions(managed_ns, victim) == [1] and store.exists(victim_staged)
    count = requests.post(f"{server.uri}/v1/table/{'$'.join(mine)}/count_rows", json={}, timeout=30)
    assert (count.status_code, count.json()) == (200, 1), count.text

    # what pylance sends (the table's own staged manifest) is taken, and recorded and answered in
    # the table's own _versions/ as pylance names it; so is any spelling of that directory
    lance.write_dataset(pa.table({"v": ["more"]}), namespace_client=managed_ns, table_id=mine, mode="append")
    assert _rows(managed_ns, mine) == ["mine", "more"]
    own = f"{as_pylance_spells(location)}/_versions"
    assert managed_ns.describe_table_version({"id": mine}).version.manifest_path == f"{own}/{manifest_name(2)}"
    spelled = f"/{as_pylance_spells(location)}/./_versions/{os.path.basename(stage_manifest(store, location, 3))}"
    answered = managed_ns.create_table_version({"id": mine, "version": 3, "manifest_path": spelled})
    assert answered.version.manifest_path == f"{own}/{manifest_name(3)}"
    assert [v.manifest_path for v in managed_ns.list_table_versions({"id": mine}).versions][
        -1
    ] == answered.version.manifest_path


def test_a_manifest_planted_under_the_other_naming_scheme_is_refused_by_name(
    managed_ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    table_id = [*db, "planted"]
    location = _create(managed_ns, table_id, [1, 2])
    planted = _plant(store, location, 2, b"x", v2=False)  # 2.manifest in a table that names its manifests V2
    for operation in (
        lambda: managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [3]}))),
        lambda: managed_ns.delete_from_table({"id": table_id, "predicate": "v = 1"}),
        lambda: managed_ns.alter_table_add_columns(
            {"id": table_id, "new_columns": [{"name": "w", "expression": "v * 2"}]}
        ),
        lambda: managed_ns.create_table_scalar_index({"id": table_id, "column": "v", "index_type": "BTREE"}),
        lambda: managed_ns.restore_table({"id": table_id, "version": 1}),
    ):
        with pytest.raises(InvalidTableStateError, match=WRITTEN_BY_LOCATION):
            operation()
    assert managed_ns.count_table_rows({"id": table_id}).count == 2  # reads still answer
    with pytest.raises(InvalidTableStateError, match=r"remove .*/_versions/2\.manifest"):
        adopt_versions_written_by_location(managed_ns, table_id)
    store.delete(planted)
    managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [3]})))
    assert _versions(managed_ns, table_id) == [1, 2] and _rows(managed_ns, table_id) == [1, 2, 3]


def test_adoption_records_each_version_as_it_goes_and_stops_at_a_planted_one(
    managed_ns: IcebergLanceNamespace, store: Store, db: list[str]
) -> None:
    """Versions 2 to 4 written by location, and a file planted as version 5: adoption records 2 to
    4 and refuses 5 by name. It used to record nothing until it had opened every version, so an
    adoption cut off by a server's request time kept nothing, and every request on the table
    began it again (800 versions took 37 s a request)."""
    table_id = [*db, "progress"]
    location = _create(managed_ns, table_id, [1])
    for value in (2, 3, 4):
        _by_location(store, location, [value])
    planted = _plant(store, location, 5, b"planted, not a manifest")
    with pytest.raises(InvalidTableStateError, match=r"remove .*/_versions/.*versions 2 to 4, before it, adopted"):
        adopt_versions_written_by_location(managed_ns, table_id)
    assert _versions(managed_ns, table_id) == [1, 2, 3, 4] and _rows(managed_ns, table_id) == [1, 2, 3, 4]
    store.delete(planted)
    managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [5]})))
    assert _versions(managed_ns, table_id) == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("again", [True, False], ids=["a read or insert", "a version's commit"])
@pytest.mark.parametrize("refused_by", ["the bridge", "pylance's commit", "the bridge, adopted meanwhile"])
def test_a_request_a_writer_by_location_overtakes_is_told_to_retry_once_the_server_adopted_its_version(
    managed_ns: IcebergLanceNamespace, store: Store, db: list[str], again: bool, refused_by: str
) -> None:
    """A server adopts what was written by location before it answers a request on the table, but
    a writer by location may commit after that look: the request's refusal as written by location
    (the bridge's own, or passed on by pylance from its commit through the namespace) advised
    running adoption, which the server then did itself, or another request did meanwhile (then
    the refusal stood, 409 code 19, with advice a REST client cannot follow). It is
    ConcurrentModification (retry), and the retry lands."""
    table_id = [*db, "overtaken"]
    location = _create(managed_ns, table_id, [1])

    def overtaken() -> Any:
        _by_location(store, location, [2])
        try:
            return managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [3]})))
        except InvalidTableStateError as refusal:
            if refused_by == "pylance's commit":  # as pylance passes it on, mapped by its words
                raise InvalidTableStateError(
                    f"insert_into_table: Namespace error: Invalid table state: {refusal}"
                ) from None
            if refused_by == "the bridge, adopted meanwhile":
                adopt_versions_written_by_location(managed_ns, table_id)  # another request's look
            raise

    answered = "version 2" if refused_by != "the bridge, adopted meanwhile" else "a version"
    with pytest.raises(
        (ConcurrentModificationError, OSError),
        match=rf"had {answered} committed outside the catalog.*catalog records it now.*retry",
    ):
        answer_after_adopting(managed_ns, table_id, overtaken, again)
    assert _versions(managed_ns, table_id) == [1, 2]
    answer_after_adopting(
        managed_ns, table_id, lambda: managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [3]})))
    )
    assert _versions(managed_ns, table_id) == [1, 2, 3] and _rows(managed_ns, table_id) == [1, 2, 3]


def test_a_refusal_whose_adoption_keeps_losing_to_other_adopters_is_a_retry_and_the_next_look_adopts(
    managed_ns: IcebergLanceNamespace, store: Store, db: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Server workers that meet adopt the same versions: the one whose commit another beats to the
    catalog looks again, and a writer by location may have committed once more by then. One that
    lost every time was taken as a refusal: the request's refusal stood (409 code 19, advising an
    adoption a REST client cannot run) and the version was not looked at again for a minute."""
    table_id = [*db, "contested"]
    location = _create(managed_ns, table_id, [1])
    create = managed_ns._versions.create_table_version
    adopting = {"on": False}
    beaten: list[int] = []

    def beaten_to_it(request: Any) -> Any:  # another adopter records it first; a writer goes on meanwhile
        if adopting["on"] and len(beaten) < adoption.ADOPTION_ATTEMPTS:
            beaten.append(request.version)
            create(request)
            _by_location(store, location, [10 + len(beaten)])
        return create(request)

    adopt = adoption.adopt_versions_written_by_location

    def adopting_now(*arguments: Any) -> Any:
        adopting["on"] = True
        try:
            return adopt(*arguments)
        finally:
            adopting["on"] = False

    monkeypatch.setattr(managed_ns._versions, "create_table_version", beaten_to_it)
    monkeypatch.setattr(adoption, "adopt_versions_written_by_location", adopting_now)

    def overtaken() -> Any:
        _by_location(store, location, [2])
        return managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [3]})))

    with pytest.raises(ConcurrentModificationError, match="retry"):
        answer_after_adopting(managed_ns, table_id, overtaken)
    assert beaten == [2, 3, 4]  # every look lost to another adopter
    answer_after_adopting(
        managed_ns, table_id, lambda: managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [3]})))
    )
    assert _versions(managed_ns, table_id) == [1, 2, 3, 4, 5, 6]
    assert _rows(managed_ns, table_id) == [1, 2, 3, 11, 12, 13]


def test_versions_an_engine_rolled_back_and_then_expired_are_adopted_at_once(
    managed_ns: IcebergLanceNamespace, store: Store, db: list[str], endpoint: str
) -> None:
    """An engine rolls main back, so adoption of the later version is refused (the rollback's way
    out: move main forward again); it then expires the snapshots it rolled back, and the catalog
    no longer knows the version on disk, which is then adopted before the next request as any
    version written by location (``restore_table`` brings back the rolled-back-to data). The
    refusal was kept for a minute whatever the catalog did, and every write in it was refused as
    written by location, with advice a REST client cannot follow: a refusal is kept only while the
    catalog's entry is unchanged."""
    table_id = [*db, "expired"]
    _create(managed_ns, table_id, [1])
    for value in (2, 3):
        managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [value]})))
    companion = iceberg_client(endpoint, db[0], store).load_table((db[1], "expired"))
    latest = companion.current_snapshot()
    assert latest is not None and latest.parent_snapshot_id is not None
    companion.manage_snapshots().rollback_to_snapshot(latest.parent_snapshot_id).commit()

    def insert() -> Any:
        return managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [4]})))

    with pytest.raises(InvalidTableStateError, match="moved back"):
        answer_after_adopting(managed_ns, table_id, insert)
    companion = iceberg_client(endpoint, db[0], store).load_table((db[1], "expired"))
    companion.maintenance.expire_snapshots().by_id(latest.snapshot_id).commit()
    answer_after_adopting(managed_ns, table_id, insert)  # version 3 adopted as written by location first
    assert _versions(managed_ns, table_id) == [1, 2, 3, 4]
    assert _rows(managed_ns, table_id) == [1, 2, 3, 4]


def test_a_refusal_as_written_by_location_whose_version_adoption_refuses_stands(
    managed_ns: IcebergLanceNamespace, store: Store, db: list[str]
) -> None:
    """A file planted as the next version: adoption refuses it, so retrying would not help; the
    answer is adoption's refusal, which names the way out (not the advice to adopt, which fails)."""
    table_id = [*db, "planted"]
    location = _create(managed_ns, table_id, [1])
    path = _plant(store, location, 2, b"planted, not a manifest")
    insert = lambda: managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [2]})))  # noqa: E731
    for _kept_or_not in range(2):  # found on the look, then as adoption's refusal kept
        with pytest.raises(InvalidTableStateError, match=f"remove {path}") as refused:
            answer_after_adopting(managed_ns, table_id, insert)
        assert "adopt_versions_written_by_location" not in str(refused.value)
    assert _versions(managed_ns, table_id) == [1]

    # the way out taken, and a writer by location commits a real version 2 under that very name within
    # the minute the refusal is kept: the next write is not told to remove it, and its retry lands
    store.delete(path)
    _by_location(store, location, [2])
    with contextlib.suppress(ConcurrentModificationError):  # "retry": version 2 recorded meanwhile
        answer_after_adopting(managed_ns, table_id, insert)
    if _versions(managed_ns, table_id) == [1, 2]:
        answer_after_adopting(managed_ns, table_id, insert)
    assert _versions(managed_ns, table_id) == [1, 2, 3]
    assert sorted(_rows(managed_ns, table_id)) == [1, 2, 2]


def test_an_insert_after_a_cleanup_by_location_removed_the_catalogs_version_says_so_from_the_first(
    managed_ns: IcebergLanceNamespace, store: Store, db: list[str]
) -> None:
    """A writer by location appends and then removes every older version, the one the catalog names
    among them: adoption cannot take the versions after it, and the answer to an insert is why (the
    version gone, and the way out), from the first insert on, never the advice to adopt."""
    table_id = [*db, "cleaned"]
    location = _create(managed_ns, table_id, [1])
    _by_location(store, location, [2])
    _by_location(store, location, [3])
    lance.dataset(location, storage_options=store.storage_options).cleanup_old_versions(older_than=timedelta(0))
    insert = lambda: managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [4]})))  # noqa: E731

    def raced() -> None:  # an insert that met version 2 as it was written, before the cleanup ran
        raise refusals.written_by_path_error(".".join(table_id[1:]), 2, 1)

    for answer in (raced, insert, raced):
        with pytest.raises(InvalidTableStateError, match="Version 1 of .* is gone") as refused:
            answer_after_adopting(managed_ns, table_id, answer)
        assert "adopt_versions_written_by_location" not in str(refused.value)
    assert lance.dataset(location, storage_options=store.storage_options).to_table()["v"].to_pylist() == [1, 2, 3]


def test_a_file_that_is_not_a_manifest_of_the_dataset_is_not_adopted(
    managed_ns: IcebergLanceNamespace, store: Store, db: list[str]
) -> None:
    table_id = [*db, "adopting"]
    location = _create(managed_ns, table_id, [1, 2])
    other = store.at("elsewhere.lance")
    for values in ([7], [8], [9]):
        _by_location(store, other, values)
    for planted in (
        b"planted, not a manifest",
        store.read(f"{other}/_versions/{manifest_name(2)}"),  # another dataset's version 2
    ):
        assert planted
        path = _plant(store, location, 2, planted)
        with pytest.raises(InvalidTableStateError, match=f"remove {path}"):
            adopt_versions_written_by_location(managed_ns, table_id)
        # the same file named directly, as adoption names it through the namespace: refused too
        with pytest.raises(InvalidTableStateError):
            managed_ns.create_table_version({"id": table_id, "version": 2, "manifest_path": path})
        assert _versions(managed_ns, table_id) == [1]  # nothing recorded
        store.delete(path)  # the way out the refusal names
        assert _rows(managed_ns, table_id) == [1, 2]
    managed_ns.restore_table({"id": table_id, "version": 1})
    managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [3]})))
    assert _versions(managed_ns, table_id) == [1, 2, 3] and _rows(managed_ns, table_id) == [1, 2, 3]

    # a version a writer by location really committed is still adopted, and opens
    store.delete(other)
    _by_location(store, location, [4])
    assert adopt_versions_written_by_location(managed_ns, table_id) == [4]
    assert _rows(managed_ns, table_id) == [1, 2, 3, 4]


def test_a_commit_a_writer_by_location_raced_is_a_409_naming_the_way_out(
    managed_ns: IcebergLanceNamespace, db: list[str], monkeypatch: pytest.MonkeyPatch, store: Store
) -> None:
    table_id = [*db, "raced"]
    location = _create(managed_ns, table_id, [1])
    create = managed_ns._versions.create_table_version
    raced: list[int] = []

    def racing(request: Any) -> Any:  # a writer by location commits between the check and the commit
        if not raced:
            raced.append(request.version)
            _by_location(store, location, [100])
        return create(request)

    monkeypatch.setattr(managed_ns._versions, "create_table_version", racing)
    with pytest.raises(InvalidTableStateError, match=WRITTEN_BY_LOCATION):
        managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [2]})))
    assert raced == [2] and _versions(managed_ns, table_id) == [1]


@pytest.mark.parametrize(
    ("batch", "step"),
    [(False, "finalize"), (True, "final_name_free"), (True, "finalize")],
    ids=["one table", "atomic batch, before its look", "atomic batch, its first table after its look"],
)
def test_a_writer_by_location_that_commits_the_version_after_the_catalog_did_keeps_it(
    managed_ns: IcebergLanceNamespace,
    db: list[str],
    endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
    batch: bool,
    step: str,
    store: Store,
) -> None:
    """The version's final manifest name is taken between the catalog's commit and the move into
    place: the writer's manifest stays as it landed, the catalog's commit is taken back (every table
    of a batch), and the writer's version is then refused by name until adopted."""
    table_id, other_id = [*db, "raced"], [*db, "other"]
    location = _create(managed_ns, table_id, [1])
    managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [3]})))  # the raced version takes over v1's list
    _create(managed_ns, other_id, [10])
    original = getattr(manifests, step)
    raced: list[str] = []

    def racing(place: str, *args: Any) -> Any:  # the writer by location lands right after the catalog commit
        if place == location and not raced:
            raced.append(place)
            _by_location(store, location, [100])
        return original(place, *args)

    monkeypatch.setattr(manifests, step, racing)
    with pytest.raises(InvalidTableStateError, match=WRITTEN_BY_LOCATION):
        if batch:  # the other table goes back too
            write_together(
                managed_ns, [(table_id, pa.table({"v": [2]}), "append"), (other_id, pa.table({"v": [11]}), "append")]
            )
        else:
            managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [2]})))
    monkeypatch.setattr(manifests, step, original)
    assert raced and sorted(store.dataset(location).to_table().column("v").to_pylist()) == [1, 3, 100]  # the writer's
    assert _versions(managed_ns, table_id) == [1, 2] and _versions(managed_ns, other_id) == [1]
    assert _rows(managed_ns, other_id) == [10]
    assert not staged_manifests(store, location)  # nothing staged left
    companion = iceberg_client(endpoint, db[0], store).load_table((db[1], "raced"))  # as an Iceberg engine sees it
    held = {os.path.basename(snapshot.manifest_list) for snapshot in companion.snapshots()}
    assert companion.current_snapshot().summary["lance.version"] == "2"
    assert {name for name in store.keys(f"{location}/metadata") if name.startswith("snap-")} == held
    with pytest.raises(InvalidTableStateError, match=WRITTEN_BY_LOCATION):
        managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [2]})))
    assert adopt_versions_written_by_location(managed_ns, table_id) == [3]
    managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [2]})))
    assert _rows(managed_ns, table_id) == [1, 2, 3, 100]


def test_a_name_taken_once_an_atomic_batch_moved_other_tables_into_place_leaves_every_version(
    managed_ns: IcebergLanceNamespace, db: list[str], monkeypatch: pytest.MonkeyPatch, store: Store
) -> None:
    """Taken after the batch's look, with the first table's version in place (where writers may
    already build on it): nothing goes back or is deleted, and the error is a 5xx (the commit landed)."""
    table_id, other_id = [*db, "raced"], [*db, "other"]
    location = _create(managed_ns, table_id, [1])
    _create(managed_ns, other_id, [10])
    finalize = manifests.finalize

    def racing(place: str, *args: Any) -> Any:
        if place == location:
            _by_location(store, location, [100])
        return finalize(place, *args)

    monkeypatch.setattr(manifests, "finalize", racing)
    with pytest.raises(InternalError, match="writer by location committed it too"):
        write_together(
            managed_ns, [(other_id, pa.table({"v": [11]}), "append"), (table_id, pa.table({"v": [2]}), "append")]
        )
    monkeypatch.setattr(manifests, "finalize", finalize)
    assert _rows(managed_ns, other_id) == [10, 11] and _versions(managed_ns, other_id) == [1, 2]
    assert sorted(store.dataset(location).to_table().column("v").to_pylist()) == [1, 100]  # the writer's version
    with pytest.raises(ConcurrentModificationError, match="at once"):  # while its writer may take it back
        _versions(managed_ns, table_id)
    monkeypatch.setattr(manifests, "CONTESTED_FOR_SECONDS", 0)  # a minute on
    assert _versions(managed_ns, table_id) == [1, 2]  # and the catalog's, its manifest staged


def test_a_reader_that_moved_the_staged_manifest_into_place_first_leaves_the_commit_as_it_is(
    managed_ns: IcebergLanceNamespace, db: list[str], monkeypatch: pytest.MonkeyPatch, store: Store
) -> None:
    """pylance, opening the table through the namespace between the catalog's commit and the move
    into place, copies the staged manifest to its final name itself: the same manifest, no race."""
    table_id = [*db, "read"]
    location = _create(managed_ns, table_id, [1])
    finalize = manifests.finalize

    def read_first(place: str, storage_options: Any, version: Any) -> Any:
        staged = f"{location}/_versions/{version.manifest_path.rsplit('/', 1)[-1]}"
        store.write(staged.rsplit("-", 5)[0], store.read(staged) or b"")  # the final name: without its UUID
        return finalize(place, storage_options, version)

    monkeypatch.setattr(manifests, "finalize", read_first)
    managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [2]})))
    monkeypatch.setattr(manifests, "finalize", finalize)
    assert _versions(managed_ns, table_id) == [1, 2] and _rows(managed_ns, table_id) == [1, 2]
    assert not staged_manifests(store, location)
    managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [3]})))
    assert _rows(managed_ns, table_id) == [1, 2, 3]


@pytest.mark.parametrize("asks", ["list_table_versions", "describe_table_version"])
def test_a_reader_between_the_catalogs_commit_and_the_move_never_lets_pylance_copy_over_a_writer_by_location(
    managed_ns: IcebergLanceNamespace, db: list[str], monkeypatch: pytest.MonkeyPatch, store: Store, asks: str
) -> None:
    """pylance copies a staged manifest it is handed into place over whatever holds the final name.
    A reader that opens the table through the namespace after the catalog committed version 2, and
    before the writer moved its manifest into place, is handed the final manifest (moved there for
    it), so that a writer by location that appends in the moment before pylance's copy commits
    version 3 and keeps it."""
    table_id = [*db, "read"]
    location = _create(managed_ns, table_id, [1])
    finalize, answer = manifests.finalize, getattr(managed_ns._versions, asks)
    by_location: list[int] = []

    def appends_after_the_answer(request: Any) -> Any:
        answered = answer(request)
        if not by_location:
            by_location.append(
                lance.write_dataset(
                    pa.table({"v": [100]}), location, mode="append", storage_options=store.storage_options
                ).version
            )
        return answered

    def read_first(place: str, storage_options: Any, version: Any) -> Any:
        with monkeypatch.context() as reading:
            reading.setattr(managed_ns._versions, asks, appends_after_the_answer)
            if asks == "list_table_versions":
                lance.dataset(namespace_client=managed_ns, table_id=table_id).count_rows()
            else:
                lance.dataset(namespace_client=managed_ns, table_id=table_id, version=2).count_rows()
        return finalize(place, storage_options, version)

    monkeypatch.setattr(manifests, "finalize", read_first)
    managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [2]})))
    monkeypatch.setattr(manifests, "finalize", finalize)
    on_disk = store.dataset(location)  # the version the writer by location was told of holds its row
    assert sorted(on_disk.checkout_version(by_location[0]).to_table().column("v").to_pylist()) == [1, 2, 100]
    assert by_location == [3]  # version 2 was in place before the writer by location looked
    assert sorted(on_disk.checkout_version(2).to_table().column("v").to_pylist()) == [1, 2]
    assert not staged_manifests(store, location)
    assert adopt_versions_written_by_location(managed_ns, table_id) == [3]
    assert _rows(managed_ns, table_id) == [1, 2, 100]


def test_a_reader_that_finds_the_final_name_taken_by_a_writer_by_location_is_refused_until_the_commit_goes_back(
    managed_ns: IcebergLanceNamespace, db: list[str], monkeypatch: pytest.MonkeyPatch, store: Store
) -> None:
    """A writer by location took the final name after the catalog committed version 2: a reader in
    that moment is refused with a conflict (never handed either manifest as the catalog's version 2),
    the catalog's commit is taken back, and the writer's version stays as it landed."""
    table_id = [*db, "read"]
    location = _create(managed_ns, table_id, [1])
    finalize = manifests.finalize
    refused: list[str] = []

    def taken_then_read(place: str, storage_options: Any, version: Any) -> Any:
        _by_location(store, location, [100])
        with pytest.raises(ConcurrentModificationError, match="at once") as refusal:
            managed_ns.list_table_versions({"id": table_id, "descending": True, "limit": 1})
        refused.append(str(refusal.value))
        with pytest.raises(Exception, match="at once"):  # pylance, opening it, is told the same
            lance.dataset(namespace_client=managed_ns, table_id=table_id).count_rows()
        return finalize(place, storage_options, version)

    monkeypatch.setattr(manifests, "finalize", taken_then_read)
    with pytest.raises(InvalidTableStateError, match=WRITTEN_BY_LOCATION):
        managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [2]})))
    monkeypatch.setattr(manifests, "finalize", finalize)
    assert refused and "Version 2" in refused[0]
    assert sorted(store.dataset(location).to_table().column("v").to_pylist()) == [1, 100]
    assert adopt_versions_written_by_location(managed_ns, table_id) == [2]
    assert _rows(managed_ns, table_id) == [1, 100]


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("conflict", ConcurrentModificationError),
        ("bad input", InvalidInputError),
        ("management removed", ConcurrentModificationError),  # under the write: a retry finds it back
        ("answer lost", ServiceUnavailableError),
        ("taken, not taken back", ServiceUnavailableError),
    ],
)
def test_a_commit_pylance_cannot_tell_landed_is_its_refusal_only_when_the_catalog_never_took_it(
    managed_ns: IcebergLanceNamespace, db: list[str], monkeypatch: pytest.MonkeyPatch, how: str, expected: type
) -> None:
    """pylance answers every refused commit whose version it cannot read back as of unknown
    outcome. A client that retries on 409 would write twice if the commit had landed: the answer
    is the refusal itself (a conflict: 409, bad input: 400) when the catalog never took the commit,
    and 503 (look before writing again) when it may have: the catalog's answer was lost, or it took
    the commit and could not take it back."""
    table_id = [*db, "unknown"]
    _create(managed_ns, table_id, [1])
    versions = managed_ns._versions
    create, describe = versions._create_table_version, versions.describe_table_version
    asked: list[int] = []

    def refusing(table: Any, request: Any) -> Any:
        asked.append(request.version)
        if how == "conflict":
            raise ConcurrentModificationError("another writer took it")
        if how == "bad input":
            raise InvalidInputError("not a manifest of this table")
        if how == "management removed":
            raise UnsupportedOperationError("the versions of the table are Lance's own")
        if how == "answer lost":
            catalog = managed_ns._tables.companions.catalog(table.warehouse)
            commit = catalog.commit_changes

            def lost(*args: Any, **kwargs: Any) -> Any:
                commit(*args, **kwargs)
                raise requests.ConnectionError("the catalog's answer was lost")

            with monkeypatch.context() as flapping:
                flapping.setattr(catalog, "commit_changes", lost)
                return create(table, request)
        create(table, request)
        raise operations._diverged(table, request.version, "the catalog moved on since")

    def unreadable(request: Any) -> Any:  # the version cannot be read back to verify
        if request.version in asked:
            raise ServiceUnavailableError("the catalog is unavailable")
        return describe(request)

    monkeypatch.setattr(versions, "_create_table_version", refusing)
    monkeypatch.setattr(versions, "describe_table_version", unreadable)
    with pytest.raises(expected) as refusal:
        managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [2]})))
    monkeypatch.undo()
    landed = expected is ServiceUnavailableError
    assert ("unknown" in str(refusal.value)) == landed
    assert _versions(managed_ns, table_id) == ([1, 2] if landed else [1])


def test_a_version_whose_manifest_the_store_will_not_move_into_place_is_taken_back(
    managed_ns: IcebergLanceNamespace, db: list[str], monkeypatch: pytest.MonkeyPatch, store: Store
) -> None:
    """No one may be handed a staged manifest (pylance copies it into place over whatever is
    there): a passing refusal of the move is tried again, and a lasting one takes the catalog's
    commit back and is a 503, nothing committed."""
    table_id = [*db, "unmoved"]
    location = _create(managed_ns, table_id, [1])
    move, refusals = files.move_unless_taken, [1]

    def refused(*args: Any) -> bool:
        if refusals[0] > 0:
            refusals[0] -= 1
            raise OSError("the store refuses the move")
        return move(*args)

    monkeypatch.setattr(files, "move_unless_taken", refused)
    assert managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [2]}))).version == 2  # once: again
    refusals[0] = manifests.MOVE_ATTEMPTS
    with pytest.raises(ServiceUnavailableError, match="could not be moved into place.*not committed: retry"):
        managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [3]})))
    monkeypatch.undo()
    assert _versions(managed_ns, table_id) == [1, 2] and _rows(managed_ns, table_id) == [1, 2]
    assert not staged_manifests(store, location)
    managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [3]})))
    assert _rows(managed_ns, table_id) == [1, 2, 3]


def test_a_reader_that_cannot_move_the_latest_manifest_into_place_is_refused_not_handed_the_staged_one(
    managed_ns: IcebergLanceNamespace, db: list[str], monkeypatch: pytest.MonkeyPatch, store: Store
) -> None:
    table_id = [*db, "stuck"]
    location = _create(managed_ns, table_id, [1])
    finalize = manifests.finalize

    def read_first(place: str, storage_options: Any, version: Any) -> Any:
        with monkeypatch.context() as store_refuses:  # the reader's copy is refused
            store_refuses.setattr(files, "copy_unless_taken", lambda *args: (_ for _ in ()).throw(OSError("no")))
            with pytest.raises(ServiceUnavailableError, match="could not be moved into place: retry"):
                managed_ns.list_table_versions({"id": table_id, "descending": True, "limit": 1})
        return finalize(place, storage_options, version)

    monkeypatch.setattr(manifests, "finalize", read_first)
    managed_ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [2]})))
    monkeypatch.undo()
    assert _rows(managed_ns, table_id) == [1, 2] and not staged_manifests(store, location)


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (
            "Wrapped error: Commit result for version 4 is unknown: the commit may or may not have been applied; "
            "check the table state before retrying: commit reported a conflict but the manifest at the target "
            "version could not be read back for verification",
            ServiceUnavailableError,
        ),
        (
            "Incompatible transaction: This Append transaction is incompatible with concurrent transaction "
            "Overwrite at version 2.",
            ConcurrentModificationError,
        ),
        (
            "Retryable commit conflict for version 2: This Overwrite transaction was preempted by concurrent "
            "transaction Overwrite at version 2. Please retry.",
            ConcurrentModificationError,
        ),
        (
            "insert_into_table: Commit conflict for version 1765: Failed to commit the transaction after 20 retries.",
            ConcurrentModificationError,
        ),
        (
            "Too many concurrent writers. Attempted 7 times, but failed on retry_timeout of 30.000 seconds.",
            ConcurrentModificationError,
        ),
        ('LanceError(IO): does not have sufficient data, len: 1, bytes: b"x"', InvalidTableStateError),
        ("LanceError(IO): file size is too small", InvalidTableStateError),
        (
            "Namespace error: Concurrent modification: Version 91 is being committed by a writer by location and "
            "through the catalog at once: retry, src/namespace.rs:1569:18",
            ConcurrentModificationError,
        ),
        (
            "Namespace error: Invalid table state: Version 2 of t was written by ..., src/x.rs:1:2",
            InvalidTableStateError,
        ),
        ("Namespace error: Invalid input: wh.db.t is an Iceberg table, src/x.rs:1:2", InvalidInputError),
    ],
)
def test_pylance_failures_of_a_commit_or_a_manifest_are_conflicts(message: str, error: type[Exception]) -> None:
    with pytest.raises(error), pylance_failures("insert_into_table"):
        raise OSError(message)


def test_a_create_that_would_bring_back_a_table_written_by_location_in_the_trash_says_so_and_keeps_it(
    managed_ns: IcebergLanceNamespace, store: Store, db: list[str]
) -> None:
    """A create under the name of a soft-deleted table brings it back; when a writer by location
    moved its dataset ahead of the catalog, the create is refused with the ways out of a table in the
    trash (undrop and adopt, or purge), never advice for a live table the client cannot see, and the
    table stays soft-deleted with its files; after a purge, the create makes a new table."""
    table_id = [*db, "revived"]
    location = _create(managed_ns, table_id, [1])
    _by_location(store, location, [2])
    managed_ns.drop_table({"id": table_id})
    create = lambda: managed_ns.create_table({"id": table_id}, ipc(pa.table({"v": [3]})))  # noqa: E731
    with pytest.raises(InvalidTableStateError, match="bring back the soft-deleted table .*purge_table") as refused:
        create()
    assert "Version 2 of" in str(refused.value) and "restore_table" not in str(refused.value)
    assert managed_ns.table_status(table_id).state == "soft_deleted"
    assert lance.dataset(location, storage_options=store.storage_options).to_table()["v"].to_pylist() == [1, 2]
    managed_ns.purge_table(table_id)
    create()
    assert _rows(managed_ns, table_id) == [3]
