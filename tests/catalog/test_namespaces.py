"""Namespace operations against the real Iceberg REST server (seed 001 semantics)."""

from __future__ import annotations

import pytest
from lance_namespace import (
    CreateNamespaceRequest,
    DeclareTableRequest,
    DescribeNamespaceRequest,
    DropNamespaceRequest,
    ListNamespacesRequest,
    NamespaceExistsRequest,
)
from lance_namespace.errors import (
    ErrorCode,
    InvalidInputError,
    LanceNamespaceError,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NamespaceNotFoundError,
)

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.catalog.warehouses import _Answer


def test_create_namespace_returns_its_properties(ns: IcebergLanceNamespace, warehouse: str) -> None:
    response = ns.create_namespace(CreateNamespaceRequest(id=[warehouse, "sales"], properties={"owner": "ana"}))
    assert response.properties["owner"] == "ana"
    described = ns.describe_namespace(DescribeNamespaceRequest(id=[warehouse, "sales"]))
    assert described.properties["owner"] == "ana"


@pytest.mark.parametrize("key", ["location", " Location", "write.data.path", "Lance-Iceberg-NS.created-by"])
def test_create_namespace_refuses_where_files_go_and_the_bridges_own_properties(
    ns: IcebergLanceNamespace, warehouse: str, key: str
) -> None:
    """A namespace's ``location`` places the tables some catalogs create in it, and the bridge's
    own keys are its bookkeeping: a client sets neither, as on a table, and nothing is made."""
    with pytest.raises(InvalidInputError):
        ns.create_namespace(CreateNamespaceRequest(id=[warehouse, "placed"], properties={key: "/elsewhere"}))
    with pytest.raises(NamespaceNotFoundError):
        ns.namespace_exists(NamespaceExistsRequest(id=[warehouse, "placed"]))


def test_create_existing_namespace_raises_namespace_already_exists(ns: IcebergLanceNamespace, db: list[str]) -> None:
    with pytest.raises(NamespaceAlreadyExistsError) as caught:
        ns.create_namespace(CreateNamespaceRequest(id=db))
    assert caught.value.code == ErrorCode.NAMESPACE_ALREADY_EXISTS == 2


def test_create_namespace_exist_ok_keeps_the_existing_one(ns: IcebergLanceNamespace, warehouse: str) -> None:
    ns.create_namespace(CreateNamespaceRequest(id=[warehouse, "a"], properties={"k": "1"}))
    response = ns.create_namespace(CreateNamespaceRequest(id=[warehouse, "a"], mode="ExistOk", properties={"k": "2"}))
    assert response.properties["k"] == "1"


def test_create_namespace_overwrite_replaces_an_empty_one(ns: IcebergLanceNamespace, warehouse: str) -> None:
    ns.create_namespace(CreateNamespaceRequest(id=[warehouse, "a"], properties={"k": "1"}))
    response = ns.create_namespace(CreateNamespaceRequest(id=[warehouse, "a"], mode="overwrite", properties={"k": "2"}))
    assert response.properties["k"] == "2"


def test_create_child_of_missing_parent_raises_namespace_not_found(ns: IcebergLanceNamespace, warehouse: str) -> None:
    with pytest.raises(NamespaceNotFoundError) as caught:
        ns.create_namespace(CreateNamespaceRequest(id=[warehouse, "missing", "child"]))
    assert caught.value.code == 1
    with pytest.raises(NamespaceNotFoundError):
        ns.namespace_exists(NamespaceExistsRequest(id=[warehouse, "missing"]))


def test_nested_namespaces_list_child_names_relative_to_the_parent(ns: IcebergLanceNamespace, warehouse: str) -> None:
    for path in (["l1"], ["l1", "l2a"], ["l1", "l2b"], ["l1", "l2a", "l3"], ["other"]):
        ns.create_namespace(CreateNamespaceRequest(id=[warehouse, *path]))
    assert ns.list_namespaces(ListNamespacesRequest(id=[warehouse])).namespaces == ["l1", "other"]
    assert ns.list_namespaces(ListNamespacesRequest(id=[warehouse, "l1"])).namespaces == ["l2a", "l2b"]
    assert ns.list_namespaces(ListNamespacesRequest(id=[warehouse, "l1", "l2a"])).namespaces == ["l3"]
    ns.namespace_exists(NamespaceExistsRequest(id=[warehouse, "l1", "l2a", "l3"]))


