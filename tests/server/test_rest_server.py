"""The Lance REST Namespace server, driven by pylance's own REST client and by raw HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lance
import lance.namespace
import lancedb
import pyarrow as pa
import pytest
import requests
from lance_namespace import (
    CreateNamespaceRequest,
    CreateTableIndexRequest,
    DeclareTableRequest,
    DeregisterTableRequest,
    DescribeNamespaceRequest,
    DescribeTableIndexStatsRequest,
    DescribeTableRequest,
    DescribeTransactionRequest,
    DropNamespaceRequest,
    DropTableIndexRequest,
    DropTableRequest,
    LanceNamespace,
    ListNamespacesRequest,
    ListTableIndicesRequest,
    ListTablesRequest,
    ListTableVersionsRequest,
    NamespaceExistsRequest,
    RegisterTableRequest,
    RenameTableRequest,
    RestoreTableRequest,
    TableExistsRequest,
)
from lance_namespace.errors import (
    ErrorCode,
    InvalidInputError,
    NamespaceNotEmptyError,
    NamespaceNotFoundError,
    TableAlreadyExistsError,
    TableNotFoundError,
    TableVersionNotFoundError,
    UnsupportedOperationError,
    from_error_code,
)

from lance_iceberg_ns.errors import http_status_for
from lance_iceberg_ns.server import RunningServer, serve_in_background

from ..stubs import OAuthRecordingStub


@pytest.fixture
def client(server: RunningServer) -> lance.namespace.RestNamespace:
    """pylance's native (Rust) REST client."""
    return lance.namespace.RestNamespace(uri=server.uri)


def test_pylance_rest_client_drives_every_supported_operation(
    client: lance.namespace.RestNamespace, warehouse: str, lance_root: Path
) -> None:
    db = [warehouse, "db"]
    client.create_namespace(CreateNamespaceRequest(id=db, properties={"owner": "ana"}))
    client.create_namespace(CreateNamespaceRequest(id=[*db, "child"]))
    with pytest.raises(NamespaceNotEmptyError):
        client.drop_namespace(DropNamespaceRequest(id=db))
    client.drop_namespace(DropNamespaceRequest(id=[*db, "child"]))
    assert client.list_namespaces(ListNamespacesRequest(id=[warehouse])).namespaces == ["db"]
    assert client.describe_namespace(DescribeNamespaceRequest(id=db)).properties["owner"] == "ana"
    client.namespace_exists(NamespaceExistsRequest(id=db))
    with pytest.raises(NamespaceNotFoundError):
        client.namespace_exists(NamespaceExistsRequest(id=[warehouse, "absent"]))

    for name in ("a", "b", "c"):
        client.declare_table(DeclareTableRequest(id=[*db, name]))
    with pytest.raises(TableAlreadyExistsError):
        client.declare_table(DeclareTableRequest(id=[*db, "a"]))
    first = client.list_tables(ListTablesRequest(id=db, limit=2))
    rest = client.list_tables(ListTablesRequest(id=db, limit=2, page_token=first.page_token))
    assert (first.tables, rest.tables, rest.page_token) == (["a", "b"], ["c"], None)
    client.table_exists(TableExistsRequest(id=[*db, "a"]))
    with pytest.raises(TableNotFoundError):
        client.describe_table(DescribeTableRequest(id=[*db, "absent"]))

    client.rename_table(RenameTableRequest(id=[*db, "c"], new_table_name="renamed"))
    assert client.list_tables(ListTablesRequest(id=db)).tables == ["a", "b", "renamed"]
    dropped = client.drop_table(DropTableRequest(id=[*db, "b"]))
    assert dropped.location.rsplit("/", 1)[1].startswith("b-")

    data_location = str(lance_root / "ext" / "existing.lance")
    lance.write_dataset(pa.table({"x": [1, 2]}), data_location)
    registered = client.register_table(RegisterTableRequest(id=[*db, "registered"], location=data_location))
    assert registered.location == data_location
    gone = client.deregister_table(DeregisterTableRequest(id=[*db, "registered"]))
    assert gone.location == data_location and lance.dataset(data_location).count_rows() == 2
    assert client.list_tables(ListTablesRequest(id=db)).tables == ["a", "renamed"]


