"""Bad input across the Python API, the command line and the REST server: each case gets the
right typed error (or HTTP status and code, or exit code), and leaves the catalog and the storage
exactly as they were."""

from __future__ import annotations

import http.client
import json
import os
import re
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import lance
import pyarrow as pa
import pytest
import requests
from lance_namespace.errors import (
    ErrorCode,
    InvalidInputError,
    LanceNamespaceError,
    NamespaceAlreadyExistsError,
    NamespaceNotFoundError,
    PermissionDeniedError,
    TableAlreadyExistsError,
    TableNotFoundError,
    UnsupportedOperationError,
    from_error_code,
)

from lance_iceberg_ns import IcebergLanceNamespace, cli
from lance_iceberg_ns.errors import http_status_for
from lance_iceberg_ns.identifiers import TRASH_NAMESPACE
from lance_iceberg_ns.limits import MAX_PAGE_LIMIT, MAX_PROPERTIES, MAX_PROPERTY_KEY_BYTES, MAX_PROPERTY_VALUE_BYTES
from lance_iceberg_ns.server import RunningServer, serve_in_background

from ..helpers import CommandLine, other_client
from ..stubs import StatusStubServer

REPOSITORY = Path(__file__).resolve().parents[2]


def _state(endpoint: str, warehouse: str, lance_root: Path) -> tuple[object, ...]:
    """Everything a bad input could have changed: the warehouse's namespaces (with properties) and
    tables, as another client sees them, and every file under the storage root."""
    catalog = other_client(endpoint, warehouse)
    namespaces, tables, pending = [], [], [()]
    while pending:
        parent = pending.pop()
        for child in catalog.list_namespaces(parent):
            namespaces.append((child, tuple(sorted(catalog.load_namespace_properties(child).items()))))
            tables += catalog.list_tables(child)
            pending.append(child)
    files = sorted(
        (os.path.relpath(os.path.join(folder, name), lance_root), os.path.getsize(os.path.join(folder, name)))
        for folder, _subfolders, names in os.walk(lance_root)
        for name in names
    )
    return tuple(sorted(namespaces)), tuple(sorted(tables)), tuple(files)


@pytest.fixture
def populated(ns: IcebergLanceNamespace, db: list[str]) -> list[str]:
    """A namespace with one Lance table and one soft-deleted table (so its trash namespace
    exists), so that bad input has something it could damage or reach."""
    lance.write_dataset(pa.table({"id": [1, 2, 3]}), namespace_client=ns, table_id=[*db, "events"])
    lance.write_dataset(pa.table({"id": [4]}), namespace_client=ns, table_id=[*db, "dropped"])
    ns.drop_table({"id": [*db, "dropped"]})
    return db


# Characters that do not show, or change how the others show: zero-width space, non-joiner and
# joiner, byte-order mark, word joiner, soft hyphen, the bidi embeddings, overrides, isolates and
# marks, line and paragraph separators, private use, unassigned.
INVISIBLE = [
    *"\u200b\u200c\u200d\ufeff\u2060\u00ad",
    *"\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c",
    *"\u2028\u2029\ue000\u0378",
]
TRASH_SPELLINGS = [TRASH_NAMESPACE, TRASH_NAMESPACE.upper(), "__Lance_Trash__", "__lAnCe_TrAsH__"]
LIMITS = [0, -1, MAX_PAGE_LIMIT + 1, 10**12]


