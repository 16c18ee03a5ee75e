"""The main job, end to end on the embedded local catalog: a Spark job writes a Lance table with a
vector column through the catalog, Spark SQL queries it by name, ``lance-iceberg-ns serve`` puts
the Lance REST protocol in front of it for lancedb (a vector search) and DuckDB (SQL), then a new
version, time travel, and a soft delete undone.

A step whose engine is not installed is skipped with one line saying what to install; without
PySpark the table is written with pylance instead.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import lance
import numpy as np
import pyarrow as pa
from lance_namespace import (
    CreateNamespaceRequest,
    DropTableRequest,
    ListTablesRequest,
    ListTableVersionsRequest,
)

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.testing import local_catalog, stop_process

NAMESPACE = ["demo_wh", "docs"]
TABLE = [*NAMESPACE, "articles"]
DIMENSION = 128
TOPICS = ("glaciers", "lakes", "oceans", "rivers")
ROWS, APPENDED = 2000, 500
PROBE = 42  # the article whose vector the search looks for
INSTALL_HINT = "bash scripts/setup.sh demo, or pip install -e '.[demo]'"
SERVE_STARTUP_SECONDS = 60

Say = Callable[[str], None]


def missing(*modules: str) -> list[str]:
    """The modules of ``modules`` that are not installed."""
    return [module for module in modules if importlib.util.find_spec(module) is None]


# --- the data: Spark computes it; pylance writes rows like it when PySpark is not installed


def spark_articles(spark: Any, start: int, count: int) -> Any:
    """``count`` articles from id ``start``: a topic, a word count and a 128-d vector (numbers
    from a hash of the id: the same on every run)."""
    from pyspark.sql import functions as F

    ids = F.col("id")
    topics = F.array(*map(F.lit, TOPICS))
    return spark.range(start, start + count, numPartitions=2).select(
        ids,
        F.element_at(topics, (ids % len(TOPICS) + 1).cast("int")).alias("topic"),
        (ids * 37 % 500 + 50).alias("words"),
        F.transform(F.sequence(F.lit(1), F.lit(DIMENSION)), lambda j: F.abs(F.hash(ids, j)) % 1000 / 1000)
        .cast("array<float>")
        .alias("vector"),
    )


def arrow_articles(start: int, count: int) -> pa.Table:
    """Rows like those of ``spark_articles``, in Arrow."""
    ids = np.arange(start, start + count, dtype=np.int64)
    vectors = np.random.default_rng(start).random((count, DIMENSION), dtype=np.float32)
    return pa.table(
        {
            "id": ids,
            "topic": [TOPICS[i % len(TOPICS)] for i in ids],
            "words": ids * 37 % 500 + 50,
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIMENSION),
        }
    )


# --- the engines, started quietly


@contextlib.contextmanager
def catalog_endpoint(endpoint: str | None = None) -> Iterator[str]:
    """``endpoint``, or the endpoint of a local catalog started for the block (for the examples)."""
    if endpoint:
        yield endpoint
        return
    with local_catalog(prefix_style="defaults") as catalog:
        yield catalog.endpoint


@contextlib.contextmanager
def quiet(log: Path) -> Iterator[TextIO]:
    """Inside the block, whatever this process writes to its stdout and stderr goes to ``log``: the
    logs and warnings of Spark's JVM and its Python workers (children keep writing there), Lance
    and lancedb do not cover the demo's lines. Yields the real stdout, for those lines."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(log, "ab") as target:
        os.dup2(target.fileno(), 1)
        os.dup2(target.fileno(), 2)
    terminal = os.fdopen(os.dup(saved[0]), "w", buffering=1)
    try:
        yield terminal
    finally:
        terminal.close()
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, original in zip((1, 2), saved, strict=True):
            os.dup2(original, fd)
            os.close(original)


def start_spark() -> Any:
    from lance_iceberg_ns.spark import local_spark_session

    return local_spark_session("lance-iceberg-ns demo", config={"spark.sql.shuffle.partitions": "2"})


@contextlib.contextmanager
def served(endpoint: str, root: str, log: Path) -> Iterator[Callable[[], str]]:
    """``lance-iceberg-ns serve`` on a free loopback port, in a child process logging to ``log``;
    yields a function that waits for the server and returns its URI (so it starts meanwhile)."""
    command = [sys.executable, "-m", "lance_iceberg_ns.cli", "serve", "--endpoint", endpoint, "--root", root]
    with open(log, "wb") as output:
        process = subprocess.Popen([*command, "--port", "0"], stdout=output, stderr=subprocess.STDOUT)

    def uri() -> str:
        deadline = time.monotonic() + SERVE_STARTUP_SECONDS
        while not (found := re.search(r"Lance REST Namespace on (http://\S+)", log.read_text(errors="replace"))):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"lance-iceberg-ns serve did not start (see {log})")
            time.sleep(0.05)
        return found.group(1)

    try:
        yield uri
    finally:
        stop_process(process)


