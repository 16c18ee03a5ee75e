"""Spark's own writer and reader of Lance tables, lance-spark in the JVM, through the catalog
(``lance_catalog_conf`` over ``lance-iceberg-ns serve``), against Spark's Parquet writer and
reader of the same DataFrame on local disk, from one run; the Python path (``write_lance`` /
``read_lance``: Spark hands Arrow to pylance in Python workers) shown beside them for information.

lance-spark is published for Spark 3.5 only, so this runs on PySpark 3.5 (``.venv-pyspark35``,
which has the ``server`` extra); the connector's jars are fetched by Spark's Ivy once. 2 million
rows (int64, float64, a short string: the columns of ``spark_pipeline.py``), cached once, on
local[2], 8 partitions. ``serve`` runs in a process of its own, as it would for a real job, with
its access log on, which gives the requests each statement makes of it.

Writes, each figure the median of ``--repeat`` rounds in which the paths take turns (starting with
a different one each round), every Lance write a table of its own and every Parquet write a
directory of its own:

- ``df.writeTo("lance.wh.db.t").append()`` into a table made just before by ``CREATE TABLE``
  (not timed), as lance-spark writes by default (Lance file format 2.0): the target, at most 1.3x
  Spark's Parquet writer (Spark's default: snappy);
- the same into a table created with ``TBLPROPERTIES ('file_format_version' = '2.2')`` (pylance's
  default format, which compresses), ``df.writeTo("lance.wh.db.t").create()`` (the table declared
  by the same statement), and ``write_lance`` (the Python path): for information. The bytes each
  writer stored for the rows are printed too.

Reads, ``--read-repeat`` rounds of three queries in Spark SQL on the same rows: ``count(*)``, a
filtered aggregate (``count(*), sum(value) WHERE key = 'k7'``, 2,000 rows of 2 million), and an
aggregate over every column (every value decoded), each through lance-spark (the table of the
first append above) and over the Parquet files (``parquet.`path```, listed again at every query as
the Lance table is described again); the first two are held to at most 1.3x Parquet, the third
and the Python path's reads (``read_lance``, same table) are shown for information. Every path and
query is taken once on a small slice first, unmeasured, and the answers of the three readers are
compared.

    VENV=.venv-pyspark35 bash scripts/setup.sh pyspark35
    .venv-pyspark35/bin/python bench/spark_sql.py [--rows 2000000]   # 2 to 4 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import lance
import pyspark
from lance_namespace import CreateNamespaceRequest, DescribeTableRequest
from pyspark.sql import functions as F
from rest_server import start_server, timed
from spark_pipeline import spark_arguments

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.spark import lance_catalog_conf, local_spark_session, read_lance, write_lance
from lance_iceberg_ns.spark.catalog import LANCE_SPARK_VERSION
from lance_iceberg_ns.testing import local_catalog

WAREHOUSE, DATABASE = "bench_wh", "db"
TARGET = 1.3
COLUMNS = "id BIGINT, value DOUBLE, key STRING"
QUERIES = {  # name: the select list, the filter, the columns read_lance reads, the target (None: information)
    "count(*)": (["count(*)"], None, ["id"], TARGET),
    "filtered aggregate": (["count(*)", "sum(value)"], "key = 'k7'", ["value"], TARGET),
    "every column": (["sum(id)", "sum(value)", "max(length(key))"], None, None, None),
}
ACCESS_LINE = re.compile(r'uvicorn\.access .*"(?:GET|POST) /v1/(\w+)/[^/ ]+/(\w+)')


class Requests:
    """The requests ``serve`` logged while a statement ran, by operation (``table/describe``...)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.seen: dict[str, list[Counter[str]]] = {}

    def during(self, name: str, action: Callable[[], Any]) -> Callable[[], Any]:
        def counted() -> None:
            start = self.log.stat().st_size
            action()  # uvicorn logs a request before its answer's body is sent: the count is complete
            with open(self.log, "rb") as read:
                read.seek(start)
                lines = read.read().decode(errors="replace").splitlines()
            found = (ACCESS_LINE.search(line) for line in lines)
            self.seen.setdefault(name, []).append(Counter(f"{m[1]}/{m[2]}" for m in found if m))

        return counted

    def summary(self, name: str) -> str:
        counts = self.seen[name]
        operations = sorted({operation for count in counts for operation in count})
        each = [f"{statistics.median(count[operation] for count in counts):g} {operation}" for operation in operations]
        return ", ".join(each) or "none"


