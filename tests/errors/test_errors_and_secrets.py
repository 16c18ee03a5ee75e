"""Failures become typed lance_namespace errors; secrets never show; the namespace pickles."""

from __future__ import annotations

import json
import logging
import pickle
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance_namespace import ListNamespacesRequest, ListTablesRequest, connect
from lance_namespace.errors import (
    ErrorCode,
    InternalError,
    InvalidInputError,
    LanceNamespaceError,
    PermissionDeniedError,
    ServiceUnavailableError,
    TableNotFoundError,
    ThrottlingError,
    UnauthenticatedError,
    from_error_code,
)

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.errors import HTTP_STATUS, ExitCode, exit_code_for, http_status_for, is_refusal

from ..stubs import OAuthRecordingStub, StatusStubServer

SECRET_TOKEN = "tok-SECRET-5f1a9c"
SECRET_CLIENT = "client-SECRET-77ab"
SECRET_STORAGE_KEY = "storage-SECRET-0d3e"


@pytest.fixture
def stub() -> Iterator[type[StatusStubServer]]:
    servers: list[StatusStubServer] = []

    def make(status: int, message: str = "injected failure") -> StatusStubServer:
        server = StatusStubServer(status, message)
        servers.append(server)
        return server

    yield make  # type: ignore[misc]
    for server in servers:
        server.close()


@pytest.mark.parametrize(
    ("status", "error_class", "code"),
    [
        (401, UnauthenticatedError, 16),
        (403, PermissionDeniedError, 15),
        (503, ServiceUnavailableError, 17),
        (429, ThrottlingError, 21),
        (500, InternalError, 18),
        (418, InternalError, 18),
    ],
)
def test_http_failures_become_typed_errors_with_the_server_message(
    stub: type[StatusStubServer], tmp_path: Path, status: int, error_class: type[LanceNamespaceError], code: int
) -> None:
    server = stub(status, "the server's own words")
    ns = IcebergLanceNamespace(endpoint=server.endpoint, root=str(tmp_path), max_retries="0")
    with ns, pytest.raises(error_class) as caught:
        ns.list_tables(ListTablesRequest(id=["wh", "db"]))
    assert caught.value.code == code
    assert "the server's own words" in str(caught.value)


