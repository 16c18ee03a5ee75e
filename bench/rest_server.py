"""describe_table through the Lance REST server against calling the namespace in-process, and
against pylance's own REST server (RestAdapter("dir")) for the same call shape.

The server runs in its own process (``lance-iceberg-ns serve``) over the local Iceberg catalog;
the client is pylance's native RestNamespace, as Lance itself would use it. Latency is measured
with sequential calls; throughput with several client threads.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python bench/rest_server.py [--calls 2000] [--threads 4]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import lance
import lance.namespace
import pyarrow as pa
import requests
from lance_namespace import CreateNamespaceRequest, DescribeTableRequest

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.testing import local_catalog


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_server(
    endpoint: str, root: str, *options: str, log: Path | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """``lance-iceberg-ns serve`` in a process of its own, with ``options`` (``-p key=value``), its
    output in ``log`` if given."""
    port = free_port()
    command = [sys.executable, "-m", "lance_iceberg_ns.cli", "serve", "--endpoint", endpoint, "--root", root]
    command += ["--port", str(port), *options]
    with open(log, "wb") if log is not None else open(os.devnull, "wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=sink)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            requests.get(f"{uri}/openapi.json", timeout=2)
            return process, uri
        except requests.ConnectionError:
            if time.monotonic() > deadline or process.poll() is not None:
                shown = f": {log.read_text()[-2000:]}" if log is not None else ""
                raise RuntimeError(f"the REST server did not start{shown}") from None
            time.sleep(0.1)


def timed(action: Callable[[], Any]) -> float:
    """Seconds ``action()`` took."""
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def latency(call: Callable[[], Any], calls: int) -> dict[str, float]:
    return interleaved_latency({"call": call}, calls, warmup=min(200, calls))["call"]


def interleaved_latency(
    paths: dict[str, Callable[[], Any]], calls: int, rounds: int = 1, warmup: int = 200
) -> dict[str, dict[str, float]]:
    """p50, p99 and mean (ms) of ``calls`` sequential calls of each path, after ``warmup`` calls
    each. With several ``rounds`` the paths take turns, ``calls / rounds`` at
    a time, so that a slow minute of the machine falls on all of them alike."""
    for call in paths.values():
        for _ in range(warmup):
            call()
    samples: dict[str, list[float]] = {name: [] for name in paths}
    for turn in range(rounds):
        for name, call in paths.items():
            for _ in range(calls // rounds + (turn < calls % rounds)):
                started = time.perf_counter()
                call()
                samples[name].append(time.perf_counter() - started)
    return {name: _summary(sorted(taken)) for name, taken in samples.items()}


def _summary(samples: list[float]) -> dict[str, float]:
    return {
        "p50": samples[len(samples) // 2] * 1000,
        "p99": samples[int(len(samples) * 0.99)] * 1000,
        "mean": statistics.mean(samples) * 1000,
    }


def throughput(call: Callable[[], Any], threads: int, seconds: float = 3.0) -> float:
    deadline = time.monotonic() + seconds

    def worker() -> int:
        done = 0
        while time.monotonic() < deadline:
            call()
            done += 1
        return done

    with ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(lambda _: worker(), range(threads)))
    return total / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    table = ["bench_wh", "db", "events"]
    request = DescribeTableRequest(id=table)
    results: dict[str, dict[str, float]] = {}

    with (
        tempfile.TemporaryDirectory() as work,
        local_catalog(Path(work) / "catalog", prefix_style="defaults") as catalog,
    ):
        root = str(Path(work) / "lance")
        in_process = IcebergLanceNamespace(endpoint=catalog.endpoint, root=root)
        in_process.create_namespace(CreateNamespaceRequest(id=table[:2]))
        lance.write_dataset(pa.table({"id": list(range(100))}), namespace_client=in_process, table_id=table)
        process, uri = start_server(catalog.endpoint, root)
        try:
            client = lance.namespace.RestNamespace(uri=uri)
            for name, namespace in (("in-process bridge", in_process), ("REST server over the bridge", client)):
                results[name] = latency(lambda namespace=namespace: namespace.describe_table(request), args.calls)
                results[name]["req/s"] = throughput(
                    lambda namespace=namespace: namespace.describe_table(request), args.threads
                )
        finally:
            process.terminate()
            process.wait(timeout=30)

        dir_root = str(Path(work) / "dir")
        with lance.namespace.RestAdapter("dir", {"root": dir_root}, port=0) as adapter:
            dir_client = lance.namespace.RestNamespace(uri=f"http://127.0.0.1:{adapter.port}")
            dir_client.create_namespace(CreateNamespaceRequest(id=table[:1]))
            dir_client.create_namespace(CreateNamespaceRequest(id=table[:2]))
            lance.write_dataset(pa.table({"id": list(range(100))}), namespace_client=dir_client, table_id=table)
            name = 'pylance RestAdapter("dir")'
            results[name] = latency(lambda: dir_client.describe_table(request), args.calls)
            results[name]["req/s"] = throughput(lambda: dir_client.describe_table(request), args.threads)

    print(
        f"describe_table: {args.calls} sequential calls (ms), {args.threads}-thread throughput, {os.cpu_count()} cores"
    )
    print(f"{'path':<32}{'p50':>8}{'p99':>8}{'mean':>8}{'req/s':>9}")
    for name, figures in results.items():
        print(f"{name:<32}{figures['p50']:>8.2f}{figures['p99']:>8.2f}{figures['mean']:>8.2f}{figures['req/s']:>9.0f}")
    added = results["REST server over the bridge"]["p50"] - results["in-process bridge"]["p50"]
    print(f"the server adds {added:.2f} ms at p50 (target: at most 3 ms)")


if __name__ == "__main__":
    main()