def test_lance_writes_and_reads_through_the_rest_client(client: lance.namespace.RestNamespace, warehouse: str) -> None:
    client.create_namespace(CreateNamespaceRequest(id=[warehouse, "db"]))
    table_id = [warehouse, "db", "events"]
    lance.write_dataset(pa.table({"id": [1, 2, 3]}), namespace_client=client, table_id=table_id, mode="create")
    lance.write_dataset(pa.table({"id": [4]}), namespace_client=client, table_id=table_id, mode="append")
    lance.write_dataset(pa.table({"id": [7]}), namespace_client=client, table_id=table_id, mode="overwrite")
    assert lance.dataset(namespace_client=client, table_id=table_id).to_table().column("id").to_pylist() == [7]
    assert lance.dataset(namespace_client=client, table_id=table_id, version=2).count_rows() == 4
    detailed = client.describe_table(DescribeTableRequest(id=table_id, load_detailed_metadata=True))
    assert detailed.version == 3
    # pylance's REST client takes and answers a dict for describe_table_version
    listed = client.list_table_versions(ListTableVersionsRequest(id=table_id, descending=True, limit=2))
    assert [v.version for v in listed.versions] == [3, 2] and listed.page_token == "2"
    client.restore_table(RestoreTableRequest(id=table_id, version=2))
    restored = client.describe_table_version({"id": table_id})["version"]
    assert restored["version"] == 4 and restored["metadata"]["total_rows"] == "4"
    with pytest.raises(TableVersionNotFoundError):
        client.describe_table_version({"id": table_id, "version": 42})


def test_lancedb_over_the_rest_server(server: RunningServer, warehouse: str) -> None:
    db = lancedb.connect_namespace("rest", {"uri": server.uri})
    lance.namespace.RestNamespace(uri=server.uri).create_namespace(CreateNamespaceRequest(id=[warehouse, "db"]))
    data = pa.table({"id": [1, 2], "vector": pa.array([[1.0, 0.0], [0.0, 1.0]], pa.list_(pa.float32(), 2))})
    db.create_table("vectors", data, namespace_path=[warehouse, "db"])
    assert list(db.list_tables(namespace_path=[warehouse, "db"]).tables) == ["vectors"]
    assert db.open_table("vectors", namespace_path=[warehouse, "db"]).count_rows() == 2


def test_unsupported_operations_answer_code_0_and_406(
    client: lance.namespace.RestNamespace, server: RunningServer
) -> None:
    response = requests.post(f"{server.uri}/v1/transaction/wh$db$t/describe", json={})
    assert response.status_code == 406
    assert response.json()["code"] == 0
    with pytest.raises(UnsupportedOperationError):
        client.describe_transaction(DescribeTransactionRequest(id=["wh", "db", "t"]))


def test_delimiter_can_be_chosen_per_request(server: RunningServer, warehouse: str) -> None:
    requests.post(f"{server.uri}/v1/namespace/{warehouse}::db/create", params={"delimiter": "::"}, json={})
    listed = requests.get(f"{server.uri}/v1/namespace/{warehouse}/list").json()
    assert listed["namespaces"] == ["db"]
    described = requests.post(f"{server.uri}/v1/namespace/{warehouse}$db/describe", json={})
    assert described.status_code == 200


def test_root_namespace_is_the_delimiter_itself(server: RunningServer) -> None:
    assert requests.post(f"{server.uri}/v1/namespace/$/exists", json={}).status_code == 200
    assert requests.post(f"{server.uri}/v1/namespace/::/exists", params={"delimiter": "::"}, json={}).status_code == 200


