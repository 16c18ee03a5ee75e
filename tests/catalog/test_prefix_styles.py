"""The bridge works, with no setting, against every way servers announce their API prefix."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance_namespace import CreateNamespaceRequest, ListNamespacesRequest, ListTablesRequest
from lance_namespace.errors import InvalidInputError, NamespaceNotFoundError

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.testing import PREFIX_STYLES, LocalCatalog, local_catalog

from ..conftest import RequestCounter


@pytest.fixture(scope="module", params=PREFIX_STYLES)
def styled_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCatalog]:
    with local_catalog(tmp_path_factory.mktemp(f"style-{request.param}"), prefix_style=request.param) as server:
        yield server


EXPECTED_PREFIX = {"none": "", "any": "wh1"}


def test_round_trip_in_every_prefix_style(styled_server: LocalCatalog, tmp_path: Path) -> None:
    with IcebergLanceNamespace(endpoint=styled_server.endpoint, root=str(tmp_path)) as ns:
        ns.create_namespace(CreateNamespaceRequest(id=["wh1", "db"], mode="exist_ok"))
        lance.write_dataset(pa.table({"x": [1, 2]}), namespace_client=ns, table_id=["wh1", "db", "t"], mode="create")
        assert "db" in ns.list_namespaces(ListNamespacesRequest(id=["wh1"])).namespaces
        assert ns.list_tables(ListTablesRequest(id=["wh1", "db"])).tables == ["t"]
        assert lance.dataset(namespace_client=ns, table_id=["wh1", "db", "t"]).count_rows() == 2
        prefix = ns.prefix("wh1")
    if styled_server.prefix_style in EXPECTED_PREFIX:
        assert prefix == EXPECTED_PREFIX[styled_server.prefix_style]
    else:  # an opaque prefix from the config's defaults or overrides
        assert prefix.startswith("wh-")


def test_warehouses_are_separate_where_the_server_separates_them(styled_server: LocalCatalog, tmp_path: Path) -> None:
    with IcebergLanceNamespace(endpoint=styled_server.endpoint, root=str(tmp_path)) as ns:
        ns.create_namespace(CreateNamespaceRequest(id=["wh_a", "only_in_a"], mode="exist_ok"))
        if styled_server.prefix_style == "none":  # one catalog for every name: one warehouse, named once
            with pytest.raises(InvalidInputError, match="another name for warehouse 'wh_a'"):
                ns.list_namespaces(ListNamespacesRequest(id=["wh_b"]))
            return
        in_b = ns.list_namespaces(ListNamespacesRequest(id=["wh_b"])).namespaces
    assert "only_in_a" not in in_b


def test_prefix_decision_is_made_once_per_warehouse(
    styled_server: LocalCatalog, tmp_path: Path, request_counter: RequestCounter
) -> None:
    with IcebergLanceNamespace(endpoint=styled_server.endpoint, root=str(tmp_path)) as ns:
        ns.list_namespaces(ListNamespacesRequest(id=["wh_counted"]))
        first = request_counter.count
        request_counter.reset()
        ns.list_namespaces(ListNamespacesRequest(id=["wh_counted"]))
        assert request_counter.count == 1
    # config, then for servers without a prefix the probe(s), then the listing itself
    expected = {"none": 4, "any": 3, "defaults": 2, "overrides": 2}[styled_server.prefix_style]
    assert first == expected


def test_unknown_warehouse_raises_namespace_not_found(tmp_path: Path) -> None:
    with (
        local_catalog(tmp_path / "catalog", prefix_style="defaults", warehouses=["known"]) as server,
        IcebergLanceNamespace(endpoint=server.endpoint, root=str(tmp_path)) as ns,
    ):
        ns.create_namespace(CreateNamespaceRequest(id=["known", "db"]))
        with pytest.raises(NamespaceNotFoundError) as caught:
            ns.list_namespaces(ListNamespacesRequest(id=["unknown"]))
        assert "unknown" in str(caught.value)
        with pytest.raises(NamespaceNotFoundError):
            ns.namespace_exists({"id": ["unknown"]})
