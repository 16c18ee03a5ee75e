"""Bad input across the Python API, the command line and the REST server: each case gets the
right typed error (or HTTP status and code, or exit code), and leaves the catalog and the storage
exactly as they were."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
import requests
from lance_namespace.errors import (
    InvalidInputError,
    LanceNamespaceError,
    NamespaceNotFoundError,
    PermissionDeniedError,
    TableNotFoundError,
    UnsupportedOperationError,
)

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.server import RunningServer, serve_in_background

from .helpers import other_client

TRIED: list[str] = []  # every bad input tried in this module, for the summary


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
    """A namespace with one Lance table, so that bad input has something it could damage."""
    lance.write_dataset(pa.table({"id": [1, 2, 3]}), namespace_client=ns, table_id=[*db, "events"])
    return db


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
        ("register nothing", "register_table", {"id": [*db, "r1"], "location": f"{root}/none"}, InvalidInputError),
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
    for name, operation, request, expected in _api_cases(populated, warehouse, lance_root):
        try:
            getattr(ns, operation)(request)
            wrong.append(f"{name}: no error")
        except expected:
            pass
        except Exception as exc:  # noqa: BLE001 - collected and reported
            wrong.append(f"{name}: {type(exc).__name__}: {exc}")
        TRIED.append(f"api: {name}")
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
    TRIED.append(f"properties: {name}")


def test_unknown_properties_are_ignored_with_a_warning_and_no_value_shown(
    endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    with IcebergLanceNamespace(endpoint=endpoint, colour="blue-SECRET-x") as ns:
        assert ns.settings.endpoint == endpoint
    assert "colour" in caplog.text and "blue-SECRET-x" not in caplog.text
    TRIED.append("properties: unknown key")


@pytest.fixture
def server(endpoint: str, lance_root: Path) -> Iterator[RunningServer]:
    with serve_in_background(properties={"endpoint": endpoint, "root": str(lance_root)}) as running:
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
        TRIED.append(f"rest: {name}")
    assert not wrong, wrong
    assert _state(endpoint, warehouse, lance_root) == before


def test_cli_bad_inputs_exit_with_their_kind_and_change_nothing(
    populated: list[str], warehouse: str, endpoint: str, lance_root: Path, tmp_path: Path
) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("LANCE_ICEBERG_", "PYICEBERG_"))}
    environ.update(LANCE_ICEBERG_ENDPOINT=endpoint, LANCE_ICEBERG_ROOT=str(lance_root))
    table, namespace = ".".join([*populated, "events"]), ".".join(populated)
    cases = [
        ("dot-dot id", ["tables", "describe", f"{namespace}..t"], 2),
        ("bad property", ["-p", "max_retries=abc", "tables", "list", namespace], 2),
        ("bad endpoint", ["--endpoint", "ftp://x", "tables", "list", namespace], 2),
        ("register nothing", ["tables", "register", f"{namespace}.r", str(lance_root / "none")], 2),
        ("register outside", ["tables", "register", f"{namespace}.r", str(tmp_path / "none")], 6),
        ("bad duration", ["tables", "purge", namespace, "--older-than", "soon"], 2),
        ("limit zero", ["tables", "versions", table, "--limit", "0"], 2),
        ("missing directory", ["import-directory", str(tmp_path / "none"), "--into", namespace], 2),
        ("missing table", ["tables", "describe", f"{namespace}.nope"], 3),
    ]
    before = _state(endpoint, warehouse, lance_root)
    wrong = []
    for name, arguments, exit_code in cases:
        result = subprocess.run(
            [sys.executable, "-m", "lance_iceberg_ns.cli", *arguments],
            env=environ,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != exit_code or "Traceback" in result.stderr:
            wrong.append(f"{name}: exit {result.returncode}: {result.stderr[-300:]}")
        TRIED.append(f"cli: {name}")
    assert not wrong, wrong
    assert _state(endpoint, warehouse, lance_root) == before


def test_zz_bad_input_summary() -> None:
    print(f"\nbad inputs tried: {len(TRIED)}")
    assert len(TRIED) >= 50
