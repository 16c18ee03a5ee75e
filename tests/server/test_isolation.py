"""Data work runs in worker processes: an allocation bomb, or a worker killed outright, fails its own
request only. The server process lives, other clients (catalog and data alike) are answered within
the probe's deadline, the victims' data is unchanged, and the next request finds a new worker.

The bombs are those that ended the server before its data work was isolated: each asks pylance for
far more memory than a worker may take. Whatever refuses them (a bound on the input, or the
worker's ceiling), the answer is a 4xx with the spec's body and nothing is written.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import struct
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import requests

from lance_iceberg_ns import limits
from lance_iceberg_ns.data import opening

from ..helpers import files_under, ipc
from ..liveness import Served, answered_while, is_running, post, served_in_subprocess

WORKER_MEMORY_MB = 1024
INVALID_INPUT, SERVICE_UNAVAILABLE = 13, 17
ROWS = 100_000
MEGABYTE = "x" * (1 << 20)
ROW = pa.table({"id": pa.array([1], pa.int64())})


@contextlib.contextmanager
def serving_a_victim(endpoint: str, root: Path, *arguments: str) -> Iterator[Served]:
    """``serve`` with ``arguments`` in a subprocess, with a namespace and a 100-row victim table."""
    warehouse = f"wh_{uuid.uuid4().hex[:10]}"
    with served_in_subprocess(endpoint, str(root), warehouse, extra_args=arguments) as process:
        namespace = f"{warehouse}$db"
        assert post(process.uri, f"/v1/namespace/{namespace}/create").status_code == 200
        created = post(process.uri, f"/v1/table/{namespace}$victim/create", data=ipc(pa.table({"id": range(100)})))
        assert created.status_code == 200, created.text
        yield Served(process, namespace, Path(created.json()["location"].removeprefix("file://")))


@pytest.fixture(scope="module")
def served(catalog_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("isolated")
    arguments = ("--data-worker-memory-mb", str(WORKER_MEMORY_MB), "--data-threads", "2")
    with serving_a_victim(catalog_server.endpoint, root, *arguments) as served:
        yield served


def shared_views(rows: int, value: str) -> pa.Array:
    """A ``string_view`` column whose every view points at the same long string: a small body
    that names ``rows * len(value)`` bytes."""
    data = value.encode()
    view = struct.pack("<i4sii", len(data), data[:4], 0, 0)  # length, prefix, buffer 0, offset 0
    return pa.Array.from_buffers(pa.string_view(), rows, [None, pa.py_buffer(view * rows), pa.py_buffer(data)])


def one_value_dictionary(rows: int, value: str) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array([value]))


def worker_pids(server: int | None = None) -> set[int]:
    """The data workers of the ``server`` process, or of any: forks of the template it started
    (``forking``), whose parent is the template."""
    parents: dict[int, int] = {}
    templates = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"lance_iceberg_ns.server.forking" in command:
            templates.add(int(entry.name))
    ours = {pid for pid in templates if server in (None, parents[pid])}  # a worker's parent is a template too
    return {pid for pid, parent in parents.items() if parent in ours}


def victim_is_intact(served: Served, before: dict[str, Any]) -> None:
    assert files_under(served.victim) == before
    count = post(served.uri, f"/v1/table/{served.namespace}$victim/count_rows", {})
    assert count.status_code == 200 and count.json() == 100, count.text


def assert_refused_as_input(response: requests.Response) -> None:
    assert response.status_code in (400, 413), response.text[:500]  # 413: a bound on sizes refused it
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["code"] == INVALID_INPUT


def test_string_views_sharing_one_long_string_fail_their_own_request_only(served: Served) -> None:
    before = files_under(served.victim)
    body = ipc(pa.table({"s": shared_views(ROWS, MEGABYTE)}))
    assert len(body) < 3 << 20  # 100 GB named by a body of under 3 MB
    for path in (f"/v1/table/{served.namespace}$views/create", f"/v1/table/{served.namespace}$victim/insert"):
        answer = answered_while(served.process, lambda path=path: post(served.uri, path, data=body))
        assert_refused_as_input(answer)
    assert post(served.uri, f"/v1/table/{served.namespace}$views/exists").status_code == 404
    victim_is_intact(served, before)


def test_a_dictionary_cast_to_plain_strings_fails_its_own_request_only(served: Served) -> None:
    before = files_under(served.victim)
    small = pa.table({"d": one_value_dictionary(10, "y" * 1000)})
    assert post(served.uri, f"/v1/table/{served.namespace}$dict/create", data=ipc(small)).status_code == 200
    big = ipc(pa.table({"d": one_value_dictionary(ROWS, MEGABYTE)}))
    answer = answered_while(
        served.process, lambda: post(served.uri, f"/v1/table/{served.namespace}$dict/insert", data=big)
    )
    assert_refused_as_input(answer)
    query = {"k": 100, "vector": {}, "columns": {"column_aliases": {"c": "arrow_cast(d, 'LargeUtf8')"}}}
    answer = answered_while(served.process, lambda: post(served.uri, f"/v1/table/{served.namespace}$dict/query", query))
    assert answer.status_code == 200, answer.text[:300]  # ten rows of a kilobyte: nothing to refuse
    victim_is_intact(served, before)


def test_a_literal_copied_into_a_million_rows_fails_its_own_request_only(served: Served) -> None:
    before = files_under(served.victim)
    rows = ipc(pa.table({"id": pa.array(range(1_000_000), pa.int64())}))
    assert post(served.uri, f"/v1/table/{served.namespace}$wide/create", data=rows).status_code == 200
    path = f"/v1/table/{served.namespace}$wide/query"
    for literal_bytes in (60_000, 3_000):  # over the bound on literals; under it, 3 GB: over the ceiling
        literal = "'" + "z" * literal_bytes + "'"
        for expression in (f"coalesce(NULL, {literal})", f"arrow_cast({literal}, 'LargeUtf8')"):
            query = {"k": 1_000_000, "vector": {}, "columns": {"column_aliases": {"id": "id", "c": expression}}}
            answer = answered_while(served.process, lambda query=query: post(served.uri, path, query))
            assert_refused_as_input(answer)
            if literal_bytes < limits.MAX_LITERAL_BYTES:
                assert f"more memory than a data worker may use ({WORKER_MEMORY_MB} MiB)" in answer.json()["error"]
    victim_is_intact(served, before)


def test_a_worker_killed_mid_request_answers_503_and_is_replaced(served: Served) -> None:
    """A worker that ends for another reason (here SIGKILL, as the system's OOM killer sends it)
    answers 503; the table is as it was, and the next request on it finds a new worker."""
    before = files_under(served.victim)
    vectors = np.random.default_rng(3).random((50_000, 64), dtype=np.float32)
    rows = pa.table({"id": range(50_000), "v": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 64)})
    table = f"/v1/table/{served.namespace}$indexed"
    assert post(served.uri, f"{table}/create", data=ipc(rows)).status_code == 200
    index = {"column": "v", "index_type": "IVF_PQ", "num_partitions": 64, "num_sub_vectors": 16}
    answer = killed_by(signal.SIGKILL, served, lambda: post(served.uri, f"{table}/create_index", index))
    assert answer.status_code == 503, answer.text[:300]
    assert answer.json()["code"] == SERVICE_UNAVAILABLE and "SIGKILL" in answer.json()["error"]
    listed = post(served.uri, f"{table}/index/list", {})
    assert listed.status_code == 200 and listed.json()["indexes"] == [], listed.text
    assert post(served.uri, f"{table}/count_rows", {}).json() == 50_000
    assert served.process.alive()
    victim_is_intact(served, before)


def killed_by(sent: signal.Signals, served: Served, request: Any) -> Any:
    """``request()``'s answer when the worker of ``served`` running it is sent ``sent`` (once the
    workers starting in place of others are ready: a worker importing pylance is on a core too)."""
    server = served.process.process.pid
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < 0.5:
        if any(_on_cpu(pid) for pid in worker_pids(server)):
            quiet_since = time.monotonic()
        time.sleep(0.02)
    outcome: dict[str, Any] = {}
    running = threading.Thread(target=lambda: outcome.update(answer=request()))
    running.start()
    busy: set[int] = set()
    deadline = time.monotonic() + 60
    while not busy and running.is_alive() and time.monotonic() < deadline:
        busy = {pid for pid in worker_pids(server) if _on_cpu(pid)}
        time.sleep(0.01)
    assert busy, "no worker was seen running the request"
    for pid in busy:
        os.kill(pid, sent)
    running.join(120)
    return outcome["answer"]


def _on_cpu(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "R"
    except OSError:
        return False


def test_nan_in_a_request_is_the_same_request_in_its_worker(served: Served) -> None:
    """A NaN the server's parser takes reaches the worker as a NaN, not as null (then a 500)."""
    query = {"k": 3, "vector": {"single_vector": [float("nan")]}, "columns": {"column_names": ["id"]}}
    answer = requests.post(
        f"{served.uri}/v1/table/{served.namespace}$victim/query",
        data=json.dumps(query),  # allow_nan: "NaN", as Python clients send it
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert answer.status_code == 400, answer.text[:300]
    assert answer.json()["code"] == INVALID_INPUT


STRICT_SECONDS = 8


@pytest.fixture(scope="module")
def strict(catalog_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server whose data requests may run 8 seconds (a first write on a loaded machine takes a few)
    and take or answer 1 MiB."""
    root = tmp_path_factory.mktemp("strict")
    arguments = ("--data-request-timeout", str(STRICT_SECONDS), "--max-data-body-mb", "1", "--data-threads", "2")
    with serving_a_victim(catalog_server.endpoint, root, *arguments) as served:
        yield served


@contextlib.contextmanager
def first_writes_held(location: str) -> Iterator[None]:
    """The machine-wide turn of the first write at ``location`` held, as another process writing
    that table's first version would hold it."""
    directory = Path(tempfile.gettempdir()) / f"lance-iceberg-ns-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    handles = []
    for key in {location, location.removeprefix("file://"), f"file://{location.removeprefix('file://')}"}:
        bucket = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % opening.TURN_FILES
        handle = os.open(directory / f"first-write-{bucket}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(handle, fcntl.LOCK_EX)
        handles.append(handle)
    try:
        yield
    finally:
        for handle in handles:
            os.close(handle)


def test_a_data_request_over_its_time_ends_its_worker_and_is_answered_503(strict: Served) -> None:
    table = f"/v1/table/{strict.namespace}$held"
    location = post(strict.uri, f"{table}/declare").json()["location"]
    with first_writes_held(location):
        started = time.monotonic()
        answer = answered_while(strict.process, lambda: post(strict.uri, f"{table}/insert", data=ipc(ROW)))
        took = time.monotonic() - started
    assert answer.status_code == 503, answer.text[:300]
    assert f"took more than {STRICT_SECONDS} s" in answer.json()["error"] and STRICT_SECONDS <= took < 40
    count = post(strict.uri, f"/v1/table/{strict.namespace}$victim/count_rows", {})
    assert count.status_code == 200 and count.json() == 100  # the next request finds a worker
    assert post(strict.uri, f"{table}/insert", data=ipc(ROW)).status_code == 200  # and the table its turn


def test_an_answer_over_the_data_cap_is_413(strict: Served) -> None:
    table = f"/v1/table/{strict.namespace}$long"
    for rows in (range(100_000), range(100_000, 200_000)):  # 800 KB each, under the 1 MiB cap
        done = post(
            strict.uri, f"{table}/{'create' if rows.start == 0 else 'insert'}", data=ipc(pa.table({"id": rows}))
        )
        assert done.status_code == 200, done.text[:300]
    query = {"k": 200_000, "vector": {}, "columns": {"column_names": ["id"]}}
    answer = post(strict.uri, f"{table}/query", query)
    assert answer.status_code == 413 and answer.json()["code"] == INVALID_INPUT, answer.text[:300]
    assert "fewer rows" in answer.json()["error"]
    assert post(strict.uri, f"{table}/query", {**query, "k": 1_000}).status_code == 200


def test_workers_end_with_their_server_however_it_ends(catalog_server: Any, tmp_path: Path) -> None:
    """Killed, the server leaves no worker behind: not an idle one, not one in the middle of a write
    (which then never lands)."""
    warehouse = f"wh_{uuid.uuid4().hex[:10]}"
    with served_in_subprocess(catalog_server.endpoint, str(tmp_path), warehouse) as process:
        namespace = f"{warehouse}$db"
        assert post(process.uri, f"/v1/namespace/{namespace}/create").status_code == 200
        location = post(process.uri, f"/v1/table/{namespace}$late/declare").json()["location"]
        with first_writes_held(location):
            writing = threading.Thread(target=_insert_quietly, args=(process.uri, namespace), daemon=True)
            writing.start()
            deadline = time.monotonic() + 30
            while len(worker_pids(process.process.pid)) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            workers = worker_pids(process.process.pid)
            assert workers, "the server started no data worker"
            process.process.kill()
            process.process.wait(10)
            deadline = time.monotonic() + 10
            while [pid for pid in workers if Path(f"/proc/{pid}").exists()] and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not [pid for pid in workers if is_running(pid)], "workers outlived their server"
        time.sleep(1)  # the turn is free: a worker left behind would now write
        assert not (Path(location.removeprefix("file://")) / "_versions").exists()


def _insert_quietly(uri: str, namespace: str) -> None:
    with contextlib.suppress(requests.RequestException):  # the server is killed under it
        post(uri, f"/v1/table/{namespace}$late/insert", data=ipc(ROW))


def test_a_describe_that_opens_the_dataset_runs_in_a_worker_and_a_plain_one_in_the_server(
    catalog_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked for its version or schema, describe_table opens the dataset (a manifest anybody with
    write access to the location wrote): in a worker, as every data request. A plain describe
    is answered from the catalog, in the server."""
    from lance_iceberg_ns.server import serve_in_background
    from lance_iceberg_ns.server.isolation import Isolated

    opened_here: list[object] = []
    original_open = opening.OpenDatasets.open

    def open_here(self: Any, *args: Any, **kwargs: Any) -> Any:
        opened_here.append(args[0])
        return original_open(self, *args, **kwargs)

    isolated: list[str] = []
    original_answer = Isolated.answer

    def answer(self: Any, route: Any, *args: Any) -> Any:
        isolated.append(route.operation)
        return original_answer(self, route, *args)

    monkeypatch.setattr(opening.OpenDatasets, "open", open_here)
    monkeypatch.setattr(Isolated, "answer", answer)
    warehouse = f"wh_{uuid.uuid4().hex[:10]}"
    properties = {"endpoint": catalog_server.endpoint, "root": str(tmp_path)}
    with serve_in_background(properties=properties, data_worker_memory_mb=WORKER_MEMORY_MB) as running:
        table = f"/v1/table/{warehouse}$db$t"
        assert post(running.uri, f"/v1/namespace/{warehouse}$db/create").status_code == 200
        assert post(running.uri, f"{table}/create", data=ipc(pa.table({"id": range(5)}))).status_code == 200
        detailed = post(running.uri, f"{table}/describe", {"load_detailed_metadata": True})
        at_version = post(running.uri, f"{table}/describe", {"version": 1})
        plain = post(running.uri, f"{table}/describe", {})
    assert detailed.status_code == 200 and detailed.json()["version"] == 1, detailed.text
    assert [field["name"] for field in detailed.json()["schema"]["fields"]] == ["id"]
    assert at_version.status_code == 200 and at_version.json()["version"] == 1
    assert plain.status_code == 200 and "version" not in plain.json()
    assert isolated == ["create_table", "describe_table", "describe_table"]  # not the plain one
    assert opened_here == []  # the server process opened no dataset


def test_the_server_process_opens_no_dataset_for_a_catalog_request(
    catalog_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manifest is whatever anybody with write access to a location wrote there, and reading a
    hostile one can end the process that reads it. So the server opens none itself: a catalog
    request that turns out to need one (versions written by location to adopt, a declared table to
    check, a place to check for a dataset) is answered in a data worker."""
    import lance

    from lance_iceberg_ns.server import serve_in_background

    warehouse = f"wh_{uuid.uuid4().hex[:10]}"
    properties = {"endpoint": catalog_server.endpoint, "root": str(tmp_path / "root")}
    with serve_in_background(properties=properties, data_worker_memory_mb=WORKER_MEMORY_MB) as running:
        namespace, table = f"{warehouse}$db", f"/v1/table/{warehouse}$db$m"
        assert post(running.uri, f"/v1/namespace/{namespace}/create").status_code == 200
        managed = {"properties": '{"table_version_management": "true"}'}
        rows = ipc(pa.table({"id": range(5)}))
        created = requests.post(f"{running.uri}{table}/create", data=rows, params=managed, timeout=120)
        assert created.status_code == 200, created.text
        location = created.json()["location"]
        lance.write_dataset(pa.table({"id": range(5, 8)}), location, mode="append")  # behind the catalog
        elsewhere = tmp_path / "root" / warehouse / "db" / "loose.lance"
        lance.write_dataset(pa.table({"id": [1]}), str(elsewhere))

        opened: list[str] = []
        real_dataset, real_class = lance.dataset, lance.LanceDataset
        monkeypatch.setattr(lance, "dataset", lambda *a, **k: opened.append(str(a[:1])) or real_dataset(*a, **k))
        monkeypatch.setattr(lance, "LanceDataset", lambda *a, **k: opened.append(str(a[:1])) or real_class(*a, **k))
        exists = post(running.uri, f"{table}/exists")
        plain = post(running.uri, f"{table}/describe")
        checked = post(running.uri, f"{table}/describe", {"check_declared": True})
        listed = requests.get(f"{running.uri}/v1/namespace/{namespace}/table/list?include_declared=true", timeout=60)
        declared = post(running.uri, f"/v1/table/{namespace}$loose/declare", {"location": str(elsewhere)})
        monkeypatch.undo()
        detailed = post(running.uri, f"{table}/describe", {"load_detailed_metadata": True})
    assert opened == []  # in this process, the server's
    assert exists.status_code == 200 and plain.status_code == 200, (exists.text, plain.text)
    assert checked.status_code == 200 and checked.json().get("is_only_declared") is False, checked.text
    assert listed.status_code == 200 and listed.json()["tables"] == ["m"], listed.text
    assert declared.status_code == 400 and "register_table" in declared.json()["error"], declared.text
    assert detailed.json()["version"] == 2  # the version written by location was adopted before the answer


def test_one_clients_allocation_bombs_leave_another_clients_data_requests_answered(served: Served) -> None:
    """Four allocation bombs at once from one client hold one of the two data threads (the other is
    kept for other clients), and each worker they end is forked again from the template at once:
    another client's data requests are answered within 2 s throughout. Clients are told apart by
    the address a trusted proxy (here loopback) forwards."""
    table = f"{served.uri}/v1/table/{served.namespace}$bombed"
    rows = ipc(pa.table({"id": pa.array(range(1_000_000), pa.int64())}))
    assert requests.post(f"{table}/create", data=rows, timeout=60).status_code == 200
    literal = "'" + "z" * 3_000 + "'"  # within the bound on literals; 3 GB over a million rows
    query = {
        "k": 1_000_000,
        "vector": {},
        "columns": {"column_aliases": {"id": "id", "c": f"arrow_cast({literal}, 'LargeUtf8')"}},
    }

    def bomb() -> requests.Response:
        return requests.post(f"{table}/query", json=query, headers={"X-Forwarded-For": "203.0.113.7"}, timeout=300)

    victim = f"{served.uri}/v1/table/{served.namespace}$victim/count_rows"
    slowest, answers = 0.0, []
    with ThreadPoolExecutor(4) as pool:
        bombs = [pool.submit(bomb) for _ in range(4)]
        while not all(future.done() for future in bombs):
            started = time.monotonic()
            answer = requests.post(victim, json={}, headers={"X-Forwarded-For": "198.51.100.2"}, timeout=60)
            slowest = max(slowest, time.monotonic() - started)
            answers.append((answer.status_code, answer.text))
            time.sleep(0.1)
    for future in bombs:
        assert_refused_as_input(future.result())
        assert "more memory than a data worker may use" in future.result().json()["error"]
    assert len(answers) >= 5 and set(answers) == {(200, "100")}, answers[:3]
    assert slowest < 2, f"another client's data request waited {slowest:.2f} s"
    assert served.process.alive()


def test_what_a_failed_allocation_leaves_in_its_worker_never_fails_the_next_request(served: Served) -> None:
    """A query whose answer Arrow cannot grow within the ceiling fails as the input's fault (400)
    and its worker survives, holding what it had allocated; that worker is retired, so the next
    client's query, which fits, runs on a fresh fork and is answered."""
    table = f"{served.uri}/v1/table/{served.namespace}$strings"
    rows = ipc(pa.table({"s": [f"word{i % 50} text {i}" for i in range(100_000)]}))
    assert requests.post(f"{table}/create", data=rows, timeout=60).status_code == 200

    def query(literal_bytes: int, address: str) -> requests.Response:
        aliases = {"a": f"concat(s, '{'x' * literal_bytes}')"}
        body = {"k": 100_000, "vector": {"single_vector": []}, "columns": {"column_aliases": aliases}}
        return requests.post(f"{table}/query", json=body, headers={"X-Forwarded-For": address}, timeout=120)

    assert query(1_000, "198.51.100.2").status_code == 200  # 100 MB: within the ceiling
    for _ in range(2):
        refused = query(2_000, "203.0.113.7")  # the answer's buffer, doubled, is over the ceiling
        assert_refused_as_input(refused)
        answers = [query(1_000, "198.51.100.2") for _ in range(3)]
        assert [answer.status_code for answer in answers] == [200] * 3, [a.text[:200] for a in answers]
    assert served.process.alive()


def data_bytes(pid: int) -> int:
    """What a worker's ceiling (RLIMIT_DATA) counts: its private writable memory, used or reserved."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmData:"))) << 10


def test_small_writes_leave_their_workers_most_of_their_ceiling(catalog_server: Any, tmp_path: Path) -> None:
    """Arrow's default allocator maps a 1 GiB arena once a worker's ceiling allows it, and the
    ceiling counts it all: 7-row inserts then failed on memory (400) that no request had asked
    for. After a run of small inserts and counts, every worker has most of its ceiling left."""
    ceiling = 2048 << 20
    arguments = ("--data-worker-memory-mb", str(ceiling >> 20), "--data-threads", "2")
    with serving_a_victim(catalog_server.endpoint, tmp_path, *arguments) as served:
        table = f"/v1/table/{served.namespace}$victim"
        rows = ipc(pa.table({"id": pa.array(range(7), pa.int64())}))
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda _: post(served.uri, f"{table}/insert", data=rows), range(40)))
        assert [answer.status_code for answer in answers] == [200] * 40, [a.text[:200] for a in answers[:3]]
        assert post(served.uri, f"{table}/count_rows", {}).json() == 100 + 7 * 40
        workers = worker_pids(served.process.process.pid)
        taken = {}
        for pid in workers:
            with contextlib.suppress(OSError, StopIteration):  # one retired meanwhile
                taken[pid] = data_bytes(pid)
        in_mib = {pid: size >> 20 for pid, size in taken.items()}
        assert taken and all(size < ceiling // 2 for size in taken.values()), in_mib


@contextlib.contextmanager
def every_first_write_held() -> Iterator[None]:
    """Every location's first write held (the machine-wide turns of all of them): a create waits."""
    directory = Path(tempfile.gettempdir()) / f"lance-iceberg-ns-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    handles = [
        os.open(directory / f"first-write-{bucket}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        for bucket in range(opening.TURN_FILES)
    ]
    try:
        for handle in handles:
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        for handle in handles:
            os.close(handle)


def test_a_create_whose_worker_ends_mid_write_takes_back_the_table_it_declared(strict: Served) -> None:
    """The create declared its table and was writing when its time ran out and its worker was
    ended, where the create's own undo never runs: the table is taken back, so the name is free
    and a create again succeeds."""
    table = f"/v1/table/{strict.namespace}$cut_off"
    with every_first_write_held():
        answer = post(strict.uri, f"{table}/create", data=ipc(ROW))
    assert answer.status_code == 503, answer.text[:300]
    assert f"took more than {STRICT_SECONDS} s" in answer.json()["error"]
    assert (
        f"the table {strict.namespace.replace('$', '.')}.cut_off it declared was taken back" in answer.json()["error"]
    )
    assert post(strict.uri, f"{table}/exists").status_code == 404
    assert not list(strict.victim.parent.glob("cut_off*")), "the files at its location were left"
    audited = f"take_back {[*strict.namespace.split('$'), 'cut_off']!r} by the server: the table was taken back"
    assert audited in Path(strict.process.stderr_path).read_text()
    again = post(strict.uri, f"{table}/create", data=ipc(ROW))
    assert again.status_code == 200, again.text[:300]
    assert post(strict.uri, f"{table}/count_rows", {}).json() == 1


def test_a_create_of_a_dropped_name_whose_worker_ends_mid_write_leaves_the_old_table_dropped(served: Served) -> None:
    """With soft delete, a create of a dropped name first brings the dropped table back from the
    trash, then writes over it. Its worker ended in the middle of that write, the old table is
    dropped again: the cut-off create neither undrops it nor leaves its old rows live."""
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(2_000_000 * 16, np.float32)), 16)
    big = ipc(pa.table({"id": pa.array(range(2_000_000), pa.int64()), "v": vectors}))  # 144 MB: seconds to write
    for attempt in range(3):
        table = f"/v1/table/{served.namespace}$reborn{attempt}"
        created = post(served.uri, f"{table}/create", data=ipc(pa.table({"id": range(10)})))
        assert created.status_code == 200
        data = Path(created.json()["location"].removeprefix("file://")) / "data"
        written_before = len(list(data.iterdir()))
        assert post(served.uri, f"{table}/drop").status_code == 200
        outcome: dict[str, Any] = {}
        creating = threading.Thread(
            target=lambda table=table, outcome=outcome: outcome.update(
                answer=post(served.uri, f"{table}/create", data=big)
            )
        )
        creating.start()
        while creating.is_alive() and post(served.uri, f"{table}/exists").status_code != 200:
            time.sleep(0.005)  # until the dropped table is back ...
        while creating.is_alive() and len(list(data.iterdir())) <= written_before:
            time.sleep(0.005)  # ... and its write under way (a cut before the server is told is not taken back)
        for pid in worker_pids(served.process.process.pid):  # the writing one among them; idle ones are replaced
            os.kill(pid, signal.SIGKILL)
        creating.join(120)
        if outcome["answer"].status_code != 200:
            break  # cut off: else the write beat the kill, and another name is tried
    answer = outcome["answer"]
    assert answer.status_code == 503, answer.text[:300]
    assert "it brought back from the trash was dropped again" in answer.json()["error"], answer.text[:300]
    assert post(served.uri, f"{table}/exists").status_code == 404


def test_a_read_whose_client_hangs_up_while_it_runs_is_stopped(catalog_server: Any, tmp_path: Path) -> None:
    """With one data thread, a client sends a query of some 20 s of CPU and hangs up, twice on the
    same table: each time its worker is ended, so another client's queries of that table are
    answered within seconds, and the table is not taken for one that crashes its workers."""
    with serving_a_victim(catalog_server.endpoint, tmp_path, "--data-threads", "1") as served:
        host, port = served.uri.removeprefix("http://").split(":")
        path = f"/v1/table/{served.namespace}$words"
        rows = pa.table({"text": ["lorem ipsum dolor sit amet " * 10 + str(i) for i in range(20_000)]})
        assert post(served.uri, f"{path}/create", data=ipc(rows)).status_code == 200
        slow = json.dumps({"k": 10, "vector": {}, "filter": "levenshtein(text, repeat('x', 8000)) < 0"})
        sent = (
            f"POST {path}/query HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(slow)}\r\n\r\n{slow}"
        ).encode()
        for attempt in range(2):
            before = worker_pids(served.process.process.pid)
            connection = socket.create_connection((host, int(port)), source_address=("127.0.0.2", 0))
            connection.sendall(sent)
            deadline = time.monotonic() + 10
            while not any(_on_cpu(pid) for pid in before) and time.monotonic() < deadline:
                time.sleep(0.05)  # the query is running in a worker
            time.sleep(0.5)
            connection.close()
            started = time.monotonic()
            answer = requests.post(
                f"{served.uri}{path}/count_rows", json={}, headers={"X-Forwarded-For": "198.51.100.2"}, timeout=120
            )
            waited = time.monotonic() - started
            assert answer.status_code == 200 and answer.json() == 20_000, answer.text
            assert waited < 5, f"attempt {attempt}: another client's count waited {waited:.1f} s"
        assert served.process.alive()


def test_a_read_over_its_time_is_answered_503_and_the_next_read_finds_a_worker(
    catalog_server: Any, tmp_path: Path
) -> None:
    """A query's answer is awaited on the event loop (no thread waits for its worker): past
    ``--data-request-timeout`` its worker is ended and it is answered 503 all the same, other
    clients answered meanwhile; the next reads and writes of the table, on a new worker and on
    threads again, are answered."""
    with serving_a_victim(catalog_server.endpoint, tmp_path, "--data-request-timeout", "2") as served:
        path = f"/v1/table/{served.namespace}$words"
        rows = pa.table({"text": ["lorem ipsum dolor sit amet " * 10 + str(i) for i in range(20_000)]})
        assert post(served.uri, f"{path}/create", data=ipc(rows)).status_code == 200
        slow = {"k": 10, "vector": {}, "filter": "levenshtein(text, repeat('x', 8000)) < 0"}  # some 20 s of CPU
        started = time.monotonic()
        answer = answered_while(served.process, lambda: post(served.uri, f"{path}/query", slow))
        took = time.monotonic() - started
        assert answer.status_code == 503, answer.text[:300]
        assert "took more than 2 s" in answer.json()["error"] and 2 <= took < 15, (took, answer.text[:300])
        for written in range(3):  # reads on the loop, a write on a thread, on the workers left and the new one
            assert post(served.uri, f"{path}/count_rows", {}).json() == 20_000 + written
            assert post(served.uri, f"{path}/insert", data=ipc(rows.slice(written, 1))).status_code == 200
        assert post(served.uri, f"{path}/count_rows", {}).json() == 20_003
