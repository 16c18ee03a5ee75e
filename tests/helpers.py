"""Small helpers shared by tests."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import logging
import os
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

import lance
import pyarrow as pa
from lance_namespace import LanceNamespace
from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType


def other_client(endpoint: str, warehouse: str) -> RestCatalog:
    """pyiceberg used directly, as another team's job would: no bridge involved."""
    catalog = load_catalog(f"other-{warehouse}", type="rest", uri=endpoint, warehouse=warehouse)
    assert isinstance(catalog, RestCatalog)
    return catalog


def create_plain_iceberg_table(endpoint: str, warehouse: str, identifier: tuple[str, ...], location: str) -> None:
    other_client(endpoint, warehouse).create_table(
        identifier,
        schema=Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType())),
        location=location,
    )


def stage_manifest(location: str, version: int) -> str:
    """A manifest of ``version`` staged in the dataset's ``_versions/`` as pylance stages one before
    it asks the namespace to commit it (the bytes of a final manifest already there); its path."""
    versions = os.path.join(location, "_versions")
    final = next(name for name in sorted(os.listdir(versions)) if name.endswith(".manifest"))
    staged = os.path.join(versions, f"{2**64 - 1 - version:020d}.manifest-{uuid.uuid4()}")
    shutil.copyfile(os.path.join(versions, final), staged)
    return staged


def write_lance(location: str, rows: int = 3) -> lance.LanceDataset:
    return lance.write_dataset(pa.table({"id": list(range(rows))}), location)


def files_under(path: Path) -> dict[str, str]:
    """Every file under ``path`` (links as links) with a digest of its bytes: to show that nothing
    there changed, byte for byte."""
    found = {}
    for folder, subfolders, names in os.walk(path):
        for name in names + [d for d in subfolders if os.path.islink(os.path.join(folder, d))]:
            full = os.path.join(folder, name)
            relative = os.path.relpath(full, path)
            if os.path.islink(full):
                found[relative] = "link:" + os.readlink(full)
            else:
                with open(full, "rb") as handle:
                    found[relative] = hashlib.sha256(handle.read()).hexdigest()
    return found


def catalog_state(endpoint: str, warehouse: str) -> list[tuple[tuple[str, ...], str, str]]:
    """Every table of a warehouse (trash included) as another client sees it: id, location, uuid."""
    catalog = other_client(endpoint, warehouse)
    state, pending = [], [()]
    while pending:
        parent = pending.pop()
        for child in catalog.list_namespaces(parent):
            pending.append(child)
            for identifier in catalog.list_tables(child):
                metadata = catalog.load_table(identifier).metadata
                state.append((tuple(identifier), metadata.location, str(metadata.table_uuid)))
    return sorted(state)


