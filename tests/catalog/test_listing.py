"""list_tables: correctness against other clients, pagination, concurrency and request counts."""

from __future__ import annotations

from pathlib import Path

import pytest
from lance_namespace import DeclareTableRequest, DropTableRequest, ListTablesRequest
from lance_namespace.errors import TableAlreadyExistsError

from lance_iceberg_ns import IcebergLanceNamespace, companion_table_schema

from ..conftest import RequestCounter
from ..helpers import create_plain_iceberg_table, other_client, together


def _list_all(ns: IcebergLanceNamespace, db: list[str], limit: int | None = None) -> tuple[list[str], int]:
    names, token, pages = [], None, 0
    while True:
        page = ns.list_tables(ListTablesRequest(id=db, limit=limit, page_token=token))
        pages += 1
        names += page.tables
        token = page.page_token
        if token is None:
            return names, pages


def test_list_tables_paginates_across_pages_mixed_with_iceberg_tables(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, tmp_path: Path
) -> None:
    lance_names = [f"t{i:02d}" for i in range(11)]
    for name in lance_names:
        ns.declare_table(DeclareTableRequest(id=[*db, name]))
    for i in range(5):
        create_plain_iceberg_table(endpoint, db[0], (*db[1:], f"t{i:02d}_ice"), str(tmp_path / f"ice{i}"))
    names, pages = _list_all(ns, db, limit=4)
    assert names == lance_names
    assert pages == 3
    assert _list_all(ns, db)[0] == lance_names


def test_lance_table_declared_by_another_client_is_listed(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, tmp_path: Path
) -> None:
    ns.declare_table(DeclareTableRequest(id=[*db, "mine"]))
    assert _list_all(ns, db)[0] == ["mine"]  # warms the remembered types
    other_client(endpoint, db[0]).create_table(
        (*db[1:], "theirs"),
        schema=companion_table_schema(),
        location=str(tmp_path / "theirs"),
        properties={"table_type": "LANCE"},
    )
    assert _list_all(ns, db)[0] == ["mine", "theirs"]


def test_table_dropped_by_another_client_is_never_listed(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str
) -> None:
    for name in ("a", "b"):
        ns.declare_table(DeclareTableRequest(id=[*db, name]))
    assert _list_all(ns, db)[0] == ["a", "b"]
    other_client(endpoint, db[0]).drop_table((*db[1:], "a"))
    assert _list_all(ns, db)[0] == ["b"]


def test_table_dropped_through_the_namespace_is_not_listed(ns: IcebergLanceNamespace, db: list[str]) -> None:
    ns.declare_table(DeclareTableRequest(id=[*db, "a"]))
    assert _list_all(ns, db)[0] == ["a"]
    ns.drop_table(DropTableRequest(id=[*db, "a"]))
    assert _list_all(ns, db)[0] == []


def test_name_reused_with_another_type_is_seen_when_types_are_not_remembered(
    endpoint: str, lance_root: Path, db: list[str], tmp_path: Path
) -> None:
    with IcebergLanceNamespace(endpoint=endpoint, root=str(lance_root), table_type_cache_seconds="0") as ns:
        ns.declare_table(DeclareTableRequest(id=[*db, "x"]))
        assert _list_all(ns, db)[0] == ["x"]
        other = other_client(endpoint, db[0])
        other.drop_table((*db[1:], "x"))
        create_plain_iceberg_table(endpoint, db[0], (*db[1:], "x"), str(tmp_path / "x"))
        assert _list_all(ns, db)[0] == []


def test_repeated_listing_costs_one_request(
    endpoint: str, db: list[str], tmp_path: Path, request_counter: RequestCounter
) -> None:
    with IcebergLanceNamespace(endpoint=endpoint, root=str(tmp_path), auth_token="listing-test") as ns:
        for i in range(6):
            ns.declare_table(DeclareTableRequest(id=[*db, f"l{i}"]))
            create_plain_iceberg_table(endpoint, db[0], (*db[1:], f"i{i}"), str(tmp_path / f"i{i}"))
        request_counter.reset()
        assert len(ns.list_tables(ListTablesRequest(id=db)).tables) == 6
        assert request_counter.count == 1 + 6  # listTables, then the plain tables it has not seen yet
        request_counter.reset()
        assert len(ns.list_tables(ListTablesRequest(id=db)).tables) == 6
        assert request_counter.count == 1


def test_a_new_namespace_object_reuses_what_the_process_learnt(
    endpoint: str, db: list[str], tmp_path: Path, request_counter: RequestCounter
) -> None:
    for i in range(4):
        create_plain_iceberg_table(endpoint, db[0], (*db[1:], f"i{i}"), str(tmp_path / f"i{i}"))
    with IcebergLanceNamespace(endpoint=endpoint, root=str(tmp_path), auth_token="alice") as alice:
        alice.declare_table(DeclareTableRequest(id=[*db, "t"]))
        alice.list_tables(ListTablesRequest(id=db))
    request_counter.reset()
    with IcebergLanceNamespace(endpoint=endpoint, root=str(tmp_path), auth_token="alice") as again:
        assert again.list_tables(ListTablesRequest(id=db)).tables == ["t"]
    assert request_counter.count == 2  # config and listTables: no table is looked up again
    request_counter.reset()
    with IcebergLanceNamespace(endpoint=endpoint, root=str(tmp_path), auth_token="bob") as bob:
        assert bob.list_tables(ListTablesRequest(id=db)).tables == ["t"]
    assert request_counter.count == 2 + 5  # another principal learns for itself


def test_sixteen_threads_declaring_the_same_table_yield_exactly_one_success(
    ns: IcebergLanceNamespace, db: list[str]
) -> None:
    def declare(_: int) -> str:
        ns.declare_table(DeclareTableRequest(id=[*db, "contended"]))
        return "ok"

    outcomes = together(16, declare, timeout=60)
    assert outcomes.count("ok") == 1, outcomes
    failures = [o for o in outcomes if o != "ok"]
    assert len(failures) == 15
    assert all(isinstance(o, TableAlreadyExistsError) for o in failures), failures
    assert _list_all(ns, db)[0] == ["contended"]


@pytest.mark.parametrize("limit", [1, 2, 5])
def test_every_page_size_returns_every_table_once(ns: IcebergLanceNamespace, db: list[str], limit: int) -> None:
    names = [f"p{i}" for i in range(5)]
    for name in names:
        ns.declare_table(DeclareTableRequest(id=[*db, name]))
    assert _list_all(ns, db, limit=limit)[0] == names
