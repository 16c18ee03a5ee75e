"""Faults between the bridge and the catalog, injected by a proxy on loopback: refused
connections, resets mid-response, answers held past the read timeout, 500/502/503 with and
without Retry-After, 429, truncated bodies and lost answers; and a catalog restarted mid-run.

Expected: bounded retries with backoff for what is safe to retry, timeouts honoured, typed errors
(ServiceUnavailable 17, Throttling 21, Internal 18), and no duplicate or spurious objects."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance_namespace.errors import (
    ErrorCode,
    InternalError,
    LanceNamespaceError,
    ServiceUnavailableError,
    ThrottlingError,
)

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.testing import local_catalog

from ..faults import Fault, FaultProxy


@pytest.fixture
def proxy(endpoint: str) -> Iterator[FaultProxy]:
    faulty = FaultProxy(endpoint)
    yield faulty
    injected = [seen.fault for seen in faulty.seen if seen.fault != "pass"]
    faulty.close()
    assert injected, "the test met none of the faults it injected"


@pytest.fixture
def faulty_ns(proxy: FaultProxy, lance_root: Path, db: list[str]) -> Iterator[IcebergLanceNamespace]:
    """The bridge through the proxy: 2 retries, a 1 s read timeout, no table-type memory."""
    with IcebergLanceNamespace(
        endpoint=proxy.endpoint,
        root=str(lance_root),
        max_retries="2",
        read_timeout="1000",
        connect_timeout="1000",
        table_type_cache_seconds="0",
    ) as ns:
        ns.namespace_exists({"id": db})  # resolve the warehouse before faults start
        yield ns


def _table(ns: IcebergLanceNamespace, db: list[str], name: str = "events") -> list[str]:
    table_id = [*db, name]
    lance.write_dataset(pa.table({"id": [1, 2]}), namespace_client=ns, table_id=table_id)
    return table_id


def _events_under_fire(ns: IcebergLanceNamespace, proxy: FaultProxy, db: list[str], *faults: Fault) -> list[str]:
    """A table whose loadTable requests (and only those) meet ``faults``, in order."""
    table_id = _table(ns, db)
    proxy.seen.clear()
    proxy.only_paths_with = "/tables/events"
    proxy.inject(*faults)
    return table_id


def _requests_for(proxy: FaultProxy, fragment: str) -> list[str]:
    return [seen.fault for seen in proxy.seen if fragment in seen.path]


@pytest.mark.parametrize("status", [502, 503, 504, 429])
def test_retryable_statuses_on_reads_are_retried_then_succeed(
    faulty_ns: IcebergLanceNamespace, proxy: FaultProxy, db: list[str], status: int
) -> None:
    table_id = _events_under_fire(faulty_ns, proxy, db, Fault("status", status), Fault("status", status))
    assert faulty_ns.describe_table({"id": table_id}).location
    assert _requests_for(proxy, "/tables/events") == ["status", "status", "pass"]


@pytest.mark.parametrize(
    ("status", "error", "code"),
    [
        (503, ServiceUnavailableError, 17),
        (502, ServiceUnavailableError, 17),
        (504, ServiceUnavailableError, 17),
        (429, ThrottlingError, 21),
    ],
)
def test_retries_are_bounded_and_end_in_a_typed_error(
    faulty_ns: IcebergLanceNamespace,
    proxy: FaultProxy,
    db: list[str],
    status: int,
    error: type[LanceNamespaceError],
    code: int,
) -> None:
    table_id = _events_under_fire(faulty_ns, proxy, db, *[Fault("status", status)] * 10)
    with pytest.raises(error) as raised:
        faulty_ns.describe_table({"id": table_id})
    assert raised.value.code == ErrorCode(code)
    # 3 tries from the adapter (1 + max_retries), and pyiceberg's own session retry at most doubles it
    assert 3 <= len(_requests_for(proxy, "/tables/events")) <= 6


def test_retry_after_is_honoured(faulty_ns: IcebergLanceNamespace, proxy: FaultProxy, db: list[str]) -> None:
    table_id = _events_under_fire(faulty_ns, proxy, db, Fault("status", 503, retry_after="1"))
    started = time.monotonic()
    faulty_ns.describe_table({"id": table_id})
    assert time.monotonic() - started >= 0.95


def test_a_500_is_internal_and_not_retried(faulty_ns: IcebergLanceNamespace, proxy: FaultProxy, db: list[str]) -> None:
    table_id = _events_under_fire(faulty_ns, proxy, db, Fault("status", 500))
    with pytest.raises(InternalError):
        faulty_ns.describe_table({"id": table_id})
    assert faulty_ns.describe_table({"id": table_id}).location  # the next call is fine


@pytest.mark.parametrize("kind", ["reset", "truncate"])
def test_broken_answers_to_reads_are_retried(
    faulty_ns: IcebergLanceNamespace, proxy: FaultProxy, db: list[str], kind: str
) -> None:
    table_id = _events_under_fire(faulty_ns, proxy, db, Fault(kind))
    assert faulty_ns.describe_table({"id": table_id}).location
    assert _requests_for(proxy, "/tables/events")[0] == kind


def test_an_answer_held_past_the_read_timeout_is_a_bounded_failure(
    faulty_ns: IcebergLanceNamespace, proxy: FaultProxy, db: list[str]
) -> None:
    table_id = _events_under_fire(faulty_ns, proxy, db, *[Fault("delay", seconds=2.5)] * 6)
    started = time.monotonic()
    with pytest.raises(ServiceUnavailableError):
        faulty_ns.describe_table({"id": table_id})
    assert time.monotonic() - started < 15  # 1 s read timeout, 2 retries, bounded backoff


def test_refused_connections_are_service_unavailable(lance_root: Path, db: list[str]) -> None:
    closed = FaultProxy("http://127.0.0.1:9")
    endpoint = closed.endpoint
    closed.close()  # nothing listens there any more
    with IcebergLanceNamespace(endpoint=endpoint, root=str(lance_root), max_retries="1", connect_timeout="500") as ns:
        started = time.monotonic()
        with pytest.raises(ServiceUnavailableError):
            ns.list_tables({"id": db})
        assert time.monotonic() - started < 10


@pytest.mark.parametrize("kind", ["lose_answer", "reset"])
def test_a_create_whose_answer_was_lost_ends_with_one_table(
    faulty_ns: IcebergLanceNamespace, proxy: FaultProxy, db: list[str], kind: str
) -> None:
    proxy.only_paths_with, proxy.only_method = "/tables", "POST"
    proxy.inject(Fault(kind))  # the create lands upstream; its answer never arrives
    declared = faulty_ns.declare_table({"id": [*db, "fresh"]})
    assert declared.location and declared.location.rsplit("/", 1)[1].startswith("fresh-")
    assert "lance-iceberg-ns.create-id" not in (declared.properties or {})  # bookkeeping, not shown
    assert faulty_ns.list_tables({"id": db, "include_declared": True}).tables == ["fresh"]
    posts = [seen for seen in proxy.seen if seen.method == "POST" and seen.path.endswith("/tables")]
    assert posts[0].fault == kind


def test_a_create_after_a_lost_answer_still_refuses_someone_elses_table(
    faulty_ns: IcebergLanceNamespace, proxy: FaultProxy, db: list[str], endpoint: str, lance_root: Path
) -> None:
    from lance_namespace.errors import TableAlreadyExistsError

    with IcebergLanceNamespace(endpoint=endpoint, root=str(lance_root)) as other:
        other.declare_table({"id": [*db, "taken"]})
    proxy.only_paths_with, proxy.only_method = "/tables", "POST"
    proxy.inject(Fault("status", 502))  # a gateway error on the create: unknown outcome
    with pytest.raises(TableAlreadyExistsError):
        faulty_ns.declare_table({"id": [*db, "taken"]})


def test_a_restarted_catalog_loses_nothing(tmp_path: Path, lance_root: Path) -> None:
    data = tmp_path / "catalog"
    with local_catalog(data, prefix_style="defaults") as first:
        port = int(first.endpoint.rsplit(":", 1)[1])
        ns = IcebergLanceNamespace(endpoint=first.endpoint, root=str(lance_root), max_retries="1")
        ns.create_namespace({"id": ["wh", "db"]})
        for i in range(5):
            lance.write_dataset(pa.table({"id": [i]}), namespace_client=ns, table_id=["wh", "db", f"t{i}"])
    with pytest.raises(ServiceUnavailableError):  # down
        ns.list_tables({"id": ["wh", "db"]})
    with local_catalog(data, prefix_style="defaults", port=port):
        assert ns.list_tables({"id": ["wh", "db"]}).tables == [f"t{i}" for i in range(5)]
        for i in range(5):
            dataset = lance.dataset(namespace_client=ns, table_id=["wh", "db", f"t{i}"])
            assert dataset.to_table()["id"].to_pylist() == [i]
        lance.write_dataset(pa.table({"id": [9]}), namespace_client=ns, table_id=["wh", "db", "t9"])
        assert len(ns.list_tables({"id": ["wh", "db"]}).tables) == 6
    ns.close()