@contextlib.contextmanager
def lance_rest_server(uri: str | None = None, endpoint: str | None = None, root: str | None = None) -> Iterator[str]:
    """The Lance REST server at ``uri``; or one started for the block over ``endpoint`` (else a
    local catalog) with tables under ``root`` (else a temporary directory), its log kept there."""
    if uri:
        yield uri
        return
    root = root or tempfile.mkdtemp(prefix="lance-iceberg-ns-")
    log = Path(tempfile.mkdtemp(prefix="lance-iceberg-ns-serve-")) / "serve.log"
    with catalog_endpoint(endpoint) as catalog, served(catalog, root, log) as started:
        yield started()


def duckdb_with_lance() -> Any:
    """DuckDB with the Lance extension of the ``duckdb-extension-lance`` wheel (unsigned: loaded
    from the file, which is pinned to DuckDB's version)."""
    import duckdb
    import duckdb_extension_lance

    found = sorted(Path(duckdb_extension_lance.__file__).parent.glob("extensions/*/lance.duckdb_extension"))
    if not found:
        raise RuntimeError("the duckdb-extension-lance wheel holds no extension file")
    connection = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    connection.execute(f"LOAD '{found[-1]}'")
    return connection


# --- the steps


def write_with_spark(spark: Any, properties: dict[str, str], mode: str, start: int, count: int) -> int:
    """A Spark job writes the articles as a Lance table of the catalog; the version it made."""
    from lance_iceberg_ns.spark import write_lance

    written = write_lance(
        spark_articles(spark, start, count), properties, TABLE, mode, vector_columns={"vector": DIMENSION}
    )
    return written.version


def write_with_pylance(ns: IcebergLanceNamespace, mode: str, start: int, count: int) -> int:
    return lance.write_dataset(arrow_articles(start, count), namespace_client=ns, table_id=TABLE, mode=mode).version


def spark_sql(spark: Any, properties: dict[str, str]) -> list[tuple[str, int]]:
    """Spark SQL reads the table by name, through a view of the namespace."""
    from lance_iceberg_ns.spark import register_lance_views

    register_lance_views(spark, properties, NAMESPACE)
    query = "SELECT topic, count(*) AS n FROM articles WHERE words > 300 GROUP BY topic ORDER BY topic"
    return [(row["topic"], row["n"]) for row in spark.sql(query).collect()]


def lancedb_search(uri: str) -> list[tuple[int, float]]:
    """lancedb, through the Lance REST server: the 3 articles nearest to the probe's vector."""
    import lancedb

    table = lancedb.connect_namespace("rest", {"uri": uri}).open_table(TABLE[-1], namespace_path=NAMESPACE)
    probe = table.search().where(f"id = {PROBE}").select(["vector"]).limit(1).to_arrow()["vector"][0].as_py()
    found = table.search(probe).select(["id", "_distance"]).limit(3).to_arrow()
    return list(zip(found["id"].to_pylist(), found["_distance"].to_pylist(), strict=True))


def duckdb_sql(uri: str) -> list[tuple[str, int, float]]:
    """DuckDB's Lance extension, attached to the namespace through the Lance REST server."""
    duck = duckdb_with_lance()
    try:
        duck.execute(f"ATTACH '{'$'.join(NAMESPACE)}' AS docs (TYPE LANCE, ENDPOINT '{uri}')")
        query = "SELECT topic, count(*), round(avg(words), 1) FROM docs.main.articles GROUP BY topic ORDER BY topic"
        return [tuple(row) for row in duck.execute(query).fetchall()]
    finally:
        duck.close()


def versions(ns: IcebergLanceNamespace) -> list[int]:
    listed = ns.list_table_versions(ListTableVersionsRequest(id=TABLE)).versions
    return sorted(version.version for version in listed)


def rows_at(ns: IcebergLanceNamespace, version: int | None = None) -> int:
    return lance.dataset(namespace_client=ns, table_id=TABLE, version=version).count_rows()


def tables(ns: IcebergLanceNamespace) -> list[str]:
    return list(ns.list_tables(ListTablesRequest(id=NAMESPACE)).tables)


