"""The data half of the namespace: every data operation resolves its table through the catalog,
in process and through the REST server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lance
import lance.namespace
import pyarrow as pa
import pytest
from lance_namespace import CountTableRowsRequest
from lance_namespace.errors import InvalidInputError, TableNotFoundError, TableVersionNotFoundError

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.server import serve_in_background

from ..helpers import CommandLine, create_plain_iceberg_table, write_values
from ..stores import Store

pytestmark = pytest.mark.usefixtures("store")  # every test on a local disk and on S3


def test_count_rows_sees_the_latest_version_with_a_predicate_and_at_a_version(
    ns: IcebergLanceNamespace, db: list[str], rest: lance.namespace.RestNamespace
) -> None:
    table_id = [*db, "t"]
    write_values(ns, table_id, list(range(10)))
    assert ns.count_table_rows(CountTableRowsRequest(id=table_id)).count == 10
    write_values(ns, table_id, [100, 101], mode="append")  # another writer: seen at once
    assert ns.count_table_rows(CountTableRowsRequest(id=table_id)).count == 12
    assert ns.count_table_rows({"id": table_id, "predicate": "v >= 100"}).count == 2
    assert ns.count_table_rows({"id": table_id, "version": 1}).count == 10
    assert rest.count_table_rows(CountTableRowsRequest(id=table_id, predicate="v < 3")).count == 3
    with pytest.raises(InvalidInputError):
        ns.count_table_rows({"id": table_id, "predicate": "nope >"})
    with pytest.raises(InvalidInputError):
        rest.count_table_rows(CountTableRowsRequest(id=table_id, predicate="missing_column = 1"))
    with pytest.raises(TableVersionNotFoundError):
        ns.count_table_rows({"id": table_id, "version": 99})


def test_data_operations_go_through_the_catalog(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, tmp_path: Path
) -> None:
    write_values(ns, [*db, "gone"], [1])
    ns.drop_table({"id": [*db, "gone"]})  # soft-deleted: not found for data operations
    with pytest.raises(TableNotFoundError):
        ns.count_table_rows({"id": [*db, "gone"]})
    create_plain_iceberg_table(endpoint, db[0], (db[1], "plain"), str(tmp_path / "plain"))  # the catalog's own
    with pytest.raises(InvalidInputError, match="not a Lance table"):
        ns.count_table_rows({"id": [*db, "plain"]})


def test_reads_answer_for_the_table_the_catalog_names_now(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store
) -> None:
    """A read starts on the place the catalog named last time while the catalog is asked again;
    another process's rename, re-create and drops must still be seen at once."""
    table_id, archived = [*db, "t"], [*db, "t_old"]
    write_values(ns, table_id, [1, 2, 3])
    assert ns.count_table_rows({"id": table_id}).count == 3  # the place is now known
    for soft_delete in ("true", "false"):
        other = store.namespace(endpoint, soft_delete=soft_delete)
        other.rename_table({"id": table_id, "new_table_name": archived[-1]})
        write_values(other, table_id, [7] * 5)  # a new table under the name, at a new location
        assert ns.count_table_rows({"id": table_id}).count == 5
        assert ns.count_table_rows({"id": archived}).count == 3
        other.drop_table({"id": table_id})
        with pytest.raises(TableNotFoundError):
            ns.count_table_rows({"id": table_id})
        with pytest.raises(TableNotFoundError):
            ns.query_table({"id": table_id, "k": 10, "vector": {}})
        other.rename_table({"id": archived, "new_table_name": table_id[-1]})
        assert ns.count_table_rows({"id": table_id}).count == 3
        other.close()


def test_a_location_used_again_after_a_hard_drop_answers_for_the_new_table(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store
) -> None:
    """An explicit location is free again once its table is dropped for good; the dataset kept
    for the old table, at the same version number, must not answer for the new one."""
    table_id, location = [*db, "t"], store.at(*db, "t.lance")
    with store.namespace(endpoint, soft_delete="false") as other:
        versions = []
        for values in ([1, 2, 3], [7, 7]):
            other.declare_table({"id": table_id, "location": location})
            write_values(other, table_id, values, mode="overwrite")
            versions.append(other.describe_table({"id": table_id}).version)
            assert ns.count_table_rows({"id": table_id}).count == len(values)
            answer = pa.ipc.open_file(ns.query_table({"id": table_id, "k": 10, "vector": {}}).data).read_all()
            assert answer.column("v").to_pylist() == values
            other.drop_table({"id": table_id})
        assert versions[0] == versions[1]  # the same version number, another table


