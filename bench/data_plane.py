# ruff: noqa: E402  (LANCE_LOG is set before Lance is imported)
"""query_table and insert_into_table through our REST server, against pylance's own REST server
(RestAdapter("dir")) for the same calls, and queries against pylance searching a dataset it keeps
open (the floor: no server, no request).

Data: 100,000 rows of 128-d float32 vectors with an IVF_PQ index; queries ask for k=10 with a new
random vector each call. Both servers run in their own processes or threads on this machine; the
client is pylance's native RestNamespace, as Lance itself would use it. Latency is measured with
sequential calls (p50, p99), after 16 clients have queried each server for 3 seconds and 1,000
warm-up calls on each path (servers are measured warm: the local catalog is a JVM, which compiles its
request path as it serves, and each of our data workers keeps the index it read); the paths take
turns, 30 calls at a time, so that a slow stretch of a shared machine falls on all of them alike.
Throughput is measured with 4 client threads. Then 16 clients, each a RestNamespace of its own on a
thread of its own, query one server at a time for 5 seconds in all, the servers taking turns in four
rounds (as the sequential calls do): p50, p99 and queries per second.
A fourth path is our server started with ``-p read_consistency_interval=1`` (reads may skip the
catalog for a second; the opt-in, not the default): shown for information, next to the target
figures, which are those of the default, strongly consistent server. A fifth, also for
information, is the floor under any Python server: ``bare_server.py``, the same search on a
worker thread behind Starlette and uvicorn, with no catalog and none of the bridge's code.
The insert appends 100,000 rows, five times through each server in turns (the figure is the median:
one insert takes a fifth of a second, and single ones varied by a quarter from run to run).
Lance logs a deprecation warning on every vector search that names its columns (``_distance`` is
still added to them, as both servers answer); this process sets ``LANCE_LOG`` to silence that one
module's warnings and keep every other warning and error (an explicit ``LANCE_LOG`` wins).
The directory server refuses request bodies over 2 MiB, so rows travel in Arrow IPC bodies of
3,000 rows (1.5 MB) to both servers, for the table's creation and for the timed insert alike.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/data_plane.py [--rows 100000] [--calls 300]
"""

from __future__ import annotations

import os

# before Lance starts its logger: the search deprecation warning, once a call, is the only one silenced
os.environ.setdefault("LANCE_LOG", "warn,lance::dataset::scanner=error")

import argparse
import io
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import lance
import lance.namespace
import numpy as np
import pyarrow as pa
import requests
from lance_namespace import (
    CreateNamespaceRequest,
    CreateTableIndexRequest,
    CreateTableRequest,
    DescribeTableRequest,
    InsertIntoTableRequest,
    QueryTableRequest,
)
from rest_server import free_port, interleaved_latency, start_server, throughput, timed

from lance_iceberg_ns.testing import local_catalog

DIMENSION = 128
TABLE = ["bench_wh", "db", "vectors"]
ROWS_PER_BODY = 3_000
OURS, REFERENCE, LOCAL = "our REST server", 'pylance RestAdapter("dir")', "pylance, dataset kept open"
OURS_INTERVAL = "ours, read_consistency_interval 1 s"
BARE = "bare server: the search alone"
CLIENTS = 16
# targets: the default (strongly consistent) server against pylance's own server and pylance itself
TARGET_VS_DIRECTORY, TARGET_VS_LOCAL, TARGET_CONCURRENT, TARGET_INSERT = 0.5, 2.0, 1.5, 1.2


def vectors(rows: int, seed: int) -> pa.Table:
    generator = np.random.default_rng(seed)
    flat = pa.array(generator.random(rows * DIMENSION, dtype=np.float32))
    return pa.table(
        {"id": pa.array(range(rows), pa.int64()), "vector": pa.FixedSizeListArray.from_arrays(flat, DIMENSION)}
    )


def ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def bodies(table: pa.Table) -> list[bytes]:
    """The rows as Arrow IPC stream bodies of ``ROWS_PER_BODY`` rows."""
    return [ipc(table.slice(start, ROWS_PER_BODY)) for start in range(0, table.num_rows, ROWS_PER_BODY)]


def insert(client: Any, chunks: list[bytes]) -> None:
    for chunk in chunks:
        client.insert_into_table(InsertIntoTableRequest(id=TABLE, mode="append"), chunk)


def query_request(generator: np.random.Generator) -> QueryTableRequest:
    vector = generator.random(DIMENSION, dtype=np.float32).tolist()
    return QueryTableRequest.from_dict(
        {"id": TABLE, "vector": {"single_vector": vector}, "k": 10, "columns": {"column_names": ["id"]}}
    )


