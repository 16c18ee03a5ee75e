"""The bridge on a real Azure Blob server (Azurite): a create is one conditional put, a replace a
put on the e-tag it read, a table lives its whole life in a container, and a location declared by
several tables at once has exactly one owner, as on S3 and on a local disk."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import lance
import obstore
import pyarrow as pa
import pytest
from lance_namespace import (
    CreateNamespaceRequest,
    CreateTableRequest,
    DeclareTableRequest,
    DescribeTableRequest,
    DropTableRequest,
    ListTablesRequest,
)
from lance_namespace.errors import LanceNamespaceError

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.storage import files

from ..azurite import CONTAINER, Azurite
from ..helpers import ipc, together

ROUNDS = 20
DECLARE_ROUNDS = 5  # each round is eight catalog round trips: a few show the race well enough
RACERS = 8
MARKER = ".lance-iceberg-ns-owner.json"


def _keys_under(azurite: Azurite, location: str) -> list[str]:
    """Every blob under ``location``, listed by a client of its own (not the bridge's)."""
    prefix = location.removeprefix(f"az://{CONTAINER}/").rstrip("/") + "/"
    return sorted(item["path"] for batch in obstore.list(azurite.store(), prefix=prefix) for item in batch)


def test_pylance_and_obstore_reach_azure_with_the_same_options(azurite: Azurite) -> None:
    options = azurite.storage_options()
    location = f"{azurite.fresh_root()}/t.lance"
    lance.write_dataset(pa.table({"id": [1, 2, 3]}), location, storage_options=options)
    prefix = location.removeprefix(f"az://{CONTAINER}/")
    (manifest,) = [key for key in _keys_under(azurite, location) if key.startswith(f"{prefix}/_versions/")]
    assert files.read_file(location, manifest.removeprefix(f"{prefix}/"), options)  # Lance's bytes, read by obstore
    assert lance.dataset(location, storage_options=options).to_table().column("id").to_pylist() == [1, 2, 3]


def test_a_create_on_azure_has_exactly_one_winner_and_keeps_its_bytes(azurite: Azurite) -> None:
    options = azurite.storage_options()
    for _ in range(ROUNDS):
        location = f"{azurite.fresh_root()}/t.lance"

        def create(i: int, location: str = location) -> bool:
            return files.create_file(location, MARKER, f"racer {i}".encode(), options) is not None

        won = together(RACERS, create)
        assert sorted(map(str, won)) == ["False"] * (RACERS - 1) + ["True"], won
        assert files.read_file(location, MARKER, options) == f"racer {won.index(True)}".encode()


def test_a_replace_on_azure_writes_only_over_the_file_it_read(azurite: Azurite) -> None:
    options = azurite.storage_options()
    location = f"{azurite.fresh_root()}/t.lance"
    assert files.read_file(location, MARKER, options) is None
    assert files.replace_file(location, MARKER, b"over nothing", options) is False
    assert files.read_file(location, MARKER, options) is None  # nothing made where nothing was
    assert files.create_file(location, MARKER, b"first", options)
    assert files.create_file(location, MARKER, b"again", options) is None
    assert files.replace_file(location, MARKER, b"second", options)
    assert files.read_file(location, MARKER, options) == b"second"
    files.delete_file(location, MARKER, options)
    files.delete_file(location, MARKER, options)  # a file already gone is no error
    assert files.read_file(location, MARKER, options) is None
    assert files.replace_file(location, MARKER, b"after the delete", options) is False
    assert files.read_file(location, MARKER, options) is None
    assert _keys_under(azurite, location) == []


def test_racing_replaces_on_azure_each_write_whole_bytes(azurite: Azurite) -> None:
    options = azurite.storage_options()
    location = f"{azurite.fresh_root()}/t.lance"
    assert files.create_file(location, MARKER, b"first", options)
    written = together(RACERS, lambda i: files.replace_file(location, MARKER, f"racer {i}".encode() * 1000, options))
    assert all(result in (True, False) for result in written), written
    final = files.read_file(location, MARKER, options)
    assert final in {f"racer {i}".encode() * 1000 for i, result in enumerate(written) if result}


def _azure_namespace(endpoint: str, azurite: Azurite, **properties: str) -> IcebergLanceNamespace:
    properties = {"endpoint": endpoint, "root": azurite.fresh_root(), **properties}
    properties |= {f"storage.{key}": value for key, value in azurite.storage_options().items()}
    return IcebergLanceNamespace(**properties)


def test_a_table_lives_and_is_purged_on_azure(endpoint: str, azurite: Azurite, warehouse: str) -> None:
    rows = pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]})
    with _azure_namespace(endpoint, azurite) as ns:
        assert ns.settings.soft_delete  # the default: a drop keeps the data until the purge
        db = [warehouse, f"db_{uuid.uuid4().hex[:8]}"]
        ns.create_namespace(CreateNamespaceRequest(id=db))
        table_id = [*db, "t"]
        created = ns.create_table(CreateTableRequest(id=table_id), ipc(rows))
        location = ns.describe_table(DescribeTableRequest(id=table_id)).location
        assert location is not None and location == created.location
        assert location.startswith(str(ns.settings.root) + "/")
        assert f"{location.removeprefix(f'az://{CONTAINER}/')}/{MARKER}" in _keys_under(azurite, location)

        dataset = lance.dataset(location, storage_options=azurite.storage_options())
        assert dataset.to_table() == rows
        assert lance.dataset(namespace_client=ns, table_id=table_id).count_rows() == 3

        ns.drop_table(DropTableRequest(id=table_id))
        assert lance.dataset(location, storage_options=azurite.storage_options()).count_rows() == 3
        assert ns.purge_table(table_id) == 1
        assert ns.table_status(table_id).state == "not_found"
    assert _keys_under(azurite, location) == []


@pytest.fixture
def azure_ns(endpoint: str, azurite: Azurite) -> Iterator[IcebergLanceNamespace]:
    namespace = _azure_namespace(endpoint, azurite, allowed_locations=azurite.fresh_root())
    yield namespace
    namespace.close()


def test_tables_declared_at_one_azure_location_at_once_have_exactly_one_owner(
    azure_ns: IcebergLanceNamespace, db: list[str], azurite: Azurite
) -> None:
    (shared,) = azure_ns.settings.allowed_locations
    for round_number in range(DECLARE_ROUNDS):
        location = f"{shared}/shared-{round_number}.lance"
        names = [f"t{round_number}_{i}_{uuid.uuid4().hex[:4]}" for i in range(RACERS)]

        def declare(i: int, names: list[str] = names, location: str = location) -> object:
            return azure_ns.declare_table(DeclareTableRequest(id=[*db, names[i]], location=location))

        results = together(RACERS, declare)
        winners = [names[i] for i, result in enumerate(results) if not isinstance(result, Exception)]
        assert len(winners) == 1, results
        assert all(isinstance(result, LanceNamespaceError) for result in results if isinstance(result, Exception))
        listed = set(azure_ns.list_tables(ListTablesRequest(id=db)).tables or [])
        assert listed & set(names) == set(winners), "a losing declare left its catalog entry"
        prefix = location.removeprefix(f"az://{CONTAINER}/")
        assert _keys_under(azurite, location) == [f"{prefix}/{MARKER}"]
        owner = files.read_file(location, MARKER, azurite.storage_options())
        assert owner is not None and winners[0].encode() in owner
