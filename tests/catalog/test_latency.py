"""A catalog a round trip away: the benchmarks' latency proxy (bench/latency_proxy.py) really adds
the delay and keeps connections alive, and the bridge keeps many lookups in flight, keeps their
connections, and spends no extra connection or token on its first call.

Only lower bounds of time are asserted (a delay cannot be shorter than it is); the speed itself is
measured by bench/latency.py against the reference, not here."""

from __future__ import annotations

import http.client
import select
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import requests
from lance_namespace import DeclareTableRequest, DescribeTableRequest, ListNamespacesRequest, ListTablesRequest

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.catalog.warehouses import connection_pool_size
from lance_iceberg_ns.config.settings import Settings
from lance_iceberg_ns.testing import LocalCatalog, local_catalog

from ..conftest import RequestCounter
from ..helpers import script_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def latency_proxy() -> ModuleType:
    return script_module(ROOT / "bench" / "latency_proxy.py")


@pytest.fixture
def proxied(latency_proxy: ModuleType, endpoint: str) -> Iterator[object]:
    with latency_proxy.LatencyProxy(endpoint, round_trip_ms=40) as proxy:
        yield proxy


def _declare(endpoint: str, root: Path, db: list[str], count: int) -> None:
    with IcebergLanceNamespace(endpoint=endpoint, root=str(root)) as ns:
        for i in range(count):
            ns.declare_table(DeclareTableRequest(id=[*db, f"t{i:03d}"]))


def test_proxy_adds_a_round_trip_to_each_request_and_one_more_to_a_new_connection(
    latency_proxy: ModuleType, endpoint: str
) -> None:
    with latency_proxy.LatencyProxy(endpoint, round_trip_ms=100) as proxy, requests.Session() as session:
        took = []
        for _ in range(3):
            started = time.perf_counter()
            assert session.get(f"{proxy.endpoint}/v1/config?warehouse=wh").status_code == 200
            took.append(time.perf_counter() - started)
        assert took[0] >= 0.2  # the handshake's round trip, then the request's
        assert all(seconds >= 0.1 for seconds in took[1:])
        assert proxy.connections == 1  # kept alive through the proxy
        assert proxy.in_flight == 0 and proxy.peak_in_flight == 1
    assert proxy.port and not any(t.name == "latency-proxy" for t in threading.enumerate())  # stopped


def test_proxy_process_binds_loopback_and_stops_with_its_block(latency_proxy: ModuleType, endpoint: str) -> None:
    with latency_proxy.proxy_process(endpoint, round_trip_ms=10) as proxied_endpoint:
        assert proxied_endpoint.startswith("http://127.0.0.1:")
        assert requests.get(f"{proxied_endpoint}/v1/config?warehouse=wh", timeout=10).status_code == 200
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{proxied_endpoint}/v1/config?warehouse=wh", timeout=10)


def test_a_first_listing_keeps_many_lookups_in_flight_and_its_connections_open(
    latency_proxy: ModuleType, endpoint: str, lance_root: Path, db: list[str]
) -> None:
    _declare(endpoint, lance_root, db, 80)
    with (
        latency_proxy.LatencyProxy(endpoint, round_trip_ms=100) as proxy,
        IcebergLanceNamespace(endpoint=proxy.endpoint, root=str(lance_root), table_type_cache_seconds="0") as ns,
    ):
        assert len(ns.list_tables(ListTablesRequest(id=db)).tables) == 80
        # far more than the machine's cores: each lookup mostly waits for the network
        assert proxy.peak_in_flight >= 24
        for _ in range(2):
            ns.list_tables(ListTablesRequest(id=db))  # every table looked up again
        # the pool keeps a connection per lookup thread: listings reuse them, none is thrown away
        assert proxy.connections <= ns.settings.lookup_threads + 1 <= connection_pool_size(ns.settings)


def test_lookup_threads_start_only_as_a_listing_needs_them(endpoint: str, lance_root: Path, db: list[str]) -> None:
    _declare(endpoint, lance_root, db, 3)

    def lookup_threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("lance-iceberg-ns-lookup")}

    before = lookup_threads()  # other namespaces in this process may keep theirs
    with IcebergLanceNamespace(endpoint=endpoint, root=str(lance_root), table_type_cache_seconds="0") as ns:
        assert ns.list_tables(ListTablesRequest(id=db)).tables == ["t000", "t001", "t002"]
        assert 1 <= len(lookup_threads() - before) <= 3
    assert Settings.from_properties({"endpoint": endpoint}).lookup_threads == 64


def test_the_first_call_reuses_the_connection_the_config_was_fetched_on(
    proxied: object, endpoint: str, lance_root: Path, db: list[str]
) -> None:
    _declare(endpoint, lance_root, db, 1)
    proxy_endpoint = proxied.endpoint  # type: ignore[attr-defined]
    with IcebergLanceNamespace(endpoint=proxy_endpoint, root=str(lance_root)) as ns:
        ns.describe_table(DescribeTableRequest(id=[*db, "t000"]))
    assert proxied.connections == 1  # type: ignore[attr-defined]


