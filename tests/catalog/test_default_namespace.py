"""``default_namespace``: clients that name tables with one part (lancedb's ``open_table("orders")``,
DuckDB's Lance extension after ``ATTACH``) pointed at one namespace of the catalog; without the
property a bare name stays InvalidInput."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lancedb
import pyarrow as pa
import pytest
import requests
from lance_namespace import CreateNamespaceRequest, ListNamespacesRequest, ListTablesRequest, TableExistsRequest
from lance_namespace.errors import ErrorCode, InvalidInputError, TableNotFoundError

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.config.settings import Settings
from lance_iceberg_ns.server import RunningServer

from ..liveness import ServedProcess, served_in_subprocess

ROWS = pa.table({"id": [1, 2, 3], "vector": pa.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]], pa.list_(pa.float32(), 2))})


@pytest.fixture
def sales(ns: IcebergLanceNamespace, warehouse: str) -> list[str]:
    """The namespace ``[warehouse, sales]``, created."""
    ns.create_namespace(CreateNamespaceRequest(id=[warehouse, "sales"]))
    return [warehouse, "sales"]


@pytest.fixture
def served(endpoint: str, lance_root: Path, warehouse: str, sales: list[str]) -> Iterator[ServedProcess]:
    """``lance-iceberg-ns serve -p default_namespace=<warehouse>.sales``."""
    with served_in_subprocess(
        endpoint, str(lance_root), warehouse, properties={"default_namespace": ".".join(sales)}
    ) as running:
        yield running


def _lancedb_round_trip(connection: Any, ns: IcebergLanceNamespace, sales: list[str]) -> None:
    """create, list, open, add, search, count and drop by bare name, all in ``sales``."""
    connection.create_table("orders", ROWS)
    assert list(connection.list_tables().tables) == ["orders"]
    assert ns.list_tables(ListTablesRequest(id=sales)).tables == ["orders"]
    table = connection.open_table("orders")
    table.add(pa.table({"id": [4], "vector": pa.array([[0.7, 0.8]], pa.list_(pa.float32(), 2))}))
    assert table.count_rows() == 4
    assert table.search([0.7, 0.8]).limit(1).to_arrow().column("id").to_pylist() == [4]
    assert table.search().where("id > 2").to_arrow().num_rows == 2
    connection.drop_table("orders")
    assert ns.list_tables(ListTablesRequest(id=sales)).tables == []
    with pytest.raises(TableNotFoundError):
        ns.table_exists(TableExistsRequest(id=[*sales, "orders"]))


def test_lancedb_through_serve_names_tables_of_the_default_namespace_alone(
    served: ServedProcess, ns: IcebergLanceNamespace, sales: list[str]
) -> None:
    _lancedb_round_trip(lancedb.connect_namespace("rest", {"uri": served.uri}), ns, sales)


def test_lancedb_in_process_names_tables_of_the_default_namespace_alone(
    endpoint: str, lance_root: Path, ns: IcebergLanceNamespace, sales: list[str]
) -> None:
    properties = {"endpoint": endpoint, "root": str(lance_root), "default_namespace": ".".join(sales)}
    _lancedb_round_trip(lancedb.connect_namespace("iceberg", properties), ns, sales)


@pytest.mark.parametrize("attached", ["root", "default"])
def test_duckdb_attached_creates_selects_and_drops_in_the_default_namespace(
    served: ServedProcess, ns: IcebergLanceNamespace, sales: list[str], duckdb_with_lance: Any, attached: str
) -> None:
    """DuckDB declares ``<attached>$orders`` (then, refused, the bare name), and describes and drops
    by the bare name: ``ATTACH '$'`` lists the root, ``ATTACH 'wh$sales'`` the namespace itself."""
    duck = duckdb_with_lance
    attach = f"ATTACH '{'$' if attached == 'root' else '$'.join(sales)}' AS shop (TYPE LANCE, ENDPOINT '{served.uri}')"
    listed = "SELECT table_name FROM information_schema.tables WHERE table_catalog = 'shop'"
    duck.execute(attach)
    assert duck.execute(listed).fetchall() == []
    duck.execute("CREATE TABLE shop.main.orders AS SELECT range AS id, range * 2 AS amount FROM range(5)")
    assert ns.list_tables(ListTablesRequest(id=sales)).tables == ["orders"]
    duck.execute("DETACH shop")  # the extension keeps the listing it attached with
    duck.execute(attach)
    assert duck.execute(listed).fetchall() == [("orders",)]
    assert duck.execute("SELECT count(*), sum(amount) FROM shop.main.orders").fetchall() == [(5, 20)]
    duck.execute("DROP TABLE shop.main.orders")
    assert ns.list_tables(ListTablesRequest(id=sales)).tables == []
    assert duck.execute(listed).fetchall() == []


def test_duckdb_attached_to_another_namespace_reads_the_default_namespaces_table_of_that_name(
    served: ServedProcess, ns: IcebergLanceNamespace, sales: list[str], warehouse: str, duckdb_with_lance: Any
) -> None:
    """Why the docs say to attach DuckDB to the default namespace only: it describes by the bare
    name first, and the bare name is the default namespace's table."""
    hr = [warehouse, "hr"]
    ns.create_namespace(CreateNamespaceRequest(id=hr))
    ns.create_table({"id": [*hr, "orders"]}, _ipc(ROWS.slice(0, 1)))
    ns.create_table({"id": [*sales, "orders"]}, _ipc(ROWS))
    duck = duckdb_with_lance
    duck.execute(f"ATTACH '{'$'.join(hr)}' AS hr (TYPE LANCE, ENDPOINT '{served.uri}')")
    assert duck.execute("SELECT count(*) FROM hr.main.orders").fetchall() == [(3,)]