class RaisingNamespace(LanceNamespace):
    """A fake backend (named as such) whose describe_table raises the error with the code it is
    asked for, to check the wire mapping of every code."""

    def namespace_id(self) -> str:
        return "RaisingNamespace"

    def describe_table(self, request: DescribeTableRequest) -> None:  # type: ignore[override]
        code = int(request.id[-1])  # type: ignore[index]
        raise from_error_code(code, f"raised code {code}")


@pytest.mark.parametrize("code", [int(code) for code in ErrorCode])
def test_every_error_code_has_its_status_and_body(code: int) -> None:
    with serve_in_background(RaisingNamespace()) as running:
        response = requests.post(f"{running.uri}/v1/table/a$b${code}/describe", json={})
    assert response.status_code == http_status_for(code)
    body = response.json()
    assert body["code"] == code
    assert body["error"].endswith(f"raised code {code}")
    assert body["instance"] == f"/v1/table/a$b${code}/describe"
    assert body["detail"] == type(from_error_code(code, "")).__name__  # the Lance error type, not ours


JSON_HEADERS = {"content-type": "application/json"}
SPEC_STATUS = {0: 406, 1: 404, 2: 409, 3: 409, 4: 404, 5: 409, 13: 400, 14: 409, 15: 403, 16: 401, 17: 503, 18: 500}


def test_status_table_matches_the_spec() -> None:
    assert {code: http_status_for(code) for code in SPEC_STATUS} == SPEC_STATUS
    assert http_status_for(11) == 404 and http_status_for(19) == 409 and http_status_for(20) == 400


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "code"),
    [
        ("POST", "/v1/table/wh$db$t/describe", {"data": "{not json", "headers": JSON_HEADERS}, 400, 13),
        ("POST", "/v1/table/wh$db$t/describe", {"json": {"version": "seven"}}, 400, 13),
        ("POST", "/v1/table/wh$db$t/describe", {"json": {"load_detailed_metadata": "yes"}}, 400, 13),
        ("POST", "/v1/table/wh$db$t/describe", {"json": [1, 2]}, 400, 13),
        ("POST", "/v1/namespace/wh/create", {"json": {"properties": {"k": 1}}}, 400, 13),
        ("GET", "/v1/namespace/wh/list", {"params": {"limit": "many"}}, 400, 13),
        ("GET", "/v1/no/such/route", {}, 404, 0),
        ("DELETE", "/v1/table/wh$db$t/describe", {}, 405, 0),
        ("POST", "/v1/table/wh$db$t/describe", {"data": b"{" + b" " * (17 * 1024 * 1024) + b"}"}, 413, 13),
    ],
    ids=["malformed-json", "wrong-type", "wrong-bool", "not-an-object", "bad-map-value", "bad-query", "unknown-route",
         "wrong-method", "oversized"],
)  # fmt: skip
def test_bad_requests_get_a_4xx_with_the_error_body(
    server: RunningServer, method: str, path: str, kwargs: dict, status: int, code: int
) -> None:
    response = requests.request(method, server.uri + path, timeout=30, **kwargs)
    assert response.status_code == status
    body = response.json()
    assert body["code"] == code and body["instance"] == path and body["error"]


@pytest.mark.parametrize("path", ["/v1/namespace/wh/list", "/v1/namespace/wh$db/table/list", "/v1/table"])
def test_a_route_answers_only_its_own_method(server: RunningServer, path: str) -> None:
    """HEAD is not GET: the spec's listing routes answer GET alone (no listing runs for a HEAD)."""
    assert requests.head(server.uri + path, timeout=30).status_code == 405
    assert requests.get(server.uri + path, timeout=30).status_code != 405


