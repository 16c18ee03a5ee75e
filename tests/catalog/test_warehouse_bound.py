"""Clients name warehouses, and every warehouse the bridge reaches has a catalog with open
connections: the catalogs kept are bounded (the configured warehouses, and the most recently used
others up to ``KEPT_UNLISTED_WAREHOUSES``), a catalog let go closes its connections, and a warehouse
the catalog refuses is never kept. Naming three times the bound of warehouses leaves the process's
open files bounded and the configured warehouse answering."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from lance_namespace import CreateNamespaceRequest, ListNamespacesRequest
from lance_namespace.errors import NamespaceNotFoundError

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.catalog import pyiceberg_internals as internals
from lance_iceberg_ns.catalog.warehouse_cache import KEPT_UNLISTED_WAREHOUSES, WarehouseCatalogs
from lance_iceberg_ns.config.settings import Settings
from lance_iceberg_ns.server import RunningServer
from lance_iceberg_ns.testing import LocalCatalog, local_catalog

from ..helpers import data_workers_ready

NAMED = 3 * KEPT_UNLISTED_WAREHOUSES
# A kept catalog holds one idle connection when used by one thread at a time; the rest is room for
# what the test process opens meanwhile (log files, the server's own sockets).
OPEN_FILES_ALLOWED = KEPT_UNLISTED_WAREHOUSES + 40


def open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def fresh_warehouse() -> str:
    return f"wh_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def listed(endpoint: str, lance_root: Path) -> Iterator[tuple[IcebergLanceNamespace, list[str]]]:
    """A namespace whose ``warehouses`` setting names one warehouse, with a namespace created in it."""
    warehouse = fresh_warehouse()
    with IcebergLanceNamespace(endpoint=endpoint, root=str(lance_root), warehouses=warehouse) as namespace:
        namespace.create_namespace(CreateNamespaceRequest(id=[warehouse, "sales"]))
        yield namespace, [warehouse, "sales"]


def kept_catalogs(namespace: IcebergLanceNamespace) -> WarehouseCatalogs:
    return namespace.companions.warehouses()


def test_naming_many_warehouses_keeps_a_bounded_number_of_catalogs(
    listed: tuple[IcebergLanceNamespace, list[str]],
) -> None:
    namespace, configured = listed
    catalogs = kept_catalogs(namespace)
    configured_catalog = namespace.catalog(configured[0])
    before = open_files()
    most = 0
    for _ in range(NAMED):
        namespace.list_namespaces(ListNamespacesRequest(id=[fresh_warehouse()]))
        assert catalogs.kept_unlisted() <= KEPT_UNLISTED_WAREHOUSES
        most = max(most, open_files() - before)
    assert catalogs.kept_unlisted() == KEPT_UNLISTED_WAREHOUSES
    assert most <= OPEN_FILES_ALLOWED, f"{most} more files open after naming {NAMED} warehouses"
    # the configured warehouse was never let go, and answers
    assert namespace.catalog(configured[0]) is configured_catalog
    assert namespace.list_namespaces(ListNamespacesRequest(id=configured[:1])).namespaces == ["sales"]


def test_a_catalog_let_go_while_in_use_reconnects(endpoint: str, lance_root: Path) -> None:
    with IcebergLanceNamespace(endpoint=endpoint, root=str(lance_root)) as namespace:
        warehouse = fresh_warehouse()
        namespace.create_namespace(CreateNamespaceRequest(id=[warehouse, "kept"]))
        held = namespace.catalog(warehouse)  # what a request still running holds
        for _ in range(KEPT_UNLISTED_WAREHOUSES + 1):
            namespace.list_namespaces(ListNamespacesRequest(id=[fresh_warehouse()]))
        assert namespace.catalog(warehouse) is not held  # let go, and connected again when named
        # the closed catalog still answers, on new connections
        assert held.list_namespaces() == [("kept",)]
        assert held.load_namespace_properties(("kept",)) is not None


def test_closing_a_catalog_under_running_requests_fails_none_of_them(endpoint: str, lance_root: Path) -> None:
    with IcebergLanceNamespace(endpoint=endpoint, root=str(lance_root)) as namespace:
        warehouse = fresh_warehouse()
        namespace.create_namespace(CreateNamespaceRequest(id=[warehouse, "kept"]))
        held = namespace.catalog(warehouse)
        failures: list[BaseException] = []
        done = threading.Event()

        def keep_asking() -> None:
            try:
                while not done.is_set():
                    assert held.list_namespaces() == [("kept",)]  # our own requests
                    assert held.load_namespace_properties(("kept",)) is not None  # pyiceberg's session
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=keep_asking) for _ in range(4)]
        for thread in threads:
            thread.start()
        for _ in range(200):  # what letting the catalog go does, again and again
            held.close()
        done.set()
        for thread in threads:
            thread.join()
        assert failures == []


def test_a_catalog_closed_between_finding_its_connection_and_sending_still_answers(
    endpoint: str, lance_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The narrow window of the test above, made certain: the catalog is let go after the request
    found its pooled connection, before it is sent."""
    with IcebergLanceNamespace(endpoint=endpoint, root=str(lance_root)) as namespace:
        warehouse = fresh_warehouse()
        namespace.create_namespace(CreateNamespaceRequest(id=[warehouse, "kept"]))
        held = namespace.catalog(warehouse)
        found_route = held._route

        def route_then_close(*args: Any) -> Any:
            route = found_route(*args)
            held.close()
            return route

        monkeypatch.setattr(held, "_route", route_then_close)
        assert held.list_namespaces() == [("kept",)]