@dataclass
class Demo:
    """The steps, on one namespace; ``seen`` collects what they observed."""

    ns: IcebergLanceNamespace
    properties: dict[str, str]
    spark: Any  # None without PySpark: pylance writes instead
    say: Say
    seen: dict[str, Any] = field(default_factory=dict)

    def write(self, mode: str, start: int, count: int) -> int:
        if self.spark is None:
            return write_with_pylance(self.ns, mode, start, count)
        return write_with_spark(self.spark, self.properties, mode, start, count)

    def write_the_table(self) -> None:
        mode = "overwrite" if TABLE[-1] in tables(self.ns) else "create"
        version = self.write(mode, 0, ROWS)
        self.seen["tables"], self.seen["rows"] = tables(self.ns), rows_at(self.ns)
        writer = "Spark job" if self.spark is not None else "pylance"
        self.say(
            f"2. {writer} ({mode}) wrote {'.'.join(TABLE)}: {self.seen['rows']} rows, "
            f"{DIMENSION}-d float32 vectors, version {version}"
        )

    def query_with_spark_sql(self) -> None:
        if self.spark is None:
            self.say(f"3. Spark SQL skipped: PySpark is not installed ({INSTALL_HINT})")
            return
        self.seen["spark_sql"] = spark_sql(self.spark, self.properties)
        by_topic = ", ".join(f"{topic} {count}" for topic, count in self.seen["spark_sql"])
        self.say(f"3. Spark SQL, articles over 300 words by topic: {by_topic}")

    def search_and_query_through(self, server: Callable[[], str] | None) -> None:
        if server is None:
            self.say(f"4. lancedb and DuckDB skipped: the server extra is not installed ({INSTALL_HINT})")
            return
        uri = server()
        self.say(f"4. lance-iceberg-ns serve: Lance REST Namespace on {uri}")
        if missing("lancedb"):
            self.say(f"5. lancedb vector search skipped: lancedb is not installed ({INSTALL_HINT})")
        else:
            self.seen["nearest"] = lancedb_search(uri)
            nearest = ", ".join(f"{found} ({distance:.2f})" for found, distance in self.seen["nearest"])
            self.say(f"5. lancedb vector search, nearest to article {PROBE} (distance): {nearest}")
        if missing("duckdb", "duckdb_extension_lance"):
            self.say(f"6. DuckDB SQL skipped: duckdb or its Lance extension is not installed ({INSTALL_HINT})")
        else:
            self.seen["duckdb"] = duckdb_sql(uri)
            by_topic = ", ".join(f"{topic} {count}/{words}" for topic, count, words in self.seen["duckdb"])
            self.say(f"6. DuckDB SQL, articles/average words by topic: {by_topic}")

    def append_and_travel_back(self) -> None:
        appended = self.write("append", ROWS, APPENDED)
        self.seen["versions"], self.seen["rows_before_append"] = versions(self.ns), rows_at(self.ns, appended - 1)
        now, before = rows_at(self.ns), self.seen["rows_before_append"]
        self.say(
            f"7. Appended {APPENDED} rows: versions {self.seen['versions']}; "
            f"version {appended} has {now} rows, version {appended - 1} still reads {before}"
        )

    def drop_and_undrop(self) -> None:
        self.ns.drop_table(DropTableRequest(id=TABLE))
        self.seen["after_drop"], self.seen["status_after_drop"] = tables(self.ns), self.ns.table_status(TABLE).state
        restored = self.ns.undrop_table(TABLE)
        self.seen["after_undrop"], self.seen["undropped_rows"] = tables(self.ns), rows_at(self.ns)
        self.say(
            f"8. drop_table: {self.seen['status_after_drop']}, tables {self.seen['after_drop']}; "
            f"undrop_table: {restored.state}, {self.seen['undropped_rows']} rows, versions {versions(self.ns)}"
        )


def run_demo(data_dir: str | None = None, say: Say | None = None) -> dict[str, Any]:
    """Run the demo, printing its steps (or handing them to ``say``); what it observed (the tests
    check it). The engines' logs go to ``demo.log`` in the data directory."""
    work = Path(data_dir or tempfile.mkdtemp(prefix="lance-iceberg-ns-demo-")).absolute()
    work.mkdir(parents=True, exist_ok=True)
    with quiet(work / "demo.log") as terminal:
        return _run(work, say or (lambda line: print(line, file=terminal, flush=True)))


def _run(work: Path, say: Say) -> dict[str, Any]:
    started = time.perf_counter()
    with local_catalog(work / "catalog", prefix_style="defaults") as catalog:
        say(f"1. Local Iceberg REST catalog at {catalog.endpoint} (data in {work})")
        properties = {"endpoint": catalog.endpoint, "root": str(work / "lance")}
        with IcebergLanceNamespace(**properties) as ns, contextlib.ExitStack() as stack:
            server, spark = None, None
            if not missing("fastapi", "uvicorn"):  # it starts while Spark does
                server = stack.enter_context(served(**properties, log=work / "serve.log"))
            if not missing("pyspark"):
                spark = start_spark()
                stack.callback(spark.stop)
            ns.create_namespace(CreateNamespaceRequest(id=NAMESPACE, mode="exist_ok"))
            demo = Demo(ns, properties, spark, say)
            demo.write_the_table()
            demo.query_with_spark_sql()
            demo.search_and_query_through(server)
            demo.append_and_travel_back()
            demo.drop_and_undrop()
    say(f"Done in {time.perf_counter() - started:.0f} s (the engines' logs: demo.log in the data directory).")
    return demo.seen


def example_arguments(description: str | None) -> argparse.ArgumentParser:
    """The options every example takes: a running Lance REST server, or the catalog and root of
    one the example starts (by default the embedded catalog and a temporary root), and the namespace."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--uri", help="a running Lance REST server (lance-iceberg-ns serve)")
    parser.add_argument("--endpoint", help="an Iceberg REST catalog (default: start the local one)")
    parser.add_argument("--root", help="the storage root (default: a temporary directory)")
    parser.add_argument("--namespace", default="demo_wh.examples", help="warehouse.namespace of the tables")
    return parser