def ipc(table: pa.Table) -> bytes:
    """``table`` as an Arrow IPC stream: the body of a data operation's request."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def write_values(ns: LanceNamespace, table_id: list[str], values: list[int], mode: str = "create") -> str:
    """Write a one-column table ``v`` through a namespace, as pylance does; its location."""
    return lance.write_dataset(pa.table({"v": values}), namespace_client=ns, table_id=table_id, mode=mode).uri


def script_module(path: Path) -> ModuleType:
    """A script of the repository (bench/, scripts/) imported as a module, registered under its
    name (dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class CliResult:
    """What a ``lance-iceberg-ns`` run left, named as a finished process names it."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(arguments: Sequence[str], environ: Mapping[str, str], stderr: TextIO | None = None) -> CliResult:
    """Run ``lance-iceberg-ns ARGUMENTS`` in this process through ``main``, as the console script
    does (the same exit codes, its stdout and stderr kept apart), with ``environ`` as the whole
    environment, as a process started with it would see it. Given ``stderr`` (a terminal, say),
    the run writes its stderr there instead of into the result.

    What only a process shows stays out: native code's writes to file descriptor 2, and the log
    records of ``--debug``, which go to the test run's logging (where the secret check reads them).
    Commands that serve (``serve``, ``local-catalog``, ``demo``) run as processes."""
    from click.testing import CliRunner

    from lance_iceberg_ns.cli import main

    # the runner changes os.environ for the run only; None unsets what the run must not see
    changes: dict[str, str | None] = {name: None for name in os.environ if name not in environ}
    changes.update(environ)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        with CliRunner().isolation(env=changes) as (stdout, captured, _mixed):
            if stderr is not None:
                sys.stderr = stderr  # the isolation puts the test run's own back as it ends
            returncode = main(list(arguments))
            sys.stdout.flush()
            sys.stderr.flush()
            return CliResult(returncode, stdout.getvalue().decode(), captured.getvalue().decode())
    finally:  # --debug configures logging when nothing has: no handler may outlive the run's streams
        root.handlers[:] = handlers
        root.setLevel(level)


def environment_variables(properties: Mapping[str, str]) -> dict[str, str]:
    """Bridge properties as the ``LANCE_ICEBERG_*`` variables that give them (a dot as ``__``)."""
    return {"LANCE_ICEBERG_" + key.upper().replace(".", "__"): value for key, value in properties.items()}


class CommandLine:
    """``lance-iceberg-ns`` run in process against a catalog given by ``LANCE_ICEBERG_*`` variables;
    no other ``LANCE_ICEBERG_*`` or ``PYICEBERG_*`` variable of the test run reaches it."""

    def __init__(self, endpoint: str, root: Path | str | None, home: Path) -> None:
        self.environ = {
            name: value
            for name, value in os.environ.items()
            if not name.upper().startswith(("LANCE_ICEBERG_", "PYICEBERG_"))
        }
        self.environ.update(LANCE_ICEBERG_ENDPOINT=endpoint, PYICEBERG_HOME=str(home), COLUMNS="200")
        if root is not None:
            self.environ["LANCE_ICEBERG_ROOT"] = str(root)

    def __call__(self, *arguments: str, **environ: str) -> CliResult:
        """The run, its environment changed by ``environ`` (an empty value sets the variable empty)."""
        return run_cli(arguments, {**self.environ, **environ})

    def json(self, *arguments: str, code: int = 0) -> Any:
        """The answer of the run with ``--json``, which must exit with ``code``: stdout is JSON alone."""
        done = self(*arguments, "--json")
        assert done.returncode == code, done.stderr
        return json.loads(done.stdout)


def together(count: int, action: Callable[[int], object], timeout: float = 300) -> list[object]:
    """Run ``action(i)`` in ``count`` threads released at once; each result or exception. Fails
    when a thread is still running after ``timeout`` seconds (its outcome would be unknown)."""
    barrier = threading.Barrier(count)
    outcomes: list[object] = [None] * count

    def run(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = action(index)
        except Exception as exc:  # noqa: BLE001 - the outcome to check
            outcomes[index] = exc

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads), f"a thread ran past {timeout} s"
    return outcomes


def all_succeed(count: int, action: Callable[[int], object], timeout: float = 300) -> list[object]:
    """``together``, asserting that no thread raised; the results."""
    outcomes = together(count, action, timeout)
    failures = [outcome for outcome in outcomes if isinstance(outcome, Exception)]
    assert not failures, failures
    return outcomes


def declares_at_one_location(
    ns: Any, db: list[str], location: str, racers: int, keys_under: Callable[[str], list[str]]
) -> None:
    """``racers`` tables declared at ``location`` at once: exactly one wins, the others fail with a
    namespace error and leave no catalog entry, and the location holds only the winner's marker
    (``keys_under``: the keys under a location, relative to it, listed by a client of the test's own)."""
    from lance_namespace import DeclareTableRequest
    from lance_namespace.errors import LanceNamespaceError

    from lance_iceberg_ns.storage import files
    from lance_iceberg_ns.storage.ownership import MARKER

    names = [f"t_{i}_{uuid.uuid4().hex[:6]}" for i in range(racers)]
    results = together(racers, lambda i: ns.declare_table(DeclareTableRequest(id=[*db, names[i]], location=location)))
    winners = [names[i] for i, result in enumerate(results) if not isinstance(result, Exception)]
    assert len(winners) == 1, results
    assert all(isinstance(result, LanceNamespaceError) for result in results if isinstance(result, Exception))
    listed = set(ns.list_tables({"id": db}).tables or [])
    assert listed & set(names) == set(winners), "a losing declare left its catalog entry"
    assert keys_under(location) == [MARKER]
    owner = files.read_file(location, MARKER, ns.settings.storage_options)
    assert owner is not None and winners[0].encode() in owner


@contextmanager
def server_text_log(logger: str) -> Iterator[io.StringIO]:
    """What ``logger`` (and the loggers below it) write meanwhile, as ``serve`` writes its text log,
    with the audit logger at INFO."""
    from lance_iceberg_ns.server.logs import AUDIT_LOGGER, RequestIdFilter, TextFormatter, log_config

    written = io.StringIO()
    handler = logging.StreamHandler(written)
    handler.setFormatter(TextFormatter(log_config("text")["formatters"]["line"]["fmt"]))
    handler.addFilter(RequestIdFilter())
    audit, attached = logging.getLogger(AUDIT_LOGGER), logging.getLogger(logger)
    level = audit.level
    audit.setLevel(logging.INFO)
    attached.addHandler(handler)
    try:
        yield written
    finally:
        attached.removeHandler(handler)
        audit.setLevel(level)


def fresh_spark_jvm() -> None:
    """Stop the JVM an earlier Spark session of this process started: ``spark.jars``,
    ``spark.jars.packages`` and session extensions take effect only in a JVM started with them."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    gateway.shutdown()
    gateway.proc.stdin.close()  # the JVM PySpark started exits when its standard input closes
    gateway.proc.wait(timeout=60)
    SparkContext._gateway = None
    SparkContext._jvm = None


def data_workers_ready(memory_mb: int | None = None, within: float = 120.0) -> None:
    """Wait until a data worker of this process's servers (those of ``memory_mb``, the default
    ceiling unless given) can take requests: until then ``/readyz`` answers "data workers starting"."""
    from lance_iceberg_ns.server.capacity import default_worker_memory_mb
    from lance_iceberg_ns.server.isolation import DataWorkers
    from lance_iceberg_ns.server.settings import DEFAULT_DATA_THREADS

    workers = DataWorkers.of(memory_mb or default_worker_memory_mb(DEFAULT_DATA_THREADS))
    deadline = time.monotonic() + within
    while not workers.any_ready():
        assert time.monotonic() < deadline, "no data worker was ready in time"
        time.sleep(0.05)