def turns(names: list[str], round_: int) -> list[str]:
    """The paths in the order of this round: each round starts with the next one."""
    first = round_ % len(names)
    return names[first:] + names[:first]


def main() -> None:
    args = spark_arguments(__doc__, rows=2_000_000, read_repeat=11)
    # The report alone on standard output: the JVM Spark starts shares this process's, and prints
    # Ivy's resolution of the connector there, so it gets standard error instead.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    with (
        tempfile.TemporaryDirectory() as work,
        local_catalog(Path(work) / "catalog", prefix_style="defaults") as catalog,
    ):
        root = str(Path(work) / "lance")
        properties = {"endpoint": catalog.endpoint, "root": root}
        IcebergLanceNamespace(**properties).create_namespace(CreateNamespaceRequest(id=[WAREHOUSE, DATABASE]))
        log = Path(work) / "serve.log"
        options = ("--access-log", "-p", f"warehouses={WAREHOUSE}")
        server, uri = start_server(catalog.endpoint, root, *options, log=log)
        served = Requests(log)
        try:
            samples, stored = measure(args, properties, uri, Path(work), served)
        finally:
            server.terminate()
            server.wait(timeout=60)
    report(args, samples, stored, served, out)


def measure(
    args: argparse.Namespace, properties: dict[str, str], uri: str, work: Path, served: Requests
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """The seconds each path took, round by round, and the bytes each writer stored for the rows."""
    config = {**lance_catalog_conf("lance", uri), "spark.driver.memory": "4g"}
    spark = local_spark_session("lance-iceberg-ns benchmark: lance-spark", config=config)
    source = spark.range(0, args.rows, numPartitions=args.partitions).select(
        F.col("id"), (F.col("id") * 0.5).alias("value"), F.concat(F.lit("k"), F.col("id") % 1000).alias("key")
    )
    source.cache().count()  # generate once; every write below starts from the same cached rows

    def sql_name(table: str) -> str:
        return f"lance.{WAREHOUSE}.{DATABASE}.{table}"

    def lance_append(df: Any, table: str) -> Callable[[], Any]:
        spark.sql(f"CREATE TABLE {sql_name(table)} ({COLUMNS})")  # not timed: the table a job appends to
        return served.during("write: lance-spark, append", lambda: df.writeTo(sql_name(table)).append())

    def lance_append_2_2(df: Any, table: str) -> Callable[[], Any]:
        spark.sql(f"CREATE TABLE {sql_name(table)} ({COLUMNS}) TBLPROPERTIES ('file_format_version' = '2.2')")
        return lambda: df.writeTo(sql_name(table)).append()

    def lance_create(df: Any, table: str) -> Callable[[], Any]:
        return served.during("write: lance-spark, create", lambda: df.writeTo(sql_name(table)).create())

    def parquet(df: Any, directory: str) -> Callable[[], Any]:
        return lambda: df.write.parquet(str(work / "parquet" / directory))

    def python_path(df: Any, table: str) -> Callable[[], Any]:
        return lambda: write_lance(df, properties, [WAREHOUSE, DATABASE, table])

    def where(query: str) -> str:
        condition = QUERIES[query][1]
        return f"WHERE {condition}" if condition else ""

    def lance_query(table: str, query: str) -> tuple[Any, ...]:
        select = ", ".join(QUERIES[query][0])
        return tuple(spark.sql(f"SELECT {select} FROM {sql_name(table)} {where(query)}").collect()[0])

    def parquet_query(directory: str, query: str) -> tuple[Any, ...]:
        select, files = ", ".join(QUERIES[query][0]), work / "parquet" / directory
        return tuple(spark.sql(f"SELECT {select} FROM parquet.`{files}` {where(query)}").collect()[0])

    def python_query(table: str, query: str) -> tuple[Any, ...]:
        select, condition, columns, _ = QUERIES[query]
        frame = read_lance(spark, properties, [WAREHOUSE, DATABASE, table], columns=columns, filter=condition)
        return tuple(frame.selectExpr(*select).collect()[0])

    # the write paths: (name of their tables or directories, the write of a DataFrame to one)
    writes: dict[str, tuple[str, Callable[[Any, str], Callable[[], Any]]]] = {
        "write: lance-spark, append": ("append", lance_append),
        "write: lance-spark, append, format 2.2": ("append_2_2", lance_append_2_2),
        "write: lance-spark, create": ("create", lance_create),
        "write: Parquet": ("parquet", parquet),
        "write: write_lance (Python)": ("python", python_path),
    }
    readers: dict[str, Callable[[str], Callable[[], Any]]] = {
        "lance-spark": lambda query: served.during(
            f"read {query}: lance-spark", lambda: lance_query("append_0", query)
        ),
        "Parquet": lambda query: lambda: parquet_query("parquet_0", query),
        "read_lance (Python)": lambda query: lambda: python_query("append_0", query),
    }
    # Take every path and query once on a small slice, unmeasured: no figure pays for starting the
    # Python workers, the connector's first use or the JVM compiling a code path.
    warm_up = source.limit(100_000)
    for prefix, write in writes.values():
        write(warm_up, f"warm_up_{prefix}")()
    for query in QUERIES:
        lance_query("warm_up_append", query)
        parquet_query("warm_up_parquet", query)
        python_query("warm_up_append", query)

    samples: dict[str, list[float]] = {}
    for round_ in range(args.repeat):
        for kind in turns(list(writes), round_):
            prefix, write = writes[kind]
            action = write(source, f"{prefix}_{round_}")  # a CREATE TABLE before an append is made here
            samples.setdefault(kind, []).append(timed(action))
    for round_ in range(args.read_repeat):
        for query in QUERIES:
            for reader in turns(list(readers), round_):
                samples.setdefault(f"read {query}: {reader}", []).append(timed(readers[reader](query)))
    for query in QUERIES:  # the three readers agree
        answers = [lance_query("append_0", query), parquet_query("parquet_0", query), python_query("append_0", query)]
        assert len(set(answers)) == 1, (query, answers)
    assert lance_query("create_0", "count(*)") == lance_query("append_2_2_0", "count(*)") == (args.rows,)
    spark.stop()
    bridge = IcebergLanceNamespace(**properties)

    def location(table: str) -> str:
        return str(bridge.describe_table(DescribeTableRequest(id=[WAREHOUSE, DATABASE, table])).location)

    locations = {
        f"{writer} (Lance file format {lance.dataset(at).data_storage_version})": at
        for writer, at in (
            ("lance-spark", location("append_0")),
            ("lance-spark", location("append_2_2_0")),
            ("write_lance", location("python_0")),
        )
    }
    locations["Parquet (Spark's default, snappy)"] = str(work / "parquet" / "parquet_0")
    return samples, {name: stored_bytes(at) for name, at in locations.items()}


def stored_bytes(location: str) -> int:
    """The bytes of every file under a local table or directory."""
    path = Path(location.removeprefix("file://"))
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def report(
    args: argparse.Namespace, samples: dict[str, list[float]], stored: dict[str, int], served: Requests, out: TextIO
) -> None:
    def show(line: str) -> None:
        print(line, file=out, flush=True)

    figures = {name: statistics.median(taken) for name, taken in samples.items()}
    show(
        f"{args.rows:,} rows (int64, float64, short string), local[2], {args.partitions} partitions, "
        f"PySpark {pyspark.__version__}, lance-spark {LANCE_SPARK_VERSION}; seconds, median of "
        f"{args.repeat} writes and {args.read_repeat} reads"
    )
    for name, seconds in figures.items():
        taken = ", ".join(f"{one:.2f}" for one in samples[name])
        show(f"{name:<48}{seconds:>8.2f}   ({taken})")
    show("bytes stored for the rows:")
    for name, size in stored.items():
        show(f"  {name:<46}{size / 2**20:>6.1f} MiB")
    show("requests to serve per statement (median):")
    for name in served.seen:
        show(f"  {name:<46}{served.summary(name)}")

    def ratio(line: str, ours: str, baseline: str, target: float | None) -> None:
        value = figures[ours] / figures[baseline]
        verdict = (
            "information" if target is None else f"target <= {target:g}, {'met' if value <= target else 'NOT met'}"
        )
        show(f"{line + ':':<52}{value:.2f} ({verdict})")

    ratio("lance-spark append / Parquet write", "write: lance-spark, append", "write: Parquet", TARGET)
    ratio("lance-spark append, 2.2 / Parquet write", "write: lance-spark, append, format 2.2", "write: Parquet", None)
    ratio("lance-spark create / Parquet write", "write: lance-spark, create", "write: Parquet", None)
    ratio("write_lance (Python) / Parquet write", "write: write_lance (Python)", "write: Parquet", None)
    for query, (*_, target) in QUERIES.items():
        baseline = f"read {query}: Parquet"
        ratio(f"lance-spark {query} / Parquet", f"read {query}: lance-spark", baseline, target)
        ratio(f"read_lance (Python) {query} / Parquet", f"read {query}: read_lance (Python)", baseline, None)


if __name__ == "__main__":
    main()