@pytest.fixture
def oauth_catalog(tmp_path: Path) -> Iterator[LocalCatalog]:
    with local_catalog(tmp_path / "catalog", prefix_style="defaults", oauth_clients={"job": "s3cret-v4lue"}) as catalog:
        yield catalog


def test_the_first_call_fetches_one_oauth2_token(
    oauth_catalog: LocalCatalog, tmp_path: Path, request_counter: RequestCounter
) -> None:
    with IcebergLanceNamespace(
        endpoint=oauth_catalog.endpoint, root=str(tmp_path), credential="job:s3cret-v4lue"
    ) as ns:
        ns.list_namespaces(ListNamespacesRequest(id=["wh"]))
        ns.list_namespaces(ListNamespacesRequest(id=["wh"]))
    token_requests = [url for _, url in request_counter.requests if url.endswith("/oauth/tokens")]
    assert len(token_requests) == 1  # the config's token serves the catalog's session too


def test_an_unchanged_table_is_loaded_conditionally_and_a_changed_one_in_full(
    ns: IcebergLanceNamespace, db: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """loadTable is freshness-aware: the ETag of the last answer goes back as If-None-Match, the
    catalog answers an unchanged table with a bodiless 304, and any change is answered in full."""
    table_id = [*db, "t"]
    ns.declare_table(DeclareTableRequest(id=table_id))
    catalog = ns.catalog(db[0])
    statuses: list[int] = []
    send = catalog._send_if_ok

    def recorded(*args: Any, **kwargs: Any) -> Any:
        answer = send(*args, **kwargs)
        statuses.append(answer.status)
        return answer

    monkeypatch.setattr(catalog, "_send_if_ok", recorded)
    first = ns.describe_table(DescribeTableRequest(id=table_id))
    assert ns.describe_table(DescribeTableRequest(id=table_id)) == first
    assert statuses[-1] == 304
    catalog.load_table(tuple(table_id[1:])).transaction().set_properties(owner="ops").commit_transaction()
    assert ns.describe_table(DescribeTableRequest(id=table_id)).properties["owner"] == "ops"  # changed: in full
    assert statuses[-1] == 200
    ns.rename_table({"id": table_id, "new_table_name": "t_old"})
    ns.declare_table(DeclareTableRequest(id=table_id))  # the same name, another table
    again = ns.describe_table(DescribeTableRequest(id=table_id))
    assert statuses[-1] == 200 and again.location != first.location


def test_a_request_goes_through_the_pool_and_adapter_the_session_has_now(
    ns: IcebergLanceNamespace, db: list[str]
) -> None:
    """The pool and path of a catalog URL are worked out once: a pool closed since (the pool
    manager cleared, the bridge's connections given back) is replaced, and an adapter mounted
    since (another transport, SigV4 signing) takes the request from then on."""
    table_id = [*db, "t"]
    ns.declare_table(DeclareTableRequest(id=table_id))
    catalog = ns.catalog(db[0])
    first = ns.describe_table(DescribeTableRequest(id=table_id))
    session = catalog._session
    adapter = session.get_adapter(catalog.uri)
    adapter.poolmanager.clear()  # every pool closed
    assert ns.describe_table(DescribeTableRequest(id=table_id)) == first
    sent: list[str] = []

    class Recording(requests.adapters.HTTPAdapter):
        def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
            sent.append(str(request.url))
            return super().send(request, **kwargs)

    session.mount(catalog.uri, Recording())
    assert ns.describe_table(DescribeTableRequest(id=table_id)) == first
    assert any("/tables/t?" in url for url in sent)


def test_the_local_catalog_keeps_connections_open_past_two_hundred_idle_ones(tmp_path: Path) -> None:
    """The JDK's server closed every connection past 200 idle ones after its answer: in a long
    test session (bridges pool up to 64 connections each) a write sent on one as it closed was
    reset. The local catalog keeps thousands open."""
    with local_catalog(tmp_path / "catalog") as catalog:
        _keeps_connections_open(catalog.endpoint)


def _keeps_connections_open(endpoint: str) -> None:
    host, port = endpoint.split("//", 1)[1].rsplit(":", 1)

    def answered(connection: http.client.HTTPConnection) -> None:
        connection.request("GET", "/v1/config?warehouse=idle")
        connection.getresponse().read()

    held = [http.client.HTTPConnection(host, int(port), timeout=10) for _ in range(260)]
    try:
        for connection in held:
            answered(connection)
        time.sleep(0.5)  # the server closes a connection, if it does, once the answer is out
        closed = []
        for connection in held[-10:]:
            assert connection.sock is not None
            readable, _, _ = select.select([connection.sock], [], [], 0)
            closed.append(bool(readable) and connection.sock.recv(1) == b"")
        assert not any(closed)
    finally:
        for connection in held:
            connection.close()
