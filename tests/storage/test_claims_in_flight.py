"""A location between its claim and its entry, or between its entry's drop and its files'
deletion, is nobody's to adopt: on a disk as on S3, a register racing either never gives one
location two owners, nor deletes a table's files. And a store that refuses the bridge's own
configuration is a typed error that leaves nothing behind."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from lance_namespace import RegisterTableRequest
from lance_namespace.errors import (
    PermissionDeniedError,
    TableNotFoundError,
)

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.catalog.companions import Companions
from lance_iceberg_ns.storage import ownership
from lance_iceberg_ns.tables import placement

from ..stores import Store

pytestmark = pytest.mark.usefixtures("store")


class Held:
    """Holds the first call of a method inside it until released, and says when it is there."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> None:
        self.inside, self.release = threading.Event(), threading.Event()
        real = getattr(owner, name)
        first = [True]

        def held(*args: Any, **kwargs: Any) -> Any:
            if first[0]:
                first[0] = False
                self.inside.set()
                assert self.release.wait(60), "never released"
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, held)


def _in_thread(action: Any) -> tuple[threading.Thread, list[object]]:
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(action())
        except Exception as exc:  # noqa: BLE001 - the outcome to check
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def _owners(ns: IcebergLanceNamespace, db: list[str], names: list[str]) -> list[str]:
    """Which of the names are entries that the marker at their location names."""
    owning = []
    for name in names:
        try:
            ns.describe_table({"id": [*db, name]})  # proves the location is the entry's
        except (TableNotFoundError, PermissionDeniedError):
            continue
        owning.append(name)
    return owning


