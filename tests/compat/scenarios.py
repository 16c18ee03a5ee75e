"""The scenarios the compatibility suite runs on every server, the same on each, through the bridge
(``IcebergLanceNamespace``), pylance and ``lance-iceberg-ns serve``.

Each scenario gets the server, a bridge on it and a namespace of its own, ``[warehouse,
<scenario>]``, already created (all but ``namespaces``, which makes its own), and raises on the
first thing that does not hold. Names keep to what S3 Tables accepts: lowercase letters, digits
and underscores.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import lance
import lance.namespace
import pyarrow as pa
import pytest
from lance_namespace import (
    CountTableRowsRequest,
    CreateNamespaceRequest,
    CreateTableRequest,
    DeclareTableRequest,
    DescribeNamespaceRequest,
    DescribeTableRequest,
    DropNamespaceRequest,
    DropTableRequest,
    InsertIntoTableRequest,
    LanceNamespace,
    ListNamespacesRequest,
    ListTablesRequest,
    ListTableVersionsRequest,
    NamespaceExistsRequest,
    RegisterTableRequest,
    RenameTableRequest,
    TableExistsRequest,
)
from lance_namespace.errors import InvalidInputError, NamespaceNotFoundError, TableNotFoundError

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.catalog.companions import ENGINE_PROTECTION

from ..helpers import ipc
from ..liveness import served_in_subprocess
from .servers import CompatServer

ROWS = pa.table({"id": [1, 2, 3], "vector": pa.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]], pa.list_(pa.float32(), 2))})


@dataclass
class Scene:
    """What a scenario works with."""

    server: CompatServer
    ns: IcebergLanceNamespace
    namespace: list[str]  # [warehouse, <scenario>], created
    tmp: Path  # a local directory of its own

    def table(self, name: str) -> list[str]:
        return [*self.namespace, name]

    def write(
        self,
        name: str,
        rows: pa.Table = ROWS,
        mode: str = "create",
        client: LanceNamespace | None = None,
        storage_options: dict[str, str] | None = None,
    ) -> str:
        """Write ``rows`` through ``client`` (the bridge by default), as pylance does; the dataset's location."""
        written = lance.write_dataset(
            rows,
            namespace_client=client or self.ns,
            table_id=self.table(name),
            mode=mode,
            storage_options=storage_options,
        )
        return str(written.uri)

    def read(
        self,
        name: str,
        client: LanceNamespace | None = None,
        storage_options: dict[str, str] | None = None,
        version: int | None = None,
    ) -> pa.Table:
        """The rows of table ``name`` (at ``version``), read through ``client`` (the bridge by default)."""
        dataset = lance.dataset(
            namespace_client=client or self.ns,
            table_id=self.table(name),
            storage_options=storage_options,
            version=version,
        )
        return dataset.to_table()

    def tables(self) -> list[str]:
        return sorted(self.ns.list_tables(ListTablesRequest(id=self.namespace)).tables)


def namespaces(scene: Scene) -> None:
    """A namespace is created, listed, described, found and dropped."""
    ns, warehouse = scene.ns, scene.server.warehouse
    made = [warehouse, "ns_lifecycle"]
    ns.create_namespace(CreateNamespaceRequest(id=made))
    assert "ns_lifecycle" in ns.list_namespaces(ListNamespacesRequest(id=[warehouse])).namespaces
    ns.describe_namespace(DescribeNamespaceRequest(id=made))
    ns.namespace_exists(NamespaceExistsRequest(id=made))
    ns.drop_namespace(DropNamespaceRequest(id=made))
    with pytest.raises(NamespaceNotFoundError):
        ns.namespace_exists(NamespaceExistsRequest(id=made))


def declare_table(scene: Scene) -> None:
    """A table is declared (no data), then found, described at its location and listed."""
    declared = scene.ns.declare_table(DeclareTableRequest(id=scene.table("declared")))
    assert declared.location
    scene.ns.table_exists(TableExistsRequest(id=scene.table("declared")))
    described = scene.ns.describe_table(DescribeTableRequest(id=scene.table("declared")))
    assert described.location == declared.location, (described.location, declared.location)
    assert scene.tables() == ["declared"]


def create_table(scene: Scene) -> None:
    """A table is created with its rows in the request (Arrow IPC), then appended to."""
    scene.ns.create_table(CreateTableRequest(id=scene.table("created")), ipc(ROWS))
    scene.ns.insert_into_table(InsertIntoTableRequest(id=scene.table("created")), ipc(ROWS.slice(0, 2)))
    assert scene.ns.count_table_rows(CountTableRowsRequest(id=scene.table("created"))).count == 5


def write_and_read(scene: Scene) -> None:
    """pylance writes a table through the bridge, appends, and reads it back."""
    scene.write("written")
    scene.write("written", ROWS.slice(2), mode="append")
    read = scene.read("written")
    assert read.column("id").to_pylist() == [1, 2, 3, 3]
    assert read.column("vector").to_pylist()[0] == pytest.approx([0.1, 0.2])


def list_and_describe(scene: Scene) -> None:
    """Listing shows every table of the namespace; describing one answers its location."""
    location = scene.write("first")
    scene.write("second")
    scene.ns.declare_table(DeclareTableRequest(id=scene.table("third")))
    assert scene.tables() == ["first", "second", "third"]
    described = scene.ns.describe_table(DescribeTableRequest(id=scene.table("first")))
    assert described.location == location, (described.location, location)