def test_connection_refused_is_service_unavailable(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ns = IcebergLanceNamespace(endpoint=f"http://127.0.0.1:{port}", root=str(tmp_path), max_retries="1")
    with ns, pytest.raises(ServiceUnavailableError) as caught:
        ns.list_namespaces(ListNamespacesRequest(id=["wh"]))
    assert caught.value.code == ErrorCode.SERVICE_UNAVAILABLE


# Every code's HTTP status (the spec's table, 429 for Throttling) and exit code (docs/cli.md), as
# they were before one table held them: the table must reproduce each, and name every code.
STATUS_AND_EXIT_CODE = {
    ErrorCode.UNSUPPORTED: (406, 7),
    ErrorCode.NAMESPACE_NOT_FOUND: (404, 3),
    ErrorCode.NAMESPACE_ALREADY_EXISTS: (409, 4),
    ErrorCode.NAMESPACE_NOT_EMPTY: (409, 4),
    ErrorCode.TABLE_NOT_FOUND: (404, 3),
    ErrorCode.TABLE_ALREADY_EXISTS: (409, 4),
    ErrorCode.TABLE_INDEX_NOT_FOUND: (404, 3),
    ErrorCode.TABLE_INDEX_ALREADY_EXISTS: (409, 4),
    ErrorCode.TABLE_TAG_NOT_FOUND: (404, 3),
    ErrorCode.TABLE_TAG_ALREADY_EXISTS: (409, 4),
    ErrorCode.TRANSACTION_NOT_FOUND: (404, 3),
    ErrorCode.TABLE_VERSION_NOT_FOUND: (404, 3),
    ErrorCode.TABLE_COLUMN_NOT_FOUND: (404, 3),
    ErrorCode.INVALID_INPUT: (400, 2),
    ErrorCode.CONCURRENT_MODIFICATION: (409, 4),
    ErrorCode.PERMISSION_DENIED: (403, 6),
    ErrorCode.UNAUTHENTICATED: (401, 6),
    ErrorCode.SERVICE_UNAVAILABLE: (503, 5),
    ErrorCode.INTERNAL: (500, 1),
    ErrorCode.INVALID_TABLE_STATE: (409, 4),
    ErrorCode.TABLE_SCHEMA_VALIDATION_ERROR: (400, 2),
    ErrorCode.THROTTLING: (429, 5),
    ErrorCode.TABLE_BRANCH_NOT_FOUND: (404, 3),
    ErrorCode.TABLE_BRANCH_ALREADY_EXISTS: (409, 4),
}


def test_every_error_code_keeps_its_http_status_and_exit_code() -> None:
    assert set(HTTP_STATUS) == set(ErrorCode) == set(STATUS_AND_EXIT_CODE)
    assert {code: (http_status_for(code), exit_code_for(code)) for code in ErrorCode} == STATUS_AND_EXIT_CODE
    # the wire and the command line hand over plain ints
    assert {int(code): http_status_for(int(code)) for code in ErrorCode} == {
        int(code): status for code, (status, _exit) in STATUS_AND_EXIT_CODE.items()
    }


def test_an_error_code_not_in_the_table_is_an_unexpected_server_error() -> None:
    for unknown in (-1, len(ErrorCode), 999):
        assert (http_status_for(unknown), exit_code_for(unknown), is_refusal(unknown)) == (500, 1, False)


def test_only_a_4xx_is_a_refusal() -> None:
    refused = {code for code, (status, _exit) in STATUS_AND_EXIT_CODE.items() if status < 500}
    assert {code for code in ErrorCode if is_refusal(code)} == refused
    assert set(ErrorCode) - refused == {ErrorCode.SERVICE_UNAVAILABLE, ErrorCode.INTERNAL}


def test_the_command_line_exits_by_the_table() -> None:
    """The command line's own exit codes (kept apart so that it starts without lance_namespace) are
    the table's numbers, and its exit code for a Lance error is the table's."""
    from lance_iceberg_ns import cli
    from lance_iceberg_ns.cli import base

    assert (base.EXIT_UNEXPECTED, base.EXIT_USAGE, base.EXIT_UNAVAILABLE) == (
        ExitCode.UNEXPECTED,
        ExitCode.INVALID_INPUT,
        ExitCode.UNAVAILABLE,
    )
    assert {code: cli.exit_code_for(code) for code in ErrorCode} == {
        code: exit_code for code, (_status, exit_code) in STATUS_AND_EXIT_CODE.items()
    }


def test_the_errors_page_shows_the_table() -> None:
    """docs/errors.md's table of status, codes and exit code: each row's codes answer with its
    statuses and exit with its code, and every code has its row."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "errors.md").read_text()
    rows = re.findall(r"^\| (\d[^|]*) \| (\d[^|]*) \| (\d) [^|]+ \|$", page, re.MULTILINE)
    shown = {
        ErrorCode(int(code)): (statuses, int(exit_code))
        for statuses, codes, exit_code in rows
        for code in re.findall(r"\d+", codes)
    }
    assert set(shown) == set(ErrorCode)
    for code, (statuses, exit_code) in shown.items():
        assert str(http_status_for(code)) in re.findall(r"\d+", statuses) and exit_code == exit_code_for(code), code


@pytest.mark.parametrize("code", list(ErrorCode), ids=[code.name for code in ErrorCode])
def test_an_atomic_commit_deletes_its_files_only_when_the_catalog_refused_it(
    code: ErrorCode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refusal (4xx) published nothing, so the commit's files go; after a 5xx the commit may have
    landed and they stay. Staging and publishing are replaced by fakes that fail with each code."""
    from lance_iceberg_ns.jobs import atomic

    discarded: list[object] = []

    def publish_fails(*_args: object) -> None:
        raise from_error_code(int(code), "injected")

    monkeypatch.setattr(atomic, "stage_all", lambda staging, writes: None)
    monkeypatch.setattr(atomic, "publish", publish_fails)
    monkeypatch.setattr(atomic, "discard_all", lambda staging, writes: discarded.append(writes))
    with pytest.raises(LanceNamespaceError) as caught:
        atomic.commit_together(None, None, [])  # type: ignore[arg-type]
    assert caught.value.code == code
    assert bool(discarded) == (STATUS_AND_EXIT_CODE[code][0] < 500) == is_refusal(code)


@pytest.mark.parametrize(
    "properties",
    [
        {},
        {"endpoint": "localhost:8181"},
        {"endpoint": "ftp://catalog"},
        {"endpoint": "http://x", "connect_timeout": "soon"},
        {"endpoint": "http://x", "max_retries": "-1"},
        {"endpoint": "http://x", "read_timeout": "0"},
    ],
)
def test_bad_properties_raise_invalid_input(properties: dict[str, str]) -> None:
    with pytest.raises(InvalidInputError) as caught:
        IcebergLanceNamespace(**properties)
    assert caught.value.code == 13


def test_relative_root_becomes_absolute(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert IcebergLanceNamespace(endpoint="http://x", root="data").settings.root == str(tmp_path / "data")
    assert IcebergLanceNamespace(endpoint="http://x").settings.root is None  # catalog-assigned locations


def test_connect_finds_the_iceberg_implementation(endpoint: str, tmp_path: Path) -> None:
    ns = connect("iceberg", {"endpoint": endpoint, "root": str(tmp_path)})
    assert isinstance(ns, IcebergLanceNamespace)


def _secret_namespace(endpoint: str, root: Path) -> IcebergLanceNamespace:
    return IcebergLanceNamespace(
        endpoint=endpoint,
        root=str(root),
        auth_token=SECRET_TOKEN,
        **{"storage.aws_secret_access_key": SECRET_STORAGE_KEY, "iceberg.header.X-Api-Key": SECRET_CLIENT},
    )


def test_no_secret_in_repr_namespace_id_logs_or_errors(
    stub: type[StatusStubServer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server = stub(500, "boom")  # echoes the Authorization header back in its message
    ns = _secret_namespace(server.endpoint, tmp_path)
    with pytest.raises(InternalError) as caught:
        ns.list_tables(ListTablesRequest(id=["wh", "db"]))
    texts = [repr(ns), ns.namespace_id(), str(caught.value), repr(caught.value), caplog.text, repr(ns.settings)]
    assert caught.value.__cause__ is None  # the original exception carried the token
    for text in texts:
        for secret in (SECRET_TOKEN, SECRET_CLIENT, SECRET_STORAGE_KEY):
            assert secret not in text
    assert "***" in str(caught.value)


def test_password_in_the_endpoint_is_a_secret() -> None:
    ns = IcebergLanceNamespace(endpoint="https://svc:pa55word@catalog.example.com")
    assert "pa55word" not in repr(ns) and "pa55word" not in ns.namespace_id()
    assert "catalog.example.com" in repr(ns)


@pytest.mark.parametrize(
    "location",
    [
        "s3://AKIAUSER:Pass%2FWord+Secret@lance-tests/lake/x.lance",
        "s3://onlytoken@lance-tests/lake/x.lance",
        "https://u:MyPassW0rd@host/x.lance",
        "file://u:MyPassW0rd@localhost/tmp/x.lance",
        "s3://:MyPassW0rd@lance-tests/lake/z.lance?x=1",
    ],
)
def test_a_location_carrying_a_user_or_password_is_refused_without_repeating_them(
    ns: IcebergLanceNamespace, db: list[str], location: str
) -> None:
    """They were echoed, lower-cased, in the refusal, which a REST client reads back."""
    for attempt in (
        lambda: ns.register_table({"id": [*db, "t"], "location": location}),
        lambda: ns.declare_table({"id": [*db, "t"], "location": location}),
    ):
        with pytest.raises(InvalidInputError, match="must not carry a user or password") as refused:
            attempt()
        shown = str(refused.value).lower()
        assert not any(part in shown for part in ("akiauser", "pass%2fword", "onlytoken", "mypassw0rd", "u:"))
    with pytest.raises(TableNotFoundError):
        ns.describe_table({"id": [*db, "t"]})


def test_an_error_never_repeats_what_a_url_carries_before_its_at() -> None:
    ns = IcebergLanceNamespace(endpoint="http://catalog")
    shown = ns.settings.redact("'s3://akiauser:pass%2fword@b/x' and https://t0ken@h/x, not s3://b/a@b")
    assert shown == "'s3://***@b/x' and https://***@h/x, not s3://b/a@b"


def test_namespace_id_differs_between_principals_without_showing_secrets() -> None:
    alice = IcebergLanceNamespace(endpoint="http://catalog", auth_token="alice-token")
    bob = IcebergLanceNamespace(endpoint="http://catalog", auth_token="bob-token")
    oauth = IcebergLanceNamespace(endpoint="http://catalog", credential="app:hunter2")
    ids = {alice.namespace_id(), bob.namespace_id(), oauth.namespace_id()}
    assert len(ids) == 3
    assert not any(secret in text for text in ids for secret in ("alice-token", "bob-token", "hunter2"))
    assert "client:app" in oauth.namespace_id()


def test_secret_looking_request_properties_are_not_stored_in_the_catalog(
    ns: IcebergLanceNamespace, db: list[str]
) -> None:
    declared = ns.declare_table(
        {"id": [*db, "t"], "properties": {"aws_secret_access_key": SECRET_STORAGE_KEY, "primary_key": "id"}}
    )
    assert declared.properties.get("primary_key") == "id"
    assert SECRET_STORAGE_KEY not in json.dumps(ns.describe_table({"id": [*db, "t"]}).properties)


def test_namespace_pickles_and_works_after_unpickling(ns: IcebergLanceNamespace, db: list[str]) -> None:
    table_id = [*db, "t"]
    lance.write_dataset(pa.table({"x": [1, 2, 3]}), namespace_client=ns, table_id=table_id)
    ns.list_tables(ListTablesRequest(id=db))  # connections and threads exist now
    clone = pickle.loads(pickle.dumps(ns))
    assert clone.namespace_id() == ns.namespace_id()
    assert clone.list_tables(ListTablesRequest(id=db)).tables == ["t"]
    assert lance.dataset(namespace_client=clone, table_id=table_id).count_rows() == 3
    clone.close()


def test_oauth2_credential_is_exchanged_for_a_token_used_on_every_request(tmp_path: Path) -> None:
    stub = OAuthRecordingStub()
    try:
        with IcebergLanceNamespace(
            endpoint=stub.endpoint, root=str(tmp_path), credential="my-client:my-secret", scope="catalog"
        ) as ns:
            assert ns.list_namespaces(ListNamespacesRequest(id=["wh"])).namespaces == ["sales"]
            ns.list_namespaces(ListNamespacesRequest(id=["wh"]))
    finally:
        stub.close()
    assert set(stub.token_requests) == {("my-client", "my-secret")}
    # pyiceberg's config fetch runs on a session of its own, with its own token; the catalog
    # session then keeps one token for every request until it nears expiry
    assert len(stub.token_requests) <= 2
    assert stub.authorizations and set(stub.authorizations) == {"Bearer issued-token-123"}


def test_with_no_token_or_credential_no_authorization_header_is_sent(tmp_path: Path) -> None:
    """pyiceberg alone sends "Authorization: Bearer None", which a catalog needing no
    authentication may refuse with a 401."""
    stub = OAuthRecordingStub()
    try:
        with IcebergLanceNamespace(endpoint=stub.endpoint, root=str(tmp_path)) as ns:
            assert ns.list_namespaces(ListNamespacesRequest(id=["wh"])).namespaces == ["sales"]
            ns.list_namespaces(ListNamespacesRequest(id=["wh"]))
        with IcebergLanceNamespace(endpoint=stub.endpoint, root=str(tmp_path), auth_token="tok-9") as ns:
            ns.list_namespaces(ListNamespacesRequest(id=["wh"]))
    finally:
        stub.close()
    assert stub.config_authorizations == [None, "Bearer tok-9"]
    assert stub.authorizations == [None, None, "Bearer tok-9"]
    assert stub.token_requests == []


@pytest.mark.parametrize("given_as", ["defaults", "overrides"])
def test_a_token_the_catalogs_config_hands_out_is_sent(tmp_path: Path, given_as: str) -> None:
    """The catalog's /v1/config may give the client its token: no header is only for a bridge
    that has nothing to authenticate with once the config is read."""
    config = {"defaults": {"prefix": "p"}, "overrides": {}}
    config[given_as]["token"] = "cfg-token-3e"
    stub = OAuthRecordingStub(config)
    try:
        with IcebergLanceNamespace(endpoint=stub.endpoint, root=str(tmp_path)) as ns:
            assert ns.list_namespaces(ListNamespacesRequest(id=["wh"])).namespaces == ["sales"]
    finally:
        stub.close()
    assert stub.authorizations == ["Bearer cfg-token-3e"]


def test_callers_see_only_static_storage_options_known_to_be_safe(
    endpoint: str, lance_root: Path, db: list[str]
) -> None:
    """What a caller sees of the static options is a list of safe names, not a filter on names that
    look secret: a customer encryption key and a proxy URL carrying a token pass no such filter."""
    storage = {
        "storage.region": "eu-1",
        "storage.allow_http": "true",
        "storage.aws_sse_customer_key_base64": SECRET_STORAGE_KEY,
        "storage.proxy_url": f"http://{SECRET_TOKEN}@proxy.example:3128",
        "storage.aws_endpoint": f"http://user:{SECRET_CLIENT}@minio.example:9000",
    }
    with IcebergLanceNamespace(
        endpoint=endpoint, root=str(lance_root), share_static_credentials="false", **storage
    ) as ns:
        declared = ns.declare_table({"id": [*db, "t"]})
        described = ns.describe_table({"id": [*db, "t"]})
    assert declared.storage_options == described.storage_options == {"region": "eu-1", "allow_http": "true"}
    with IcebergLanceNamespace(endpoint=endpoint, root=str(lance_root), **storage) as trusted:  # in process
        assert trusted.describe_table({"id": [*db, "t"]}).storage_options == {
            key.removeprefix("storage."): value for key, value in storage.items()
        }