def test_a_register_never_adopts_a_claim_whose_entry_is_being_made(
    ns: IcebergLanceNamespace, db: list[str], store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    location = store.at(db[0], "unowned.lance")
    store.write_lance(location, rows=2)
    slow = Held(monkeypatch, Companions, "create")
    first, outcome = _in_thread(lambda: ns.register_table(RegisterTableRequest(id=[*db, "a"], location=location)))
    assert slow.inside.wait(60)
    with pytest.raises(PermissionDeniedError, match="being made"):
        ns.register_table(RegisterTableRequest(id=[*db, "b"], location=location))
    slow.release.set()
    first.join(60)
    assert not isinstance(outcome[0], Exception), outcome
    assert _owners(ns, db, ["a", "b"]) == ["a"]


def test_a_claim_taken_while_its_entry_was_made_is_lost_and_leaves_no_entry(
    ns: IcebergLanceNamespace, db: list[str], store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a claim in flight counts as left behind, a register may adopt it: the claim's own
    entry then finds its marker changed, and is dropped again (one owner, never two)."""
    location = store.at(db[0], "unowned.lance")
    store.write_lance(location, rows=2)
    slow = Held(monkeypatch, Companions, "create")
    first, outcome = _in_thread(lambda: ns.register_table(RegisterTableRequest(id=[*db, "a"], location=location)))
    assert slow.inside.wait(60)
    monkeypatch.setattr(placement, "IN_FLIGHT_SECONDS", -1.0)  # the claim in flight counts as left behind
    ns.register_table(RegisterTableRequest(id=[*db, "b"], location=location))
    slow.release.set()
    first.join(60)
    assert isinstance(outcome[0], PermissionDeniedError) and "taken by another table" in str(outcome[0])
    assert _owners(ns, db, ["a", "b"]) == ["b"]
    assert ns.list_tables({"id": db}).tables == ["b"]


@pytest.fixture
def ns_dropping_at_once(endpoint: str, store: Store) -> Iterator[IcebergLanceNamespace]:
    with store.namespace(endpoint, soft_delete="false") as ns:
        yield ns


def test_a_register_never_adopts_a_location_whose_files_are_being_deleted(
    ns_dropping_at_once: IcebergLanceNamespace, db: list[str], store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = ns_dropping_at_once
    import lance

    lance.write_dataset(pa.table({"v": [1, 2]}), namespace_client=ns, table_id=[*db, "t"])
    location = ns.describe_table({"id": [*db, "t"]}).location
    assert location is not None
    slow = Held(monkeypatch, placement.files, "delete_owned_files")
    dropping, outcome = _in_thread(lambda: ns.drop_table({"id": [*db, "t"]}))
    assert slow.inside.wait(60)  # the entry is gone, the files not yet
    with pytest.raises(PermissionDeniedError, match="being deleted"):
        ns.register_table(RegisterTableRequest(id=[*db, "copy"], location=location))
    slow.release.set()
    dropping.join(60)
    assert not isinstance(outcome[0], Exception), outcome
    assert store.keys(location) == []
    assert ns.list_tables({"id": db}).tables == []


def test_files_whose_location_another_table_claimed_meanwhile_are_not_deleted(
    ns_dropping_at_once: IcebergLanceNamespace, db: list[str], store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drop that finds the marker no longer its entry's (a register adopted the location once
    the drop counted as left behind) deletes nothing: the files are the other table's now."""
    ns = ns_dropping_at_once
    import lance

    lance.write_dataset(pa.table({"v": [1, 2]}), namespace_client=ns, table_id=[*db, "t"])
    location = ns.describe_table({"id": [*db, "t"]}).location
    assert location is not None
    slow = Held(monkeypatch, ownership, "let_go")
    dropping, outcome = _in_thread(lambda: ns.drop_table({"id": [*db, "t"]}))
    assert slow.inside.wait(60)  # the entry is gone, its marker not yet marked
    ns.register_table(RegisterTableRequest(id=[*db, "copy"], location=location))
    slow.release.set()
    dropping.join(60)
    assert not isinstance(outcome[0], Exception), outcome
    assert lance.dataset(namespace_client=ns, table_id=[*db, "copy"]).count_rows() == 2


def test_a_drop_never_deletes_files_a_register_is_adopting(
    ns_dropping_at_once: IcebergLanceNamespace, db: list[str], store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The register's adoption has marked the marker (to remove it) when the drop comes to let go:
    the mark is the register's, not the drop's, so the drop deletes nothing."""
    ns = ns_dropping_at_once
    import lance

    lance.write_dataset(pa.table({"v": [1, 2]}), namespace_client=ns, table_id=[*db, "t"])
    location = ns.describe_table({"id": [*db, "t"]}).location
    assert location is not None
    letting_go = Held(monkeypatch, ownership, "let_go")
    dropping, dropped = _in_thread(lambda: ns.drop_table({"id": [*db, "t"]}))
    assert letting_go.inside.wait(60)  # the entry is gone
    removing = Held(monkeypatch, ownership, "_remove_marker")
    registering, registered = _in_thread(
        lambda: ns.register_table(RegisterTableRequest(id=[*db, "copy"], location=location))
    )
    assert removing.inside.wait(60)  # the register has marked the marker, to remove it
    letting_go.release.set()
    dropping.join(60)
    removing.release.set()
    registering.join(60)
    assert not isinstance(dropped[0], Exception) and not isinstance(registered[0], Exception), (dropped, registered)
    assert lance.dataset(namespace_client=ns, table_id=[*db, "copy"]).count_rows() == 2


def test_a_deregister_never_removes_the_marker_of_a_register_that_adopted_meanwhile(
    ns: IcebergLanceNamespace, db: list[str], store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lance

    lance.write_dataset(pa.table({"v": [1, 2]}), namespace_client=ns, table_id=[*db, "t"])
    location = ns.describe_table({"id": [*db, "t"]}).location
    assert location is not None
    removing = Held(monkeypatch, ownership, "_remove_over")  # the deregister has read the marker
    deregistering, deregistered = _in_thread(lambda: ns.deregister_table({"id": [*db, "t"]}))
    assert removing.inside.wait(60)
    ns.register_table(RegisterTableRequest(id=[*db, "copy"], location=location))
    removing.release.set()
    deregistering.join(60)
    assert not isinstance(deregistered[0], Exception), deregistered
    assert _owners(ns, db, ["t", "copy"]) == ["copy"]
    assert lance.dataset(namespace_client=ns, table_id=[*db, "copy"]).count_rows() == 2