def test_list_namespaces_paginates(ns: IcebergLanceNamespace, warehouse: str) -> None:
    names = [f"n{i:02d}" for i in range(7)]
    for name in names:
        ns.create_namespace(CreateNamespaceRequest(id=[warehouse, name]))
    seen, token = [], None
    for _ in range(10):
        page = ns.list_namespaces(ListNamespacesRequest(id=[warehouse], limit=3, page_token=token))
        assert len(page.namespaces) <= 3
        seen += page.namespaces
        token = page.page_token
        if token is None:
            break
    assert seen == names


def test_list_children_of_missing_namespace_raises_namespace_not_found(
    ns: IcebergLanceNamespace, warehouse: str
) -> None:
    ns.create_namespace(CreateNamespaceRequest(id=[warehouse, "present"]))
    with pytest.raises(NamespaceNotFoundError):
        ns.list_namespaces(ListNamespacesRequest(id=[warehouse, "absent"]))


def test_describe_missing_namespace_raises_namespace_not_found(ns: IcebergLanceNamespace, warehouse: str) -> None:
    with pytest.raises(NamespaceNotFoundError):
        ns.describe_namespace(DescribeNamespaceRequest(id=[warehouse, "absent"]))


def test_warehouse_level_describe_and_exists(ns: IcebergLanceNamespace, warehouse: str) -> None:
    assert ns.describe_namespace(DescribeNamespaceRequest(id=[warehouse])).properties == {}
    ns.namespace_exists(NamespaceExistsRequest(id=[warehouse]))
    ns.namespace_exists(NamespaceExistsRequest(id=[]))


def test_drop_namespace_removes_it(ns: IcebergLanceNamespace, db: list[str]) -> None:
    ns.drop_namespace(DropNamespaceRequest(id=db))
    with pytest.raises(NamespaceNotFoundError):
        ns.namespace_exists(NamespaceExistsRequest(id=db))


def test_drop_missing_namespace_succeeds(ns: IcebergLanceNamespace, warehouse: str) -> None:
    ns.create_namespace(CreateNamespaceRequest(id=[warehouse, "present"]))
    assert ns.drop_namespace(DropNamespaceRequest(id=[warehouse, "absent"])).properties == {}


def test_drop_missing_namespace_with_mode_fail_raises_namespace_not_found(
    ns: IcebergLanceNamespace, warehouse: str
) -> None:
    ns.create_namespace(CreateNamespaceRequest(id=[warehouse, "present"]))
    with pytest.raises(NamespaceNotFoundError):
        ns.drop_namespace(DropNamespaceRequest(id=[warehouse, "absent"], mode="Fail"))


def test_drop_namespace_with_tables_raises_namespace_not_empty(ns: IcebergLanceNamespace, db: list[str]) -> None:
    ns.declare_table(DeclareTableRequest(id=[*db, "t"]))
    with pytest.raises(NamespaceNotEmptyError) as caught:
        ns.drop_namespace(DropNamespaceRequest(id=db))
    assert caught.value.code == ErrorCode.NAMESPACE_NOT_EMPTY == 3
    ns.namespace_exists(NamespaceExistsRequest(id=db))


def test_drop_namespace_with_child_namespace_raises_namespace_not_empty(
    ns: IcebergLanceNamespace, db: list[str]
) -> None:
    ns.create_namespace(CreateNamespaceRequest(id=[*db, "child"]))
    with pytest.raises(NamespaceNotEmptyError):
        ns.drop_namespace(DropNamespaceRequest(id=db))


def test_drop_namespace_cascade_raises_invalid_input_and_keeps_it(ns: IcebergLanceNamespace, db: list[str]) -> None:
    with pytest.raises(InvalidInputError) as caught:
        ns.drop_namespace(DropNamespaceRequest(id=db, behavior="Cascade"))
    assert caught.value.code == 13
    ns.namespace_exists(NamespaceExistsRequest(id=db))