def test_a_pool_closed_before_the_session_sends_is_replaced(
    endpoint: str, lance_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same window on pyiceberg's own calls (through the session): the pool the adapter was
    handed is closed before the request goes out."""
    with IcebergLanceNamespace(endpoint=endpoint, root=str(lance_root)) as namespace:
        warehouse = fresh_warehouse()
        namespace.create_namespace(CreateNamespaceRequest(id=[warehouse, "kept"]))
        held = namespace.catalog(warehouse)
        adapter = internals.session(held).get_adapter(endpoint)
        handed = adapter.get_connection_with_tls_context
        closed: list[object] = []

        def hand_a_closed_pool(*args: Any, **kwargs: Any) -> Any:
            pool = handed(*args, **kwargs)
            if not closed:
                held.close()
                closed.append(pool)
            return pool

        monkeypatch.setattr(adapter, "get_connection_with_tls_context", hand_a_closed_pool)
        assert held.load_namespace_properties(("kept",)) is not None
        assert closed


def test_requests_through_the_server_keep_open_files_bounded(server: RunningServer, ns: IcebergLanceNamespace) -> None:
    configured = fresh_warehouse()
    ns.create_namespace(CreateNamespaceRequest(id=[configured, "sales"]))
    catalogs = kept_catalogs(ns)  # the server's too: same connection settings, so shared
    with requests.Session() as client:
        before = open_files()
        most = 0
        for _ in range(NAMED):
            answer = client.get(f"{server.uri}/v1/namespace/{fresh_warehouse()}/list", timeout=30)
            assert answer.status_code == 200, answer.text
            assert catalogs.kept_unlisted() <= KEPT_UNLISTED_WAREHOUSES
            most = max(most, open_files() - before)
        assert catalogs.kept_unlisted() == KEPT_UNLISTED_WAREHOUSES
        assert most <= OPEN_FILES_ALLOWED, f"{most} more files open after naming {NAMED} warehouses"
        data_workers_ready()
        assert client.get(f"{server.uri}/readyz", timeout=30).status_code == 200
        listed = client.get(f"{server.uri}/v1/namespace/{configured}/list", timeout=30)
        assert listed.json()["namespaces"] == ["sales"]


@pytest.fixture(scope="module")
def one_warehouse_catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCatalog]:
    """A catalog that knows one warehouse, ``known``, and answers 404 to the config of any other."""
    with local_catalog(
        tmp_path_factory.mktemp("one-warehouse"), prefix_style="defaults", warehouses=["known"]
    ) as server:
        yield server


def test_a_refused_warehouse_is_never_kept_and_leaves_no_connection(
    one_warehouse_catalog: LocalCatalog, tmp_path: Path
) -> None:
    with IcebergLanceNamespace(endpoint=one_warehouse_catalog.endpoint, root=str(tmp_path)) as namespace:
        namespace.create_namespace(CreateNamespaceRequest(id=["known", "db"]))
        catalogs = kept_catalogs(namespace)
        before = open_files()
        for _ in range(NAMED):
            with pytest.raises(NamespaceNotFoundError):
                namespace.list_namespaces(ListNamespacesRequest(id=[fresh_warehouse()]))
            assert catalogs.kept() == 1
        # nothing gathers the refused catalogs' sockets but their close: no garbage collection needed
        assert open_files() - before <= 8
        assert namespace.list_namespaces(ListNamespacesRequest(id=["known"])).namespaces == ["db"]


def test_many_threads_naming_the_same_new_warehouse_connect_once(endpoint: str, lance_root: Path) -> None:
    catalogs = WarehouseCatalogs(Settings.from_properties({"endpoint": endpoint, "root": str(lance_root)}))
    warehouse = fresh_warehouse()
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(catalogs.get(warehouse))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(got) == 8 and all(catalog is got[0] for catalog in got)
    assert catalogs.kept() == 1
    catalogs.close()
    assert catalogs.kept() == 0


def test_a_warehouse_listed_later_by_a_sharing_namespace_is_kept_for_good(endpoint: str, lance_root: Path) -> None:
    catalogs = WarehouseCatalogs(Settings.from_properties({"endpoint": endpoint, "root": str(lance_root)}), 2)
    warehouse = fresh_warehouse()
    first = catalogs.get(warehouse)  # one of the recently used
    catalogs.keep_for_good([warehouse])  # what a namespace with ``warehouses`` sharing them does
    for _ in range(3):
        catalogs.get(fresh_warehouse())
    assert catalogs.get(warehouse) is first
    assert catalogs.kept() == 3  # the listed one, and the two most recent others
    catalogs.close()
