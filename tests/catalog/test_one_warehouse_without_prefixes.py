"""A catalog without warehouse prefixes (the official fixture's style: ``/v1/config`` names none,
and only ``/v1/namespaces/...`` is routed) is one catalog under every warehouse name: the bridge
takes it for one warehouse, and says so at the first use of a second name, in the process that
uses it and in any other that meets a table made under the first."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance_namespace import CreateNamespaceRequest, ListNamespacesRequest
from lance_namespace.errors import InvalidInputError

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.testing import LocalCatalog, local_catalog


@pytest.fixture(scope="module")
def unprefixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCatalog]:
    with local_catalog(tmp_path_factory.mktemp("unprefixed"), prefix_style="none") as server:
        yield server


def test_a_second_warehouse_name_is_refused_at_its_first_use(unprefixed: LocalCatalog, tmp_path: Path) -> None:
    with IcebergLanceNamespace(endpoint=unprefixed.endpoint, root=str(tmp_path)) as ns:
        ns.create_namespace(CreateNamespaceRequest(id=["first", "sales"], mode="exist_ok"))
        with pytest.raises(InvalidInputError) as refused:
            ns.list_namespaces(ListNamespacesRequest(id=["second"]))
        said = str(refused.value)
        assert "'second' is another name for warehouse 'first'" in said
        assert "no warehouse prefixes" in said and "warehouses=first" in said  # the cause and the fix
        assert "sales" in ns.list_namespaces(ListNamespacesRequest(id=["first"])).namespaces


def test_the_warehouses_setting_names_the_one_warehouse(unprefixed: LocalCatalog, tmp_path: Path) -> None:
    with IcebergLanceNamespace(endpoint=unprefixed.endpoint, root=str(tmp_path), warehouses="main") as ns:
        with pytest.raises(InvalidInputError, match="'other' is another name for warehouse 'main'"):
            ns.namespace_exists({"id": ["other", "sales"]})
        ns.create_namespace(CreateNamespaceRequest(id=["main", "sales"], mode="exist_ok"))


def test_a_table_made_under_another_name_says_which(unprefixed: LocalCatalog, tmp_path: Path) -> None:
    """Another bridge (another process, say) that names the catalog otherwise meets the first
    name in the table's ownership marker: it is told so, not that the table is another's."""
    with IcebergLanceNamespace(endpoint=unprefixed.endpoint, root=str(tmp_path)) as making:
        making.create_namespace(CreateNamespaceRequest(id=["made", "db"], mode="exist_ok"))
        lance.write_dataset(pa.table({"v": [1]}), namespace_client=making, table_id=["made", "db", "t"], mode="create")
    with IcebergLanceNamespace(endpoint=unprefixed.endpoint, root=str(tmp_path)) as other:
        assert "t" in other.list_tables({"id": ["elsewhere", "db"]}).tables  # the same namespaces
        with pytest.raises(InvalidInputError, match="'elsewhere' is another name for warehouse 'made'"):
            lance.write_dataset(
                pa.table({"v": [2]}), namespace_client=other, table_id=["elsewhere", "db", "t"], mode="append"
            )
        with pytest.raises(InvalidInputError, match="'elsewhere' is another name for warehouse 'made'"):
            other.describe_table({"id": ["elsewhere", "db", "t"]})
        for step in (other.drop_table, other.deregister_table):  # neither needs the place to be its own
            with pytest.raises(InvalidInputError, match="'elsewhere' is another name for warehouse 'made'"):
                step({"id": ["elsewhere", "db", "t"]})
    with IcebergLanceNamespace(endpoint=unprefixed.endpoint, root=str(tmp_path)) as same:
        assert lance.dataset(namespace_client=same, table_id=["made", "db", "t"]).count_rows() == 1


def test_warehouses_with_prefixes_are_named_as_many_as_there_are(endpoint: str, tmp_path: Path) -> None:
    """The session's catalog announces a prefix per warehouse: any number of names, each its own."""
    with IcebergLanceNamespace(endpoint=endpoint, root=str(tmp_path)) as ns:
        if ns.prefix("wh_one_of_many") == "":
            pytest.skip("the session's catalog has no prefixes (LANCE_ICEBERG_NS_TEST_SERVER=docker)")
        for name in ("wh_one_of_many", "wh_two_of_many"):
            ns.create_namespace(CreateNamespaceRequest(id=[name, "db"], mode="exist_ok"))
        assert ns.list_namespaces(ListNamespacesRequest(id=["wh_two_of_many"])).namespaces == ["db"]