def _hardening_cases(db: list[str], warehouse: str) -> list[tuple[str, str, Any, type[LanceNamespaceError]]]:
    """Identifiers that would look like, alias or reach something else; limits and properties out of
    bounds."""
    table, name = [*db, "events"], db[1]
    cases: list[tuple[str, str, Any, type[LanceNamespaceError]]] = []
    for char in INVISIBLE:
        code = f"U+{ord(char):04X}"
        cases += [
            (f"{code} in a table name", "declare_table", {"id": [*db, f"ev{char}ents"]}, InvalidInputError),
            (f"{code} ending a table name", "describe_table", {"id": [*db, f"events{char}"]}, InvalidInputError),
            (f"{code} in a namespace", "create_namespace", {"id": [warehouse, f"{name}{char}"]}, InvalidInputError),
            (f"{code} in a warehouse", "list_tables", {"id": [f"{warehouse}{char}", name]}, InvalidInputError),
        ]
    for trash in TRASH_SPELLINGS:
        cases += [
            (f"{trash} as warehouse", "create_namespace", {"id": [trash, "x"]}, InvalidInputError),
            (f"{trash} as namespace", "create_namespace", {"id": [*db, trash]}, InvalidInputError),
            (f"{trash} as top namespace", "create_namespace", {"id": [warehouse, trash]}, InvalidInputError),
            (f"{trash} as table", "declare_table", {"id": [*db, trash]}, InvalidInputError),
            (f"{trash} as table's namespace", "declare_table", {"id": [*db, trash, "t"]}, InvalidInputError),
            (f"list {trash}", "list_tables", {"id": [*db, trash]}, InvalidInputError),
            (f"list children of {trash}", "list_namespaces", {"id": [*db, trash]}, InvalidInputError),
            (f"describe {trash}", "describe_namespace", {"id": [*db, trash]}, InvalidInputError),
            (f"drop {trash}", "drop_namespace", {"id": [*db, trash]}, InvalidInputError),
            (f"table in {trash}", "describe_table", {"id": [*db, trash, "dropped"]}, InvalidInputError),
            (
                f"register into {trash}",
                "register_table",
                {"id": [*db, trash, "r"], "location": "/x"},
                InvalidInputError,
            ),
            (
                f"rename into {trash}",
                "rename_table",
                {"id": table, "new_namespace_id": [*db, trash], "new_table_name": "x"},
                InvalidInputError,
            ),
            (f"rename to {trash}", "rename_table", {"id": table, "new_table_name": trash}, InvalidInputError),
        ]
    dotted_trash = f"{name}.{TRASH_NAMESPACE}"  # the trash of db, spelled as one level
    cases += [
        ("dot in a namespace", "create_namespace", {"id": [warehouse, "a.b"]}, InvalidInputError),
        ("dot in a nested namespace", "create_namespace", {"id": [*db, "a.b"]}, InvalidInputError),
        ("dot in a table's namespace", "declare_table", {"id": [warehouse, "a.b", "t"]}, InvalidInputError),
        ("dotted alias of db", "describe_namespace", {"id": [warehouse, f"{name}."]}, InvalidInputError),
        ("dotted alias of the trash", "list_tables", {"id": [warehouse, dotted_trash]}, InvalidInputError),
        ("dotted alias, create", "create_namespace", {"id": [warehouse, dotted_trash]}, InvalidInputError),
        ("dotted alias, drop", "drop_namespace", {"id": [warehouse, dotted_trash]}, InvalidInputError),
        ("dotted alias, table", "describe_table", {"id": [warehouse, dotted_trash, "dropped"]}, InvalidInputError),
        (
            "dotted alias, rename into",
            "rename_table",
            {"id": table, "new_namespace_id": [warehouse, dotted_trash], "new_table_name": "x"},
            InvalidInputError,
        ),
    ]
    for limit in LIMITS:
        cases += [
            (f"namespaces limit {limit}", "list_namespaces", {"id": [warehouse], "limit": limit}, InvalidInputError),
            (f"tables limit {limit}", "list_tables", {"id": db, "limit": limit}, InvalidInputError),
            (f"versions limit {limit}", "list_table_versions", {"id": table, "limit": limit}, InvalidInputError),
        ]
    too_many = {f"k{i}": "v" for i in range(MAX_PROPERTIES + 1)}
    long_key = {"k" * (MAX_PROPERTY_KEY_BYTES + 1): "v"}
    long_value = {"k": "v" * (MAX_PROPERTY_VALUE_BYTES + 1)}
    wide_value = {"k": "é" * (MAX_PROPERTY_VALUE_BYTES // 2 + 1)}  # few characters, too many bytes
    for what, properties in [
        ("many", too_many),
        ("long key", long_key),
        ("long value", long_value),
        ("wide value", wide_value),
    ]:
        register = {"id": [*db, "p"], "location": "/x", "properties": properties}
        cases += [
            (f"namespace {what}", "create_namespace", {"id": [*db, "p"], "properties": properties}, InvalidInputError),
            (f"declare {what}", "declare_table", {"id": [*db, "p"], "properties": properties}, InvalidInputError),
            (f"register {what}", "register_table", register, InvalidInputError),
        ]
    return cases


def _api_cases(db: list[str], warehouse: str, root: Path) -> list[tuple[str, str, Any, type[LanceNamespaceError]]]:
    table = [*db, "events"]
    long_name = "x" * 300
    return [
        ("empty table id", "declare_table", {"id": []}, InvalidInputError),
        ("warehouse only", "declare_table", {"id": [warehouse]}, InvalidInputError),
        ("namespace as table", "declare_table", {"id": db}, InvalidInputError),
        ("empty part", "declare_table", {"id": [*db, ""]}, InvalidInputError),
        ("dot-dot part", "declare_table", {"id": [*db, ".."]}, InvalidInputError),
        ("dot part", "declare_table", {"id": [warehouse, ".", "t"]}, InvalidInputError),
        ("slash in part", "declare_table", {"id": [*db, "a/b"]}, InvalidInputError),
        ("backslash in part", "declare_table", {"id": [*db, "a\\b"]}, InvalidInputError),
        ("NUL in part", "declare_table", {"id": [*db, "a\x00b"]}, InvalidInputError),
        ("newline in part", "declare_table", {"id": [*db, "a\nb"]}, InvalidInputError),
        ("padded part", "declare_table", {"id": [*db, " t "]}, InvalidInputError),
        ("huge part", "declare_table", {"id": [*db, long_name]}, InvalidInputError),
        ("too many parts", "declare_table", {"id": [warehouse, *["n"] * 40, "t"]}, InvalidInputError),
        ("id as a string", "declare_table", {"id": ".".join(table)}, InvalidInputError),
        ("id of integers", "declare_table", {"id": [1, 2, 3]}, InvalidInputError),
        ("request not a mapping", "declare_table", 42, InvalidInputError),
        ("location with ..", "declare_table", {"id": [*db, "t2"], "location": "/tmp/a/../b"}, PermissionDeniedError),
        ("location with NUL", "declare_table", {"id": [*db, "t3"], "location": "/tmp/a\x00"}, InvalidInputError),
        ("namespace with ..", "create_namespace", {"id": [warehouse, ".."]}, InvalidInputError),
        ("namespace huge", "create_namespace", {"id": [warehouse, long_name]}, InvalidInputError),
        ("namespace mode", "create_namespace", {"id": [*db, "child"], "mode": "sometimes"}, InvalidInputError),
        ("namespace properties type", "create_namespace", {"id": [*db, "c2"], "properties": "a=b"}, InvalidInputError),
        ("cascade drop", "drop_namespace", {"id": db, "behavior": "cascade"}, InvalidInputError),
        ("missing parent", "create_namespace", {"id": [warehouse, "nope", "child"]}, NamespaceNotFoundError),
        (
            "register outside",
            "register_table",
            {"id": [*db, "r1"], "location": "/nonexistent/x"},
            PermissionDeniedError,
        ),
        (
            "register nothing",
            "register_table",
            {"id": [*db, "r1"], "location": f"{root}/wh/none.lance"},
            InvalidInputError,
        ),
        ("register no location", "register_table", {"id": [*db, "r2"]}, InvalidInputError),
        ("register mode", "register_table", {"id": [*db, "r3"], "location": "/x", "mode": "bogus"}, InvalidInputError),
        (
            "register managed",
            "register_table",
            {"id": [*db, "r4"], "location": "/x", "properties": {"table_version_management": "true"}},
            InvalidInputError,
        ),
        ("rename without name", "rename_table", {"id": table}, InvalidInputError),
        (
            "rename across warehouses",
            "rename_table",
            {"id": table, "new_namespace_id": ["elsewhere", "db"], "new_table_name": "x"},
            InvalidInputError,
        ),
        ("rename missing", "rename_table", {"id": [*db, "missing"], "new_table_name": "x"}, TableNotFoundError),
        ("version and tag", "describe_table", {"id": table, "version": 1, "tag": "t"}, InvalidInputError),
        ("version of wrong type", "describe_table", {"id": table, "version": "latest"}, InvalidInputError),
        ("branch", "describe_table", {"id": table, "branch": "dev"}, UnsupportedOperationError),
        ("versions page token", "list_table_versions", {"id": table, "page_token": "abc"}, InvalidInputError),
        ("versions negative limit", "list_table_versions", {"id": table, "limit": -1}, InvalidInputError),
        ("restore without version", "restore_table", {"id": table}, InvalidInputError),
        ("restore missing version", "restore_table", {"id": table, "version": 99}, LanceNamespaceError),
        (
            "version of unmanaged",
            "create_table_version",
            {"id": table, "version": 2, "manifest_path": "x"},
            UnsupportedOperationError,
        ),
        ("empty batch", "batch_create_table_versions", {"entries": []}, InvalidInputError),
        ("drop missing", "drop_table", {"id": [*db, "missing"]}, TableNotFoundError),
        ("list missing namespace", "list_tables", {"id": [warehouse, "missing"]}, NamespaceNotFoundError),
    ]


def test_api_bad_inputs_are_typed_and_change_nothing(
    ns: IcebergLanceNamespace, populated: list[str], warehouse: str, endpoint: str, lance_root: Path
) -> None:
    before = _state(endpoint, warehouse, lance_root)
    wrong = []
    cases = _api_cases(populated, warehouse, lance_root) + _hardening_cases(populated, warehouse)
    for name, operation, request, expected in cases:
        try:
            getattr(ns, operation)(request)
            wrong.append(f"{name}: no error")
        except expected:
            pass
        except Exception as exc:  # noqa: BLE001 - collected and reported
            wrong.append(f"{name}: {type(exc).__name__}: {exc}")
    assert not wrong, wrong
    assert _state(endpoint, warehouse, lance_root) == before


BAD_PROPERTIES: list[tuple[str, dict[str, str]]] = [
    ("no endpoint", {}),
    ("ftp endpoint", {"endpoint": "ftp://catalog"}),
    ("endpoint without host", {"endpoint": "http://"}),
    ("endpoint with a bad port", {"endpoint": "http://catalog:notaport"}),
    ("timeout not a number", {"endpoint": "http://catalog", "connect_timeout": "soon"}),
    ("negative retries", {"endpoint": "http://catalog", "max_retries": "-1"}),
    ("zero lookup threads", {"endpoint": "http://catalog", "lookup_threads": "0"}),
    ("soft delete maybe", {"endpoint": "http://catalog", "soft_delete": "maybe"}),
    ("ttl not a duration", {"endpoint": "http://catalog", "soft_delete_ttl": "later"}),
    ("managed not a boolean", {"endpoint": "http://catalog", "table_version_management": "si"}),
]


@pytest.mark.parametrize(("name", "properties"), BAD_PROPERTIES, ids=[name for name, _ in BAD_PROPERTIES])
def test_bad_properties_are_invalid_input(name: str, properties: dict[str, str]) -> None:
    with pytest.raises(InvalidInputError):
        IcebergLanceNamespace(**properties)


def test_unknown_properties_are_ignored_with_a_warning_and_no_value_shown(
    endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    with IcebergLanceNamespace(endpoint=endpoint, colour="blue-SECRET-x") as ns:
        assert ns.settings.endpoint == endpoint
    assert "colour" in caplog.text and "blue-SECRET-x" not in caplog.text


@pytest.fixture
def server(endpoint: str, lance_root: Path, warehouse: str) -> Iterator[RunningServer]:
    properties = {"endpoint": endpoint, "root": str(lance_root), "warehouses": warehouse}
    with serve_in_background(properties=properties) as running:
        yield running


def test_rest_server_bad_inputs_are_4xx_with_the_code_and_change_nothing(
    server: RunningServer, populated: list[str], warehouse: str, endpoint: str, lance_root: Path
) -> None:
    base = server.uri
    ns_path, table_path = "$".join(populated), "$".join([*populated, "events"])
    cases: list[tuple[str, Callable[[], requests.Response], int, int]] = [
        ("dot-dot in path", lambda: requests.post(f"{base}/v1/table/{ns_path}$../declare", json={}), 400, 13),
        ("NUL in path", lambda: requests.post(f"{base}/v1/table/{ns_path}$a%00b/declare", json={}), 400, 13),
        ("short id", lambda: requests.post(f"{base}/v1/table/{warehouse}/declare", json={}), 400, 13),
        ("body not JSON", lambda: requests.post(f"{base}/v1/table/{ns_path}$t/declare", data=b"{oops"), 400, 13),
        ("body a list", lambda: requests.post(f"{base}/v1/table/{ns_path}$t/declare", json=[1, 2]), 400, 13),
        (
            "field of wrong type",
            lambda: requests.post(f"{base}/v1/table/{table_path}/describe", json={"version": "latest"}),
            400,
            13,
        ),
        ("limit not a number", lambda: requests.get(f"{base}/v1/namespace/{ns_path}/table/list?limit=abc"), 400, 13),
        (
            "huge identifier",
            lambda: requests.post(f"{base}/v1/table/{ns_path}${'x' * 5000}/declare", json={}),
            400,
            13,
        ),
        (
            "bad location",
            lambda: requests.post(f"{base}/v1/table/{ns_path}$t/declare", json={"location": "/a/../b"}),
            403,
            15,
        ),
        ("missing table", lambda: requests.post(f"{base}/v1/table/{ns_path}$nope/describe", json={}), 404, 4),
        (
            "cascade",
            lambda: requests.post(f"{base}/v1/namespace/{ns_path}/drop", json={"behavior": "CASCADE"}),
            400,
            13,
        ),
        (
            "oversize body",
            lambda: requests.post(f"{base}/v1/table/{ns_path}$t/declare", data=b" " * (17 * 1024 * 1024)),
            413,
            13,
        ),
    ]
    before = _state(endpoint, warehouse, lance_root)
    wrong = []
    for name, call, status, code in cases:
        answer = call()
        body = answer.json() if answer.headers.get("content-type", "").startswith("application/json") else {}
        if answer.status_code != status or body.get("code") != code:
            wrong.append(f"{name}: {answer.status_code} {body}")
    assert not wrong, wrong
    assert _state(endpoint, warehouse, lance_root) == before


def test_cli_bad_inputs_exit_with_their_kind_and_change_nothing(
    cli: CommandLine, populated: list[str], warehouse: str, endpoint: str, lance_root: Path, tmp_path: Path
) -> None:
    table, namespace = ".".join([*populated, "events"]), ".".join(populated)
    cases = [
        ("dot-dot id", ["tables", "describe", f"{namespace}..t"], 2),
        ("bad property", ["-p", "max_retries=abc", "tables", "list", namespace], 2),
        ("bad endpoint", ["--endpoint", "ftp://x", "tables", "list", namespace], 2),
        ("register nothing", ["tables", "register", f"{namespace}.r", str(lance_root / "wh" / "none.lance")], 2),
        ("register outside", ["tables", "register", f"{namespace}.r", str(tmp_path / "none")], 6),
        ("bad duration", ["tables", "purge", namespace, "--older-than", "soon"], 2),
        ("limit zero", ["tables", "versions", table, "--limit", "0"], 2),
        ("missing directory", ["import-directory", str(tmp_path / "none"), "--into", namespace], 2),
        ("missing table", ["tables", "describe", f"{namespace}.nope"], 3),
    ]
    before = _state(endpoint, warehouse, lance_root)
    wrong = []
    for name, arguments, exit_code in cases:
        result = cli(*arguments)
        if result.returncode != exit_code or "Traceback" in result.stderr:
            wrong.append(f"{name}: exit {result.returncode}: {result.stderr[-300:]}")
    assert not wrong, wrong
    assert _state(endpoint, warehouse, lance_root) == before


def test_the_case_tables_hold_at_least_50_bad_inputs() -> None:
    """Counted from the tables themselves, so that it holds whichever tests run, in any order."""
    db = ["wh", "db"]
    tables = _api_cases(db, "wh", Path("/root")) + _hardening_cases(db, "wh")
    assert len(tables) + len(BAD_PROPERTIES) + len(ErrorCode) >= 50


NFC, NFD = "caf\u00e9_\u00c5ngstr\u00f6m", unicodedata.normalize("NFD", "caf\u00e9_\u00c5ngstr\u00f6m")


def test_nfd_and_nfc_spellings_address_one_table(
    ns: IcebergLanceNamespace, db: list[str], warehouse: str, endpoint: str, lance_root: Path
) -> None:
    assert NFC != NFD
    declared = ns.declare_table({"id": [*db, NFD]})
    assert declared.location is not None
    assert declared.location.startswith(str(lance_root / warehouse / db[1] / NFC) + "-")
    assert ns.list_tables({"id": db}).tables == [NFC]
    assert ns.describe_table({"id": [*db, NFC]}).location == declared.location
    with pytest.raises(TableAlreadyExistsError):
        ns.declare_table({"id": [*db, NFC]})
    with pytest.raises(TableAlreadyExistsError):
        ns.declare_table({"id": [*db, NFD]})
    assert other_client(endpoint, warehouse).list_tables((db[1],)) == [(db[1], NFC)]


def test_nfd_and_nfc_spellings_address_one_namespace(ns: IcebergLanceNamespace, warehouse: str) -> None:
    ns.create_namespace({"id": [warehouse, NFD]})
    with pytest.raises(NamespaceAlreadyExistsError):
        ns.create_namespace({"id": [warehouse, NFC]})
    assert NFC in ns.list_namespaces({"id": [warehouse]}).namespaces
    assert NFD not in ns.list_namespaces({"id": [warehouse]}).namespaces
    ns.namespace_exists({"id": [warehouse, NFC]})
    assert (
        ns.describe_namespace({"id": [warehouse, NFD]}).properties
        == ns.describe_namespace({"id": [warehouse, NFC]}).properties
    )


def _raw_request(uri: str, method: str, path: str, headers: list[tuple[str, str]]) -> tuple[int, dict[str, Any]]:
    """One request with exactly these headers, repeated names included (requests merges them)."""
    address = urlsplit(uri)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=30)
    try:
        connection.putrequest(method, path)
        for name, value in headers:
            connection.putheader(name, value)
        connection.putheader("Content-Length", "0")
        connection.endheaders()
        answer = connection.getresponse()
        body = answer.read()
        return answer.status, json.loads(body) if body else {}
    finally:
        connection.close()


GOOD, OTHER = "Bearer tok-SECRET-good", "Bearer tok-SECRET-other"


@pytest.mark.parametrize("configuration", ["token-check", "forwarded-token"])
def test_two_authorization_headers_are_unauthenticated(
    endpoint: str, lance_root: Path, populated: list[str], configuration: str
) -> None:
    properties = {"endpoint": endpoint, "root": str(lance_root)}
    if configuration == "token-check":
        running = serve_in_background(properties=properties, auth_tokens=[GOOD.split()[1]])
    else:
        running = serve_in_background(properties=properties, forward_bearer_token=True)
    path = f"/v1/namespace/{'$'.join(populated)}/table/list"
    with running:
        assert _raw_request(running.uri, "GET", path, [("Authorization", GOOD)])[0] == 200  # one header: fine
        for headers in ([GOOD, OTHER], [OTHER, GOOD], [GOOD, GOOD]):
            status, body = _raw_request(running.uri, "GET", path, [("Authorization", h) for h in headers])
            assert (status, body["code"], body["detail"]) == (401, 16, "UnauthenticatedError"), (headers, body)
            assert "SECRET" not in json.dumps(body)


def test_rest_server_limits_and_properties_out_of_bounds_are_400_and_change_nothing(
    server: RunningServer, populated: list[str], warehouse: str, endpoint: str, lance_root: Path
) -> None:
    base = server.uri
    ns_path, table_path = "$".join(populated), "$".join([*populated, "events"])
    listings = [
        ("GET", f"/v1/namespace/{warehouse}/list"),
        ("GET", f"/v1/namespace/{ns_path}/table/list"),
        ("POST", f"/v1/table/{table_path}/version/list"),
        ("GET", "/v1/table"),
    ]
    before = _state(endpoint, warehouse, lance_root)
    wrong = []
    for method, path in listings:
        for limit in LIMITS:
            answer = requests.request(method, f"{base}{path}", params={"limit": str(limit)})
            if (answer.status_code, answer.json().get("code")) != (400, 13):
                wrong.append(f"{path} limit={limit}: {answer.status_code} {answer.text[:200]}")
        if requests.request(method, f"{base}{path}", params={"limit": "2"}).status_code == 400:
            wrong.append(f"{path} limit=2 refused")
    too_many = {f"k{i}": "v" for i in range(MAX_PROPERTIES + 1)}
    for what, properties in [("many", too_many), ("long value", {"k": "v" * (MAX_PROPERTY_VALUE_BYTES + 1)})]:
        for path in (f"/v1/namespace/{ns_path}$p/create", f"/v1/table/{ns_path}$p/declare"):
            answer = requests.post(f"{base}{path}", json={"properties": properties})
            if (answer.status_code, answer.json().get("code")) != (400, 13):
                wrong.append(f"{path} {what} properties: {answer.status_code} {answer.text[:200]}")
    assert not wrong, wrong
    assert _state(endpoint, warehouse, lance_root) == before


INTERNALS = re.compile(r"org\.apache|java|\.py\b|\.rs\b|/usr/|site-packages|Exception|\w+Error\b|<\w+\.")
JAVA_FAILURE = (
    "org.apache.iceberg.exceptions.ServiceFailureException: the catalog broke"
    "\n\tat org.apache.iceberg.rest.CatalogHandlers.listTables(CatalogHandlers.java:221)"
    "\n\tat java.base/java.lang.Thread.run(Thread.java:840)"
    " loaded from /usr/share/java/iceberg-core.jar and"
    " /opt/venv/lib/python3.11/site-packages/pyiceberg/catalog/rest/__init__.py:1066"
)


@pytest.mark.parametrize(("status", "code", "detail"), [(500, 18, "InternalError"), (404, 1, "NamespaceNotFoundError")])
def test_error_bodies_keep_the_message_without_paths_or_class_names(
    tmp_path: Path, status: int, code: int, detail: str
) -> None:
    catalog = StatusStubServer(status, JAVA_FAILURE)  # a fake catalog: it fails as asked, Java trace and all
    try:
        properties = {"endpoint": catalog.endpoint, "root": str(tmp_path), "max_retries": "0"}
        with serve_in_background(properties=properties) as running:
            answer = requests.get(f"{running.uri}/v1/namespace/wh$db/table/list")
    finally:
        catalog.close()
    body = answer.json()
    assert (answer.status_code, body["code"], body["detail"]) == (http_status_for(code), code, detail)
    assert "the catalog broke" in body["error"]
    assert not INTERNALS.search(body["error"]), body["error"]


def test_error_bodies_of_the_real_catalog_name_the_lance_error(server: RunningServer, populated: list[str]) -> None:
    answer = requests.post(f"{server.uri}/v1/table/{'$'.join(populated)}$nope/describe", json={})
    body = answer.json()
    assert (answer.status_code, body["code"], body["detail"]) == (404, 4, "TableNotFoundError")
    assert "nope" in body["error"] and not INTERNALS.search(body["error"]), body["error"]


def _documented_exit_codes() -> dict[int, int]:
    """Lance error code → exit code, from the table in docs/cli.md."""
    rows = re.findall(r"^\| (\d) \| [^|]+ \| ([^|]*) \|$", (REPOSITORY / "docs" / "cli.md").read_text(), re.M)
    return {int(code): int(exit_code) for exit_code, codes in rows for code in re.findall(r"\b\d+\b", codes)}


@pytest.mark.parametrize("code", list(ErrorCode), ids=[code.name for code in ErrorCode])
def test_cli_exits_with_the_documented_code_for_every_lance_error(
    code: ErrorCode, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    documented = _documented_exit_codes()
    assert int(code) in documented, f"docs/cli.md has no exit code for {code.name} ({int(code)})"

    class FailingNamespace:  # a fake namespace: every describe fails with the Lance error of one code
        def describe_namespace(self, request: object) -> None:
            raise from_error_code(int(code), "injected")

    monkeypatch.setattr(cli.CliState, "namespace", lambda self: FailingNamespace())
    assert cli.main(["namespaces", "describe", "wh.db"]) == documented[int(code)]
    assert f"({int(code)}): injected" in capsys.readouterr().err
    assert http_status_for(int(code)) != 500 or code == ErrorCode.INTERNAL  # the REST status table has it too