def test_discovery_lists_warehouses_at_the_root_and_no_tables_in_a_warehouse(
    endpoint: str, store: Store, warehouse: str
) -> None:
    other = f"{warehouse}_b"
    properties = {**store.properties, "warehouses": f"{warehouse},{other}"}
    with IcebergLanceNamespace(endpoint=endpoint, root=store.root, **properties) as ns:
        assert ns.list_namespaces({"id": []}).namespaces == sorted([warehouse, other])
        assert ns.list_namespaces({"id": [], "limit": 1}).page_token == min(warehouse, other)
        ns.create_namespace({"id": [warehouse, "db"]})
        assert ns.list_tables({"id": [warehouse]}).tables == []
        assert ns.list_tables({"id": []}).tables == []


def test_list_all_tables_walks_a_warehouse_with_pages(
    ns: IcebergLanceNamespace, warehouse: str, endpoint: str, tmp_path: Path
) -> None:
    for namespace in ([warehouse, "a"], [warehouse, "a", "deep"], [warehouse, "b"]):
        ns.create_namespace({"id": namespace})
        write_values(ns, [*namespace, "t"], [1])
    ns.declare_table({"id": [warehouse, "b", "declared"]})
    write_values(ns, [warehouse, "b", "gone"], [1])
    ns.drop_table({"id": [warehouse, "b", "gone"]})  # soft-deleted: not listed
    create_plain_iceberg_table(endpoint, warehouse, ("b", "plain"), str(tmp_path / "plain"))
    everything = [f"{warehouse}$a$deep$t", f"{warehouse}$a$t", f"{warehouse}$b$declared", f"{warehouse}$b$t"]
    assert ns.list_all_tables({"id": [warehouse]}).tables == everything
    assert ns.list_all_tables({"id": [warehouse, "a"]}).tables == everything[:2]
    assert f"{warehouse}$b$declared" not in ns.list_all_tables({"id": [warehouse], "include_declared": False}).tables
    first = ns.list_all_tables({"id": [warehouse], "limit": 3})
    rest = ns.list_all_tables({"id": [warehouse], "limit": 3, "page_token": first.page_token})
    assert first.tables + rest.tables == everything and rest.page_token is None


def test_cli_lists_tables_recursively(ns: IcebergLanceNamespace, warehouse: str, cli: CommandLine) -> None:
    for namespace in ([warehouse, "a"], [warehouse, "a", "deep"]):
        ns.create_namespace({"id": namespace})
        write_values(ns, [*namespace, "t"], [1])
    listed = cli.json("tables", "list", warehouse, "--recursive")
    assert listed["tables"] == [f"{warehouse}.a.deep.t", f"{warehouse}.a.t"]


def test_data_routes_have_their_own_streamed_body_limit(endpoint: str, store: Store, db: list[str]) -> None:
    import requests

    properties = {"endpoint": endpoint, "root": store.root, **store.properties}
    with serve_in_background(properties=properties, max_body_bytes=1_000, max_data_body_bytes=10_000) as running:
        table = f"{running.uri}/v1/table/{'$'.join([*db, 't'])}"

        def chunks(size: int) -> Iterator[bytes]:  # no Content-Length: the limit holds as it streams
            yield from (b"x" * 1_000 for _ in range(size // 1_000))

        for body in (b"x" * 5_000, chunks(5_000)):
            answer = requests.post(f"{table}/insert", data=body, timeout=30)
            assert answer.status_code != 413, answer.text  # under the data limit, over the JSON one
        for body in (b"x" * 20_000, chunks(20_000)):
            answer = requests.post(f"{table}/insert", data=body, timeout=30)
            assert (answer.status_code, answer.json()["code"]) == (413, 13)
        answer = requests.post(f"{table}/describe", data=b"{" + b" " * 5_000 + b"}", timeout=30)
        assert answer.status_code == 413