def test_oversized_streamed_body_is_refused(server: RunningServer) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"id": ["'
        for _ in range(40):
            yield b"x" * (512 * 1024)
        yield b'"]}'

    response = requests.post(f"{server.uri}/v1/table/wh$db$t/describe", data=chunks(), timeout=30)
    assert response.status_code == 413
    assert response.json()["code"] == 13


def test_server_requires_a_configured_bearer_token(endpoint: str, lance_root: Path, warehouse: str) -> None:
    properties = {"endpoint": endpoint, "root": str(lance_root)}
    with serve_in_background(properties=properties, auth_tokens=["team-token", "ci-token"]) as running:
        url = f"{running.uri}/v1/namespace/{warehouse}/list"
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic team-token"}):
            response = requests.get(url, headers=headers)
            assert response.status_code == 401
            assert response.json()["code"] == 16
            assert "team-token" not in response.text
        assert requests.get(url, headers={"Authorization": "Bearer ci-token"}).status_code == 200
        assert requests.get(f"{running.uri}/openapi.json").status_code == 200
        authorized = lance.namespace.RestNamespace(uri=running.uri, **{"header.Authorization": "Bearer team-token"})
        authorized.create_namespace(CreateNamespaceRequest(id=[warehouse, "db"]))
        anonymous = lance.namespace.RestNamespace(uri=running.uri)
        with pytest.raises(Exception) as caught:
            anonymous.list_namespaces(ListNamespacesRequest(id=[warehouse]))
        assert getattr(caught.value, "code", None) == ErrorCode.UNAUTHENTICATED


def test_callers_bearer_token_is_forwarded_to_the_catalog(tmp_path: Path) -> None:
    catalog = OAuthRecordingStub()
    try:
        with serve_in_background(
            properties={"endpoint": catalog.endpoint, "root": str(tmp_path)}, forward_bearer_token=True
        ) as running:
            for user in ("alice", "bob"):
                client = lance.namespace.RestNamespace(
                    uri=running.uri, **{"header.Authorization": f"Bearer {user}-token"}
                )
                assert client.list_namespaces(ListNamespacesRequest(id=["wh"])).namespaces == ["sales"]
            anonymous = requests.get(f"{running.uri}/v1/namespace/wh/list")
            assert anonymous.status_code == 401
    finally:
        catalog.close()
    assert catalog.authorizations == ["Bearer alice-token", "Bearer bob-token"]


def test_openapi_document_lists_every_route(server: RunningServer) -> None:
    document = requests.get(f"{server.uri}/openapi.json").json()
    assert "/v1/table/{id}/describe" in document["paths"]
    assert "post" in document["paths"]["/v1/namespace/{id}/create"]
    assert "get" in document["paths"]["/v1/namespace/{id}/table/list"]
    assert len(document["paths"]) >= 50
    assert "servers" not in document
    assert requests.head(f"{server.uri}/openapi.json").status_code == 200


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_openapi_document_names_the_path_a_proxy_mounts_the_server_under(endpoint: str, lance_root: Path) -> None:
    from fastapi.testclient import TestClient

    from lance_iceberg_ns.server import create_app

    app = create_app(properties={"endpoint": endpoint, "root": str(lance_root)})
    document = TestClient(app, root_path="/lance/").get("/openapi.json").json()
    assert document["servers"] == [{"url": "/lance"}]
    assert "/v1/table/{id}/describe" in document["paths"]


def test_invalid_identifier_through_the_server_is_invalid_input(server: RunningServer, warehouse: str) -> None:
    response = requests.post(f"{server.uri}/v1/table/{warehouse}$db$../describe", json={})
    assert response.status_code == 400
    with pytest.raises(InvalidInputError):
        lance.namespace.RestNamespace(uri=server.uri).declare_table(DeclareTableRequest(id=[warehouse, "db", ".."]))


def test_every_route_names_a_real_operation_and_request_model() -> None:
    import lance_namespace

    from lance_iceberg_ns.server.routes import ROUTES

    assert len({route.operation for route in ROUTES}) == len(ROUTES) == 54
    for route in ROUTES:
        assert hasattr(LanceNamespace, route.operation), route.operation
        model = getattr(lance_namespace, route.model)  # derived: describe_table → DescribeTableRequest
        assert all(field in model.model_fields for field in route.query), route


def test_identifiers_in_the_path_are_read_as_lance_clients_encode_them(server: RunningServer, warehouse: str) -> None:
    """Lance's generated clients form-encode the path: ``+`` is a space, ``%2B`` a plus."""
    for raw in ("a+b", "a%2Bb", "a%20c"):
        answer = requests.post(f"{server.uri}/v1/namespace/{warehouse}%24{raw}/create", json={})
        assert answer.status_code == 200, answer.text
    # an escaped "/" moves the segments: the one routed on is read as Starlette decoded it
    assert requests.post(f"{server.uri}/v1/namespace/{warehouse}%24d+e%2Fcreate", json={}).status_code == 200
    listed = requests.get(f"{server.uri}/v1/namespace/{warehouse}/list").json()["namespaces"]
    assert listed == ["a b", "a c", "a+b", "d+e"]
    assert requests.get(f"{server.uri}/v1/namespace/{warehouse}%24a+b/list").status_code == 200


def test_the_path_names_the_object_whatever_the_body_says(server: RunningServer, warehouse: str) -> None:
    """DuckDB's Lance extension names only the table in the body; the path's identifier wins."""
    answer = requests.post(f"{server.uri}/v1/namespace/{warehouse}$one/create", json={"id": ["two"]})
    assert answer.status_code == 200, answer.text
    assert requests.get(f"{server.uri}/v1/namespace/{warehouse}/list").json()["namespaces"] == ["one"]
    bad_utf8 = requests.post(f"{server.uri}/v1/namespace/{warehouse}$%FF/create", json={})
    assert bad_utf8.status_code == 400 and bad_utf8.json()["code"] == ErrorCode.INVALID_INPUT


def test_a_table_whose_name_has_a_space_works_through_pylance_and_lancedb(
    client: lance.namespace.RestNamespace, server: RunningServer, warehouse: str
) -> None:
    db = [warehouse, "my db"]
    client.create_namespace(CreateNamespaceRequest(id=db))
    lance.write_dataset(pa.table({"x": [1, 2, 3]}), namespace_client=client, table_id=[*db, "my table"])
    assert client.list_tables(ListTablesRequest(id=db)).tables == ["my table"]
    assert lance.dataset(namespace_client=client, table_id=[*db, "my table"]).count_rows() == 3
    connection = lancedb.connect_namespace("rest", {"uri": server.uri})
    assert connection.open_table("my table", namespace_path=db).count_rows() == 3
    table_id = [*db, "my table"]
    client.create_table_scalar_index(CreateTableIndexRequest(id=table_id, column="x", index_type="BTREE", name="x a+b"))
    stats = client.describe_table_index_stats(DescribeTableIndexStatsRequest(id=table_id, index_name="x a+b"))
    assert stats.num_indexed_rows == 3
    client.drop_table_index(DropTableIndexRequest(id=table_id, index_name="x a+b"))
    assert client.list_table_indices(ListTableIndicesRequest(id=table_id)).indexes == []


def test_a_literal_plus_is_honoured_when_the_body_names_it_so(server: RunningServer, warehouse: str) -> None:
    """curl sends ``+`` literally (RFC 3986); a body naming ``a+b`` makes the path mean ``a+b``."""
    for name in ("a b", "a+b"):
        quoted = name.replace(" ", "%20").replace("+", "%2B")
        assert requests.post(f"{server.uri}/v1/namespace/{warehouse}%24{quoted}/create", json={}).status_code == 200
    dropped = requests.post(f"{server.uri}/v1/namespace/{warehouse}$a+b/drop", json={"id": [warehouse, "a+b"]})
    assert dropped.status_code == 200, dropped.text
    assert requests.get(f"{server.uri}/v1/namespace/{warehouse}/list").json()["namespaces"] == ["a b"]
    plus_delimited = requests.post(f"{server.uri}/v1/namespace/{warehouse}+x/create?delimiter=%2B", json={})
    assert plus_delimited.status_code == 200
    assert requests.get(f"{server.uri}/v1/namespace/{warehouse}/list").json()["namespaces"] == ["a b", "x"]