@pytest.mark.parametrize("bad_id", [[], ["only-warehouse"]])
def test_create_or_drop_without_a_namespace_level_raises_invalid_input(
    ns: IcebergLanceNamespace, bad_id: list[str]
) -> None:
    with pytest.raises(InvalidInputError):
        ns.create_namespace(CreateNamespaceRequest(id=bad_id))
    with pytest.raises(InvalidInputError):
        ns.drop_namespace(DropNamespaceRequest(id=bad_id))


def test_namespace_operations_accept_plain_dicts(ns: IcebergLanceNamespace, warehouse: str) -> None:
    ns.create_namespace({"id": [warehouse, "fromdict"], "properties": {"a": "b"}})
    assert ns.describe_namespace({"id": [warehouse, "fromdict"]}).properties["a"] == "b"
    assert ns.list_namespaces({"id": [warehouse]}).namespaces == ["fromdict"]


@pytest.mark.parametrize("client", ["ns", "rest"])
@pytest.mark.parametrize("name", ["café", "a b", "a+b", "100%", "x&y=z", "日本"])
def test_namespaces_whose_names_need_escaping_list_and_guard_their_children(
    request: pytest.FixtureRequest, client: str, warehouse: str, name: str
) -> None:
    """The parent of a listing is encoded once: a parent whose name needs escaping is found,
    its children listed, and a drop while it has children refused (not reported done), in
    process and through the REST server."""
    ns = request.getfixturevalue(client)
    parent = [warehouse, name]
    ns.create_namespace(CreateNamespaceRequest(id=parent))
    ns.create_namespace(CreateNamespaceRequest(id=[*parent, "inner"]))
    assert ns.list_namespaces(ListNamespacesRequest(id=[warehouse])).namespaces == [name]
    assert ns.list_namespaces(ListNamespacesRequest(id=parent)).namespaces == ["inner"]
    with pytest.raises(NamespaceNotEmptyError):
        ns.drop_namespace(DropNamespaceRequest(id=parent))
    ns.namespace_exists(NamespaceExistsRequest(id=[*parent, "inner"]))
    ns.drop_namespace(DropNamespaceRequest(id=[*parent, "inner"]))
    assert ns.list_namespaces(ListNamespacesRequest(id=parent)).namespaces == []
    ns.drop_namespace(DropNamespaceRequest(id=parent))
    assert ns.list_namespaces(ListNamespacesRequest(id=[warehouse])).namespaces == []


@pytest.mark.parametrize("size", ["0", "-1", "many"])
def test_a_catalog_page_size_that_is_not_positive_is_refused_up_front(endpoint: str, size: str) -> None:
    with pytest.raises(InvalidInputError, match="rest-page-size"):
        IcebergLanceNamespace(endpoint=endpoint, **{"iceberg.rest-page-size": size})


def test_child_namespaces_are_listed_across_catalog_pages(endpoint: str, warehouse: str) -> None:
    with IcebergLanceNamespace(endpoint=endpoint, **{"iceberg.rest-page-size": "2"}) as ns:
        parent = [warehouse, "café parent"]
        ns.create_namespace(CreateNamespaceRequest(id=parent))
        children = [f"k{i} é+" for i in range(5)]
        for child in children:
            ns.create_namespace(CreateNamespaceRequest(id=[*parent, child]))
        assert ns.list_namespaces(ListNamespacesRequest(id=parent)).namespaces == children


def test_a_catalog_that_repeats_a_page_token_is_an_error_not_an_endless_listing(
    ns: IcebergLanceNamespace, db: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = ns.catalog(db[0])
    answers = []

    def same_page(*_args: object, **_kwargs: object) -> _Answer:
        answers.append(1)
        return _Answer(200, b'{"namespaces": [["x"]], "next-page-token": "again"}', None)

    monkeypatch.setattr(catalog, "_send_if_ok", same_page)
    with pytest.raises(LanceNamespaceError, match="repeated the page token"):
        ns.list_namespaces(ListNamespacesRequest(id=db))
    assert len(answers) == 2