def prepare(client: Any, chunks: list[bytes]) -> None:
    """The table with its IVF_PQ index, made through the server under test."""
    client.create_namespace(CreateNamespaceRequest(id=TABLE[:2]))
    client.create_table(CreateTableRequest(id=TABLE), chunks[0])
    insert(client, chunks[1:])
    client.create_table_index(
        CreateTableIndexRequest(id=TABLE, column="vector", index_type="IVF_PQ", num_partitions=64, num_sub_vectors=16)
    )


def searches(client: Any) -> Callable[[], Any]:
    """One query after another, each with a new random vector (the same sequence on every path)."""
    generator = np.random.default_rng(7)
    return lambda: client.query_table(query_request(generator))


def local_searches(dataset: lance.LanceDataset) -> Callable[[], Any]:
    generator = np.random.default_rng(7)

    def search() -> None:
        vector = generator.random(DIMENSION, dtype=np.float32)
        dataset.to_table(columns=["id"], nearest={"column": "vector", "q": vector, "k": 10})

    return search


WARM_SECONDS = 3.0  # of the concurrent clients on each server, before the rounds that count


def concurrent(make_search: Callable[[], Callable[[], Any]], clients: int, seconds: float) -> tuple[list[float], float]:
    """Every call's time (s) with ``clients`` threads calling at once for ``seconds``, each through
    a client of its own, and the time they took in all."""
    calls = [make_search() for _ in range(clients)]
    start = threading.Barrier(clients)

    def client(call: Callable[[], Any]) -> tuple[list[float], float]:
        start.wait()
        deadline, taken = time.perf_counter() + seconds, []
        while (started := time.perf_counter()) < deadline:
            call()
            taken.append(time.perf_counter() - started)
        return taken, time.perf_counter()

    began = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(client, calls))
    return [one for taken, _ in results for one in taken], max(ended for _, ended in results) - began


