"""How long a data worker of ``serve`` takes to be ready: a fork of the template against a new interpreter.

A worker is ready once it can answer at once: pylance, pyarrow, pyiceberg and the bridge imported.
The baseline is what a worker started as a new interpreter takes to import them and say so; ours
is a fork of the template (``server/forking.py``), which imported them once. Both are the median of
``--rounds`` starts, one at a time, and the time from asking to the worker's ready message.

    .venv/bin/python bench/worker_start.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from lance_iceberg_ns.server import forking, isolation

READY_LINE = "ready"
MEMORY_MB = 1024


def new_interpreter_seconds() -> float:
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-c", f"from lance_iceberg_ns.server.worker import load; load(); print({READY_LINE!r})"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline().strip() == READY_LINE
    seconds = time.perf_counter() - started
    process.wait()
    return seconds


def forked_seconds() -> float:
    started = time.perf_counter()
    worker = isolation._Worker(MEMORY_MB)
    worker.wait_ready()
    seconds = time.perf_counter() - started
    worker.stop()
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    options = parser.parse_args()
    started = time.perf_counter()
    forking.Template.running()
    template = time.perf_counter() - started
    forked = statistics.median(forked_seconds() for _ in range(options.rounds))
    new = statistics.median(new_interpreter_seconds() for _ in range(max(3, options.rounds // 4)))
    print(f"data worker ready, median of {options.rounds} starts one at a time (ms), 2 cores")
    print(f"{'a new interpreter importing pylance':<40} {new * 1e3:9.1f}")
    print(f"{'a fork of the template':<40} {forked * 1e3:9.1f}")
    print(f"{'the template itself, once per server':<40} {template * 1e3:9.1f}")
    print(f"worker start: the fork vs a new interpreter: {forked / new:.3f}x (info)")
    forking.stop_template()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