def test_without_the_property_a_bare_table_name_is_refused(server: RunningServer, ns: IcebergLanceNamespace) -> None:
    for method, path in (("POST", "describe"), ("POST", "declare"), ("POST", "drop"), ("POST", "exists")):
        answer = requests.request(method, f"{server.uri}/v1/table/orders/{path}", json={"id": ["orders"]}, timeout=30)
        assert answer.status_code == 400, (path, answer.text)
        assert answer.json()["code"] == ErrorCode.INVALID_INPUT
    assert requests.get(f"{server.uri}/v1/namespace/%24/table/list", timeout=30).json()["tables"] == []
    with pytest.raises(InvalidInputError, match="needs a warehouse"):
        ns.table_status(["orders"])


def test_only_bare_table_names_and_the_root_listing_are_rewritten(
    endpoint: str, lance_root: Path, sales: list[str], warehouse: str
) -> None:
    """Namespace ids stay as given (but the root of ``list_tables``); a two-part table id is still
    refused; a bare id given to the table_id operations is placed too."""
    with IcebergLanceNamespace(endpoint=endpoint, root=str(lance_root), default_namespace=".".join(sales)) as bridge:
        bridge.create_table({"id": [*sales, "orders"]}, _ipc(ROWS))
        assert bridge.list_tables({"id": []}).tables == ["orders"]
        assert bridge.list_tables({"id": [warehouse]}).tables == []
        assert bridge.list_namespaces(ListNamespacesRequest(id=[warehouse])).namespaces == ["sales"]
        with pytest.raises(InvalidInputError):
            bridge.table_exists({"id": ["sales", "orders"]})
        bridge.table_exists({"id": ["orders"]})
        assert bridge.table_status(["orders"]).state == "exists"
        bridge.drop_table({"id": ["orders"]})
        assert bridge.table_status(["orders"]).state == "soft_deleted"
        bridge.undrop_table(["orders"])
        assert bridge.describe_table({"id": ["orders"]}).location.startswith(str(lance_root))
        assert bridge.table_status(table_id=["orders"]).state == "exists"  # by keyword too
        assert bridge.dataset(table_id=["orders"]).count_rows() == ROWS.num_rows


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize(
    ("properties", "expected"),
    [
        ({"default_namespace": "wh.sales"}, ("wh", "sales")),
        ({"default_namespace": "wh.sales.eu"}, ("wh", "sales", "eu")),
        ({"default_namespace": "wh.prod$sales", "delimiter": "$"}, ("wh.prod", "sales")),
        ({"default_namespace": ""}, ()),
        ({}, ()),
    ],
)
def test_the_property_is_parsed_with_the_configured_delimiter(
    properties: dict[str, str], expected: tuple[str, ...]
) -> None:
    assert Settings.from_properties({"endpoint": "http://catalog", **properties}).default_namespace == expected


@pytest.mark.parametrize("value", ["wh", "wh..sales", "wh.__lance_trash__", "wh.sa\u200bles", "wh/x.sales"])
def test_a_default_namespace_that_names_no_namespace_is_invalid_input(value: str) -> None:
    with pytest.raises(InvalidInputError, match="default_namespace"):
        Settings.from_properties({"endpoint": "http://catalog", "default_namespace": value})
