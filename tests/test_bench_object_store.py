"""The S3 request counts of bench/object_store.py: its proxy (bench/latency_proxy.py, counting mode)
passes signed S3 requests through unchanged and logs each one once, with its connection, and the
benchmark names each request by its key relative to the table. The benchmark's figures themselves
are measured by running it, not here."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import obstore
import pytest
from obstore.store import S3Store

from .helpers import script_module
from .seaweed import ACCESS_KEY, BUCKET, REGION, SECRET_KEY, SeaweedFS

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def latency_proxy() -> ModuleType:
    return script_module(ROOT / "bench" / "latency_proxy.py")


@pytest.fixture(scope="module")
def object_store_bench(latency_proxy: ModuleType) -> ModuleType:
    return script_module(ROOT / "bench" / "object_store.py")  # imports latency_proxy, loaded above


def _store(endpoint: str) -> S3Store:
    return S3Store(
        BUCKET,
        endpoint=endpoint,
        access_key_id=ACCESS_KEY,
        secret_access_key=SECRET_KEY,
        region=REGION,
        client_options={"allow_http": True},
    )


def test_signed_s3_requests_pass_the_counting_proxy_and_each_is_logged_once_with_its_connection(
    latency_proxy: ModuleType, seaweedfs: SeaweedFS
) -> None:
    with latency_proxy.counting_proxy_process(seaweedfs.endpoint, round_trip_ms=0) as proxied:
        store = _store(proxied.endpoint)
        prefix = seaweedfs.fresh_root().rsplit("/", 1)[1]
        body = b"GET /not-a-request HTTP/1.1\r\n\r\n" * 1000  # a body that looks like requests
        obstore.put(store, f"{prefix}/a.bin", body)
        assert bytes(obstore.get(store, f"{prefix}/a.bin").bytes()) == body
        assert [item["path"] for batch in obstore.list(store, prefix=f"{prefix}/") for item in batch] == [
            f"{prefix}/a.bin"
        ]
        obstore.delete(store, f"{prefix}/a.bin")
        taken = proxied.take()
        assert [request.split("?")[0] for _, request in taken] == [
            f"PUT /{BUCKET}/{prefix}/a.bin",
            f"GET /{BUCKET}/{prefix}/a.bin",
            f"GET /{BUCKET}",
            f"POST /{BUCKET}",  # obstore deletes in bulk
        ]
        assert "list-type=2" in taken[2][1] and taken[3][1].endswith("?delete")
        # kept alive: a connection carries several requests (the client may open a second one,
        # used or not, when it sends before its pool has the first back)
        connections = [connection for connection, _ in taken]
        assert max(map(connections.count, connections)) >= 2 and set(connections) <= {1, 2}, taken
        assert len(set(connections)) <= proxied.connections <= 2
        assert proxied.take() == []  # each request is taken once


def test_the_request_reader_skips_bodies_by_length_and_by_chunk_whatever_the_split(
    latency_proxy: ModuleType,
) -> None:
    stream = (
        b"PUT /b/k HTTP/1.1\r\nHost: h\r\nContent-Length: 24\r\n\r\nGET /x HTTP/1.1\r\n\r\n12345"
        b"POST /b/k?uploads HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"1a;name=v\r\nHEAD /y HTTP/1.1\r\n\r\n123456\r\n0\r\nTrailer: t\r\n\r\n"
        b"GET /b?list-type=2&prefix=p%2F HTTP/1.1\r\n\r\n"
    )
    expected = ["PUT /b/k", "POST /b/k?uploads", "GET /b?list-type=2&prefix=p%2F"]
    for size in (1, 7, len(stream)):
        reader = latency_proxy._RequestReader()
        found = [line for start in range(0, len(stream), size) for line in reader.feed(stream[start : start + size])]
        assert found == expected, size


def test_requests_are_named_by_key_relative_to_the_table_in_the_order_they_came(
    object_store_bench: ModuleType,
) -> None:
    root, namespace = "s3://bucket/abc123/ours", "r20_s1"
    location = f"{root}/wh/{namespace}/t-1234.lance"
    transaction = "0-5f68685e-ea04-40ab-9cf9-843938ca5186.txn"
    requests = [
        ("GET /bucket/abc123/ours/wh/r20_s1/t-1234.lance/.lance-iceberg-ns-owner.json", True),
        ("GET /bucket/abc123/ours/wh/r20_s1/.lance-iceberg-ns-owner.json", False),
        ("GET /bucket?list-type=2&prefix=abc123%2Fours%2Fwh%2Fr20_s1%2Ft-1234.lance%2F_versions%2F", False),
        ("GET /bucket?list-type=2&prefix=abc123%2Fours%2Fwh%2Fr20_s1%2Ft-1234.lance%2F_versions%2F", False),
        ("GET /bucket?delimiter=%2F&list-type=2&prefix=abc123%2Fours%2Fwh%2Fr20_s1%2Ft-1234.lance%2F", False),
        ("PUT /bucket/abc123/ours/wh/r20_s1/t-1234.lance/data/0110101000010101111100011dfb484e59b6ff55.lance", True),
        (f"PUT /bucket/abc123/ours/wh/r20_s1/t-1234.lance/_transactions/{transaction}", True),
        ("PUT /bucket/abc123/ours/wh/r20_s1/t-1234.lance/.lance-reserved?partNumber=1&uploadId=1f12_76f0", False),
        ("POST /bucket?delete", False),
    ]
    measured = object_store_bench.Measured(0.1, requests, 0, 3, location)
    assert object_store_bench.breakdown(measured, root, namespace) == [
        "1 x GET .lance-iceberg-ns-owner.json  (new connection)",
        "1 x GET {root}/wh/{ns}/.lance-iceberg-ns-owner.json",
        "2 x LIST _versions/",
        "1 x LIST ./ delimiter=/",
        "1 x PUT data/{id}.lance  (new connection)",
        "1 x PUT _transactions/0-{uuid}.txn  (new connection)",
        "1 x PUT .lance-reserved?partNumber=1&uploadId",
        "1 x POST ?delete",
    ]
