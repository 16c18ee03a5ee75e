"""Spark DataFrames written as Lance tables of the catalog: every executor task writes its partition as
Lance fragments with pylance's fragment writer and returns only their metadata; the driver commits once.

Only fragments collected by the one action the write runs are committed, so files written by failed or
speculative task attempts are never part of the table (``lance_iceberg_ns.jobs.remove_orphan_files``
deletes them later).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from lance_iceberg_ns.jobs.planned_writes import TableWrite, WriteResult
from lance_iceberg_ns.namespace import IcebergLanceNamespace, as_namespace

LOOPBACK = "127.0.0.1"


def local_spark_session(app_name: str, master: str = "local[2]", config: Mapping[str, str] | None = None) -> Any:
    """A Spark session on this machine alone: the driver bound to loopback, no UI or progress bars,
    Python workers on this interpreter, logs at ERROR. ``config``: more settings (partitions,
    ``spark.jars``, a catalog). For examples, benchmarks and tests; clusters bring their own."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = {
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        **(config or {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def spark_arrow_schema(schema: Any) -> pa.Schema:
    """A Spark schema as Arrow's (timestamps in UTC, as PySpark 3.5 to 4.1 hand them over)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema)


def write_lance(
    df: Any,
    namespace: IcebergLanceNamespace | Mapping[str, str],
    table_id: Sequence[str],
    mode: str = "create",
    *,
    vector_columns: Mapping[str, int] | None = None,
    max_rows_per_file: int = 1024 * 1024,
) -> WriteResult:
    """Write a Spark DataFrame as a Lance table registered in the catalog.

    ``mode``: ``create`` declares the table; ``append`` commits against the version the write
    started from; ``overwrite`` replaces the data as a new version. ``namespace`` may be the bridge
    or its properties (executors rebuild it). Raises the namespace's errors (TableAlreadyExists for
    ``create`` over a table, TableNotFound for ``append``/``overwrite`` of a missing one).
    """
    ns = as_namespace(namespace)
    plan = TableWrite.plan(ns, table_id, mode, spark_arrow_schema(df.schema), vector_columns, max_rows_per_file)
    return plan.commit(_write_fragments(df, plan), ns)


def _write_fragments(df: Any, plan: TableWrite) -> list[str]:
    """The executors write the DataFrame's partitions as fragments; their metadata, collected by
    one action (only what it collected is committed, whatever retries wrote besides)."""
    output = pa.schema([("fragment", pa.string())])

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield pa.RecordBatch.from_pydict({"fragment": plan.write_fragments(batches)}, schema=output)

    return [row["fragment"] for row in df.mapInArrow(write_partition, "fragment string").collect()]


def write_lance_together(
    namespace: IcebergLanceNamespace | Mapping[str, str],
    writes: Sequence[tuple[Any, Sequence[str], str]],
    *,
    max_rows_per_file: int = 1024 * 1024,
) -> list[Any]:
    """Write several DataFrames to several Lance tables whose versions the catalog manages, and
    publish all the new versions in one atomic catalog commit: every table moves, or none does
    (ConcurrentModificationError when another writer moved one meanwhile).

    ``writes``: ``(df, table_id, mode)``. The executors write every DataFrame's fragments first;
    the driver then stages each table's commit and publishes them together.
    """
    from lance_iceberg_ns.jobs.atomic import PlannedWrite, write_planned_together

    planned = [
        PlannedWrite(table_id, mode, spark_arrow_schema(df.schema), functools.partial(_write_fragments, df))
        for df, table_id, mode in writes
    ]
    return write_planned_together(namespace, planned, max_rows_per_file)
