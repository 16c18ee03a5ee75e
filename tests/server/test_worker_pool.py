"""The data workers as a pool: a worker says it is ready once it can answer at once, a request
takes the first worker free (a busy one done, or a new one) rather than wait for one of its own to
start, and a table whose requests keep ending their workers by a signal is refused for a while."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from lance_iceberg_ns.server import data_worker, forking, isolation
from lance_iceberg_ns.server.isolation import CrashingTables, DataWorkers

from ..helpers import ipc
from ..liveness import Served, post
from .test_isolation import INVALID_INPUT, SERVICE_UNAVAILABLE, killed_by, served  # noqa: F401  (a fixture)


def test_a_worker_is_ready_only_once_pylance_is_loaded() -> None:
    worker = data_worker.DataWorker(1024)
    try:
        worker.wait_ready()
        maps = Path(f"/proc/{worker.process.pid}/maps").read_text()
        assert "lance.abi3.so" in maps  # its first request imports nothing
    finally:
        worker.stop()


class _FakeWorker:
    """A worker that starts when ``may_start`` is set and answers at once."""

    may_start = threading.Event()
    started: list[_FakeWorker] = []

    def __init__(self, memory_mb: int) -> None:
        self.idle_since = time.monotonic()
        self.process: Any = type("Running", (), {"ended": False})()

    def wait_ready(self) -> None:
        assert self.may_start.wait(30)
        self.started.append(self)

    def call(self, seconds: float, header: dict[str, Any], *payload: bytes) -> tuple[dict[str, Any], bytearray]:
        return {"by": id(self)}, bytearray()

    def stop(self) -> None:
        pass


def test_a_request_takes_the_first_worker_free_rather_than_wait_for_a_new_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(isolation, "DataWorker", _FakeWorker)
    _FakeWorker.may_start.set()
    workers = DataWorkers(1)
    workers.keep_at_least(4, start=1)
    deadline = time.monotonic() + 10
    while not workers._idle and time.monotonic() < deadline:
        time.sleep(0.01)
    first = workers._take()  # busy: the next request finds none idle
    _FakeWorker.may_start.clear()  # a worker started now takes as long as the test likes
    answered: list[dict[str, Any]] = []
    waiting = threading.Thread(target=lambda: answered.append(workers.run(5, {})[0]))
    waiting.start()
    time.sleep(0.2)
    assert not answered and workers._starting == 1  # one started for it, in the background
    workers._give_back(first)
    waiting.join(5)
    assert answered == [{"by": id(first)}]  # the busy one, done first, not the one still starting
    _FakeWorker.may_start.set()


def test_a_start_that_fails_is_said_to_the_waiting_request(monkeypatch: pytest.MonkeyPatch) -> None:
    class Failing(_FakeWorker):
        def wait_ready(self) -> None:
            raise EOFError("ended")

        def ended(self, memory_mb: int, writing: bool = False) -> Exception:
            return RuntimeError("exit status 1")

    monkeypatch.setattr(isolation, "DataWorker", Failing)
    workers = DataWorkers(1)
    started = time.monotonic()
    with pytest.raises(isolation.ServiceUnavailableError, match="did not start: exit status 1"):
        workers.run(5, {})
    assert time.monotonic() - started < 5


def test_a_worker_that_cannot_even_be_started_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """No process to ask why it ended (the template is gone, a server stopping as it starts): the
    failure itself is said, not an empty reason."""

    def never(memory_mb: int) -> None:
        raise EOFError("the data workers' template ended before it was ready")

    monkeypatch.setattr(isolation, "DataWorker", never)
    with pytest.raises(isolation.ServiceUnavailableError, match="did not start: the data workers' template ended"):
        DataWorkers(1).run(5, {})


def test_a_table_is_refused_after_two_crashes_within_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    crashing, table, other = CrashingTables(), ("wh", "db", "t"), ("wh", "db", "u")
    crashing.crashed(table)
    crashing.refuse_if_crashing(table)  # one crash may be chance
    crashing.crashed(table)
    with pytest.raises(isolation.ServiceUnavailableError, match="ended 2 data workers"):
        crashing.refuse_if_crashing(table)
    crashing.refuse_if_crashing(other)
    monkeypatch.setattr(isolation, "CRASH_SECONDS", 0.05)
    time.sleep(0.1)
    crashing.refuse_if_crashing(table)  # the window passed


def test_a_table_whose_requests_end_their_workers_by_a_signal_is_refused_and_the_others_served(
    served: Served,  # noqa: F811
) -> None:
    vectors = np.random.default_rng(4).random((50_000, 64), dtype=np.float32)
    rows = pa.table({"id": range(50_000), "v": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 64)})
    table = f"/v1/table/{served.namespace}$crashing"
    assert post(served.uri, f"{table}/create", data=ipc(rows)).status_code == 200
    index = {"column": "v", "index_type": "IVF_PQ", "num_partitions": 64, "num_sub_vectors": 16}
    for _ in range(2):  # a stack overflow reading a planted manifest ends a worker this way
        answer = killed_by(signal.SIGSEGV, served, lambda: post(served.uri, f"{table}/create_index", index))
        assert answer.status_code == 503 and "SIGSEGV" in answer.json()["error"], answer.text
    refused = post(served.uri, f"{table}/count_rows", {})
    assert refused.status_code == 503 and refused.json()["code"] == SERVICE_UNAVAILABLE, refused.text
    assert "ended 2 data workers" in refused.json()["error"]
    assert post(served.uri, f"/v1/table/{served.namespace}$victim/count_rows", {}).json() == 100
    assert served.process.alive()


def test_the_default_ceiling_fits_one_worker_per_data_thread_in_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    from lance_iceberg_ns.server import capacity

    monkeypatch.setattr(capacity, "physical_memory_mb", lambda: 4096)
    assert capacity.default_worker_memory_mb(8) == 384  # three quarters of 4 GiB, in eight
    assert capacity.default_worker_memory_mb(64) == 256  # never below 256
    monkeypatch.setattr(capacity, "physical_memory_mb", lambda: 1 << 20)
    assert capacity.default_worker_memory_mb(8) == capacity.DEFAULT_DATA_WORKER_MEMORY_MB
    monkeypatch.setattr(capacity, "physical_memory_mb", lambda: None)
    assert capacity.default_worker_memory_mb(8) == capacity.DEFAULT_DATA_WORKER_MEMORY_MB


def test_serve_warns_when_the_ceilings_given_promise_more_than_the_machine_has(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from lance_iceberg_ns.cli import serving
    from lance_iceberg_ns.server import capacity
    from lance_iceberg_ns.server.settings import ServeSettings

    monkeypatch.setattr(capacity, "physical_memory_mb", lambda: 8192)
    serving._warn_if_workers_may_outgrow_the_memory(ServeSettings({}, data_threads=4, data_worker_memory_mb=4096))
    warned = capsys.readouterr().err
    assert "may allocate 16384 MiB at once, more than this machine's 8192 MiB" in warned
    assert "at most 1536" in warned
    serving._warn_if_workers_may_outgrow_the_memory(ServeSettings({}, data_threads=4))  # the default fits
    assert capsys.readouterr().err == ""
    serving._warn_if_workers_may_outgrow_the_memory(ServeSettings({}, data_threads=4, data_worker_memory_mb=1024))
    assert capsys.readouterr().err == ""  # 4 GiB of 8
    serving._warn_if_workers_may_outgrow_the_memory(
        ServeSettings({}, data_threads=4, data_worker_memory_mb=1024, workers=3)
    )
    warned = capsys.readouterr().err
    assert "12 data workers (4 data threads in each of 3 server processes)" in warned and "at most 512" in warned
    serving._warn_if_workers_may_outgrow_the_memory(ServeSettings({}, data_threads=4, workers=3))  # the default fits
    assert capsys.readouterr().err == ""


def test_the_default_ceiling_counts_every_server_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from lance_iceberg_ns.server import capacity
    from lance_iceberg_ns.server.settings import ServeSettings

    monkeypatch.setattr(capacity, "physical_memory_mb", lambda: 24576)
    assert capacity.default_worker_memory_mb(8) == 2304  # three quarters of 24 GiB, in eight
    assert capacity.default_worker_memory_mb(8, server_processes=3) == 768  # in twenty-four
    assert ServeSettings({}, workers=3).app_options()["server_processes"] == 3


# --- workers are forks of a template that has loaded pylance ------------------------------------------


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _data_ceiling(pid: int) -> int:
    line = next(line for line in Path(f"/proc/{pid}/limits").read_text().splitlines() if "Max data size" in line)
    return int(line.split()[3])


def test_workers_are_forks_of_one_template_each_with_its_own_ceiling_and_its_end_reported() -> None:
    workers = [data_worker.DataWorker(memory_mb) for memory_mb in (300, 1024)]
    try:
        for worker in workers:
            worker.wait_ready()
        template = forking.Template.running().process.pid
        assert [_parent(worker.process.pid) for worker in workers] == [template, template]
        assert [_data_ceiling(worker.process.pid) for worker in workers] == [300 << 20, 1024 << 20]
        os.kill(workers[0].process.pid, signal.SIGSEGV)
        assert workers[0].process.wait(10) == -signal.SIGSEGV  # as subprocess says a signal, for CrashingTables
        again = data_worker.DataWorker(300)
        again.wait_ready()
        assert _parent(again.process.pid) == template  # the template lives on: no import paid again
        again.stop()
        assert again.process.returncode == 0  # its pipe closed, it ended by itself
    finally:
        for worker in workers:
            worker.stop()


def test_a_template_that_ends_takes_its_workers_with_it_and_is_started_again() -> None:
    worker = data_worker.DataWorker(300)
    worker.wait_ready()
    template = forking.Template.running()
    template.process.kill()
    assert worker.process.wait(10) is None  # ended with it; its status was the template's to reap
    with pytest.raises((EOFError, OSError)):
        worker.call(5, {"operation": "count_table_rows"})
    replacement = data_worker.DataWorker(300)
    try:
        replacement.wait_ready()
        assert forking.Template.running() is not template
        assert _parent(replacement.process.pid) == forking.Template.running().process.pid
    finally:
        replacement.stop()
        worker.stop()


_A_SERVER = """
import sys, time
from lance_iceberg_ns.server import data_worker
worker = data_worker.DataWorker(300)
worker.wait_ready()
print(worker.process.pid, flush=True)
time.sleep(600)
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has: it awaits only its reaping)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_worker_that_runs_no_python_ends_with_its_server_killed_outright() -> None:
    """A worker stuck in C code that holds the interpreter runs none of its own threads, and so
    cannot see its server go; a stopped one runs none either. The kernel ends it with its template,
    which ends as soon as the server's end of their socket closes."""
    server = subprocess.Popen([sys.executable, "-c", _A_SERVER], stdout=subprocess.PIPE, text=True)
    worker = 0
    try:
        assert server.stdout is not None
        worker = int(server.stdout.readline())
        template = _parent(worker)
        os.kill(worker, signal.SIGSTOP)
        server.kill()
        server.wait(10)
        deadline = time.monotonic() + 10
        while (_running(worker) or _running(template)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(template) and not _running(worker)
    finally:
        server.kill()
        server.wait(10)
        if worker and _running(worker):  # left behind: not this test's to leave
            os.kill(worker, signal.SIGKILL)


def test_idle_workers_gone_with_their_template_are_passed_over_not_handed_out() -> None:
    workers = DataWorkers(320)  # a ceiling of its own: these workers are this test's alone
    workers.keep_at_least(2, start=2)
    deadline = time.monotonic() + 60
    while len(workers._idle) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    gone = list(workers._idle)
    try:
        forking.Template.running().process.kill()
        for worker in gone:
            worker.process.wait(10)
        answer, _ = workers.run(
            60, {"operation": "no_such_operation", "arrived": time.monotonic(), "max_data_bytes": 1}
        )
        assert answer["kind"] == "error" and answer["message"] == "Internal error"  # a live worker's answer, no 503
        assert not any(worker in workers._idle for worker in gone)
    finally:
        workers.close()


def test_a_worker_gone_with_its_template_says_so() -> None:
    """A worker is the template's child, not the server's: when the template ends, the worker's
    end has no status to read, and its request is told the template ended, not "exit status None"."""
    worker = data_worker.DataWorker(300)
    try:
        worker.wait_ready()
        forking.Template.running().process.kill()
        worker.process.wait(10)
        error = worker.ended(300)
    finally:
        worker.stop()
    assert isinstance(error, isolation.ServiceUnavailableError)
    assert "ended (with the data workers' template)" in str(error) and "None" not in str(error), str(error)


def test_a_worker_reaped_before_its_start_is_answered_is_still_seen_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """The template may report a worker's end before the thread that asked for it has the pid: the
    end is kept for it, and the worker is seen to have ended (a wait for it never hangs)."""
    template = forking.Template.running()
    answer_as_it_came = template._next_answer

    def answered_after_the_worker_ended() -> dict[str, Any]:
        answer = answer_as_it_came()
        os.kill(int(answer["pid"]), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while int(answer["pid"]) not in template._ended_early and time.monotonic() < deadline:
            time.sleep(0.01)
        return answer

    monkeypatch.setattr(template, "_next_answer", answered_after_the_worker_ended)
    forked = template.start(300 << 20)
    assert forked.ended and forked.wait(5) == -signal.SIGKILL
    assert forked.pid not in template._ended_early and forked.pid not in template._workers


def test_a_worker_ended_by_a_failed_allocation_blames_the_request_unless_a_write_asked_for_little() -> None:
    """A bomb asks for gigabytes at once, or a read builds more than the ceiling in batches: 400,
    the same request fails again. A write's small allocation fails when pylance's own memory for
    the table grew to the ceiling (a seven-row insert into a table of thousands of versions): 503,
    and a fresh worker answers the retry."""
    ceiling = 1024 << 20
    refused = data_worker.allocation_failed(100_000_000_000, 1024, writing=True)
    assert refused.code == INVALID_INPUT and "needs more memory than a data worker may use (1024 MiB)" in str(refused)
    assert data_worker.allocation_failed(ceiling // 4, 1024, writing=True).code == INVALID_INPUT
    assert data_worker.allocation_failed(24_576_000, 1024, writing=False).code == INVALID_INPUT  # a literal's batch
    grown = data_worker.allocation_failed(ceiling // 4 - 1, 1024, writing=True)
    assert grown.code == SERVICE_UNAVAILABLE and "reached its memory ceiling (1024 MiB" in str(grown)
    assert "retry" in str(grown)


def test_a_workers_memory_is_read_afresh_through_the_file_it_keeps_open() -> None:
    """A worker reads its memory after every request through one open ``/proc/self/statm`` (to
    retire one grown past half its ceiling): each read sees the memory as it is then."""
    import mmap

    from lance_iceberg_ns.server.worker import _data_bytes

    statm = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
    try:
        before = _data_bytes(statm)
        fields = Path("/proc/self/statm").read_text().split()
        assert abs(before - int(fields[5]) * os.sysconf("SC_PAGE_SIZE")) < 64 << 20  # what a fresh open reads
        grown = mmap.mmap(-1, 256 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # reserved: counted
        try:
            assert _data_bytes(statm) - before >= 256 << 20
        finally:
            grown.close()
        assert _data_bytes(statm) - before < 128 << 20
    finally:
        os.close(statm)