def soft_delete_and_undrop(scene: Scene) -> None:
    """A dropped table is gone from listings but restorable; undrop brings it back with its rows."""
    scene.write("dropped")
    scene.ns.drop_table(DropTableRequest(id=scene.table("dropped")))
    assert scene.ns.table_status(scene.table("dropped")).state == "soft_deleted"
    assert scene.tables() == []
    scene.ns.undrop_table(scene.table("dropped"))
    assert scene.ns.table_status(scene.table("dropped")).state == "exists"
    assert scene.read("dropped").num_rows == 3


def purge(scene: Scene) -> None:
    """Purging a soft-deleted table removes its entry and its files."""
    location = scene.write("purged")
    scene.ns.drop_table(DropTableRequest(id=scene.table("purged")))
    assert scene.ns.purge_table(scene.table("purged")) == 1
    assert scene.ns.table_status(scene.table("purged")).state == "not_found"
    assert scene.server.store.keys(location) == []


def rename(scene: Scene) -> None:
    """A renamed table answers by its new name, with its rows; the old name is free."""
    scene.write("before")
    scene.ns.rename_table(RenameTableRequest(id=scene.table("before"), new_table_name="after"))
    assert scene.tables() == ["after"]
    assert scene.read("after").num_rows == 3
    with pytest.raises(TableNotFoundError):
        scene.ns.table_exists(TableExistsRequest(id=scene.table("before")))


def register(scene: Scene) -> None:
    """A dataset written by pylance alone, outside every table, is registered and read by name."""
    area = scene.server.register_area
    location = f"{area.rstrip('/')}/{scene.namespace[-1]}.lance"
    lance.write_dataset(ROWS, location, storage_options=scene.server.store.storage_options)
    with scene.ns.allowing(area) as allowed:
        allowed.register_table(RegisterTableRequest(id=scene.table("registered"), location=location))
        assert lance.dataset(namespace_client=allowed, table_id=scene.table("registered")).count_rows() == 3


def managed_versions(scene: Scene) -> None:
    """With ``table_version_management``, each version is a catalog commit: two writes, two versions,
    the first still readable."""
    with scene.server.namespace(table_version_management="true") as managed:
        scene.write("managed", client=managed)
        scene.write("managed", ROWS.slice(0, 1), mode="append", client=managed)
        assert managed.describe_table(DescribeTableRequest(id=scene.table("managed"))).managed_versioning
        listed = managed.list_table_versions(ListTableVersionsRequest(id=scene.table("managed"))).versions
        assert [version.version for version in listed] == [1, 2]
        assert scene.read("managed", client=managed, version=1).num_rows == 3
        assert scene.read("managed", client=managed).num_rows == 4


def serve(scene: Scene) -> None:
    """``lance-iceberg-ns serve`` on the server: pylance's REST client writes, lists and reads."""
    server = scene.server
    properties = {key: value for key, value in server.properties.items() if key not in ("endpoint", "root")}
    options = server.store.storage_options  # the client's own keys: the server shares no static secret
    with served_in_subprocess(
        server.endpoint, server.root, server.warehouse, properties=properties, stderr_dir=str(scene.tmp)
    ) as served:
        rest = lance.namespace.RestNamespace(uri=served.uri)
        scene.write("served", client=rest, storage_options=options)
        assert sorted(rest.list_tables(ListTablesRequest(id=scene.namespace)).tables) == ["served"]
        assert scene.read("served", client=rest, storage_options=options).num_rows == 3
    assert scene.read("served").num_rows == 3


def engine_protection(scene: Scene) -> None:
    """A companion table tells Iceberg engines to keep off: pyiceberg reads the protection, cannot
    append to it, and a request to turn the protection off is refused."""
    scene.ns.declare_table(DeclareTableRequest(id=scene.table("protected")))
    table = scene.server.other_client().load_table(tuple(scene.table("protected")[1:]))
    assert {key: table.properties.get(key) for key in ENGINE_PROTECTION} == dict(ENGINE_PROTECTION)
    with pytest.raises(ValueError, match="'lance' is not a valid FileFormat"):
        table.append(pa.table({"dummy": pa.array(["x"], pa.string())}))
    with pytest.raises(InvalidInputError, match="Iceberg engines"):
        scene.ns.declare_table(DeclareTableRequest(id=scene.table("unprotected"), properties={"gc.enabled": "true"}))


Scenario = Callable[[Scene], None]
# key -> (what the page calls it, the scenario), in the order the page lists them
SCENARIOS: dict[str, tuple[str, Scenario]] = {
    "namespaces": ("namespaces: create, list, describe, drop", namespaces),
    "declare_table": ("declare a table, describe and list it", declare_table),
    "create_table": ("create a table with rows, append (`create_table`, `insert_into_table`)", create_table),
    "write_and_read": ("pylance writes, appends and reads through the bridge", write_and_read),
    "list_and_describe": ("list tables, describe one", list_and_describe),
    "soft_delete_and_undrop": ("soft delete, then undrop (restore)", soft_delete_and_undrop),
    "purge": ("purge a soft-deleted table and its files", purge),
    "rename": ("rename a table", rename),
    "register": ("register a dataset written elsewhere", register),
    "managed_versions": ("managed versions: each Lance version an Iceberg commit", managed_versions),
    "serve": ("`serve`: pylance's `RestNamespace` writes, lists, reads", serve),
    "engine_protection": ("Iceberg engines kept off companion tables", engine_protection),
}