def concurrent_in_turns(
    servers: dict[str, str], clients: int, seconds: float, rounds: int
) -> dict[str, dict[str, float]]:
    """p50 and p99 (ms) of every call, and calls per second, per server: ``clients`` clients query
    one server at a time, the servers taking turns for ``rounds`` rounds of ``seconds / rounds``,
    so that a slow stretch of a shared machine falls on every server alike."""
    samples: dict[str, list[float]] = {name: [] for name in servers}
    elapsed = dict.fromkeys(servers, 0.0)
    for _ in range(rounds):
        for name, at in servers.items():
            taken, took = concurrent(
                lambda at=at: searches(lance.namespace.RestNamespace(uri=at)), clients, seconds / rounds
            )
            samples[name] += taken
            elapsed[name] += took
    summaries = {}
    for name, taken in samples.items():
        taken.sort()
        summaries[name] = {
            "p50": taken[len(taken) // 2] * 1000,
            "p99": taken[int(len(taken) * 0.99)] * 1000,
            "mean": statistics.mean(taken) * 1000,
            "q/s": len(taken) / elapsed[name],
        }
    return summaries


def start_bare_server(location: str) -> tuple[subprocess.Popen[bytes], str]:
    """``bare_server.py`` in a process of its own, serving the dataset at ``location``."""
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "bare_server:app", "--port", str(port), "--log-level", "warning"]
    environment = {**os.environ, "BARE_DATASET": location}
    process = subprocess.Popen(command, cwd=Path(__file__).parent, env=environment, stdout=subprocess.DEVNULL)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            requests.get(uri, timeout=2)
            return process, uri
        except requests.ConnectionError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("the bare server did not start") from None
            time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1000, help="calls on each path before measuring")
    parser.add_argument("--clients", type=int, default=CLIENTS, help="concurrent clients for the concurrency row")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long the concurrent clients query each server")
    parser.add_argument("--insert-rounds", type=int, default=5, help="inserts per server (median)")
    args = parser.parse_args()
    data, more = bodies(vectors(args.rows, seed=1)), bodies(vectors(args.rows, seed=2))
    inserts: dict[str, list[float]] = {REFERENCE: [], OURS: []}

    with (
        tempfile.TemporaryDirectory() as work,
        local_catalog(Path(work) / "catalog", prefix_style="defaults") as catalog,
        lance.namespace.RestAdapter("dir", {"root": str(Path(work) / "dir")}, port=0) as adapter,
    ):
        reference = lance.namespace.RestNamespace(uri=f"http://127.0.0.1:{adapter.port}")
        reference.create_namespace(CreateNamespaceRequest(id=TABLE[:1]))
        prepare(reference, data)
        root = str(Path(work) / "lance")
        process, uri = start_server(catalog.endpoint, root)
        bounded, bounded_uri = start_server(catalog.endpoint, root, "-p", "read_consistency_interval=1")
        started = [process, bounded]
        try:
            ours = lance.namespace.RestNamespace(uri=uri)
            prepare(ours, data)
            searched = ours.describe_table(DescribeTableRequest(id=TABLE, load_detailed_metadata=True))
            dataset = lance.dataset(searched.location, version=searched.version)  # the rows the servers search
            bare, bare_uri = start_bare_server(searched.location)
            started.append(bare)
            paths = {
                REFERENCE: searches(reference),
                OURS: searches(ours),
                LOCAL: local_searches(dataset),
                OURS_INTERVAL: searches(lance.namespace.RestNamespace(uri=bounded_uri)),
                BARE: searches(lance.namespace.RestNamespace(uri=bare_uri)),
            }
            for at in (f"http://127.0.0.1:{adapter.port}", uri, bounded_uri):  # every thread and worker warm
                concurrent(lambda at=at: searches(lance.namespace.RestNamespace(uri=at)), args.clients, WARM_SECONDS)
            queries = interleaved_latency(paths, args.calls, rounds=max(1, args.calls // 30), warmup=args.warmup)
            for name, search in paths.items():
                queries[name]["q/s"] = throughput(search, args.threads)
            servers = {REFERENCE: f"http://127.0.0.1:{adapter.port}", OURS: uri}
            together = concurrent_in_turns(servers, args.clients, args.seconds, rounds=4)
            for _ in range(args.insert_rounds):  # taking turns, as the queries do
                inserts[REFERENCE].append(timed(lambda: insert(reference, more)))
                inserts[OURS].append(timed(lambda: insert(ours, more)))
        finally:
            for server in started:
                server.terminate()
                server.wait(timeout=30)

    print(
        f"query_table: {args.rows} rows of {DIMENSION}-d vectors, IVF_PQ, k=10; {args.calls} sequential calls (ms), "
        f"{args.threads}-thread throughput, {os.cpu_count()} cores"
    )
    print(f"{'path':<36}{'p50':>8}{'p99':>8}{'mean':>8}{'q/s':>8}")
    for name, figures in queries.items():
        print(f"{name:<36}{figures['p50']:>8.2f}{figures['p99']:>8.2f}{figures['mean']:>8.2f}{figures['q/s']:>8.0f}")
    ours_p50, directory_p50, local_p50 = (queries[name]["p50"] for name in (OURS, REFERENCE, LOCAL))
    print(f"query p50 vs the directory server: {ours_p50 / directory_p50:.2f}x (target <= {TARGET_VS_DIRECTORY}x)")
    print(f"query p50 vs pylance kept open: {ours_p50 / local_p50:.2f}x (target <= {TARGET_VS_LOCAL}x)")
    bounded_p50 = queries[OURS_INTERVAL]["p50"]
    print(f"read_consistency_interval=1 p50 vs the directory server: {bounded_p50 / directory_p50:.2f}x (info)")
    print(f"read_consistency_interval=1 p50 vs pylance kept open: {bounded_p50 / local_p50:.2f}x (info)")
    bare_p50 = queries[BARE]["p50"]
    print(f"bare server p50 vs pylance kept open: {bare_p50 / local_p50:.2f}x (info: the floor under a Python server)")
    print(f"our server p50 vs the bare server: {ours_p50 / bare_p50:.2f}x (info)")
    print(f"query_table, {args.clients} concurrent clients for {args.seconds:g} s each (ms), {os.cpu_count()} cores")
    print(f"{'path':<40}{'p50':>8}{'p99':>8}{'mean':>8}{'q/s':>8}")
    for name, figures in together.items():
        name = f"{args.clients} clients, {name}"
        print(f"{name:<40}{figures['p50']:>8.2f}{figures['p99']:>8.2f}{figures['mean']:>8.2f}{figures['q/s']:>8.0f}")
    ratio = together[OURS]["q/s"] / together[REFERENCE]["q/s"]
    print(f"{args.clients} clients: throughput vs the directory server: {ratio:.2f}x (target >= {TARGET_CONCURRENT}x)")
    ratio = together[OURS]["p99"] / together[REFERENCE]["p99"]
    print(f"{args.clients} clients: p99 vs the directory server: {ratio:.2f}x (info)")
    print(f"insert_into_table, {args.rows} rows (s), median of {args.insert_rounds} rounds taken in turns")
    insert_seconds = {name: statistics.median(taken) for name, taken in inserts.items()}
    for name, seconds in insert_seconds.items():
        print(f"{name:<36}{seconds:>8.2f}")
    ratio = insert_seconds[OURS] / insert_seconds[REFERENCE]
    print(f"insert vs the directory server: {ratio:.2f}x (target <= {TARGET_INSERT}x)")


if __name__ == "__main__":
    main()
