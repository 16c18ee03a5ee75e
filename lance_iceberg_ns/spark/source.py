"""The Lance tables of the catalog as a Spark 4 Python data source, ``format("lance")``.

    from lance_iceberg_ns.spark.source import register_lance_data_source
    register_lance_data_source(spark)
    df.write.format("lance").option("endpoint", URL).option("table", "wh.db.t").mode("append").save()
    spark.read.format("lance").option("endpoint", URL).option("table", "wh.db.t").load()

Options: ``table`` (the identifier, parts joined by ``delimiter``, default ``.``; or ``table_id``,
the parts as a JSON list), ``existing_table`` (``true``: a write never creates it), every bridge
property (``endpoint``, ``root``, ``credential``, ``storage.*``...), and ``vector_columns``
(``name:dimension,...``) and ``max_rows_per_file`` for writes, ``columns`` (comma-separated),
``filter``, ``version`` and ``parallelism`` (how many tasks the cluster runs at once, which
sizes the read tasks; default: the driver's CPU count) for reads. Writes: executors write
fragments, the driver commits once in ``commit`` (nothing in ``abort``); ``append`` creates a
missing table, ``overwrite`` replaces one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from lance_namespace import TableExistsRequest
from lance_namespace.errors import TableNotFoundError
from pyspark.sql import SparkSession

try:
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceReader,
        InputPartition,
        WriterCommitMessage,
    )
except ImportError as exc:  # PySpark 3.5
    raise ImportError(
        "format('lance') needs PySpark 4 (Python data sources); on PySpark 3.5 use "
        "lance_iceberg_ns.spark.write_lance and read_lance"
    ) from exc
from pyspark.sql.types import StructType

from lance_iceberg_ns.jobs.planned_writes import TableWrite
from lance_iceberg_ns.namespace import IcebergLanceNamespace
from lance_iceberg_ns.spark.reads import TableRead
from lance_iceberg_ns.spark.writes import spark_arrow_schema

_SOURCE_OPTIONS = {
    "table",
    "table_id",
    "existing_table",
    "delimiter",
    "vector_columns",
    "max_rows_per_file",
    "columns",
    "filter",
    "version",
    "parallelism",
    "path",
}


def _table_id(options: Mapping[str, str]) -> list[str]:
    if options.get("table_id"):  # the parts as a JSON list (a view's: any part may hold the delimiter)
        parts = json.loads(options["table_id"])
        if not isinstance(parts, list) or not all(isinstance(part, str) for part in parts):
            raise ValueError("The option 'table_id' must be a JSON list of strings")
        return parts
    table = options.get("table")
    if not table:
        raise ValueError("The lance data source needs the option 'table' (e.g. 'warehouse.namespace.table')")
    return table.split(options.get("delimiter") or ".")


def _bridge(options: Mapping[str, str]) -> IcebergLanceNamespace:
    return IcebergLanceNamespace(**{k: v for k, v in options.items() if k not in _SOURCE_OPTIONS})


def _vector_columns(text: str | None) -> dict[str, int]:
    columns = {}
    for item in (text or "").split(","):
        if item.strip():
            name, _, dimension = item.partition(":")
            columns[name.strip()] = int(dimension)
    return columns


@dataclass
class LanceCommitMessage(WriterCommitMessage):  # type: ignore[misc]
    """What one task wrote: its fragments' metadata."""

    fragments: list[str]


class LanceArrowWriter(DataSourceArrowWriter):  # type: ignore[misc]
    def __init__(self, plan: TableWrite, options: Mapping[str, str]) -> None:
        self.plan = plan
        self.options = dict(options)  # the driver commits a managed table through a bridge made of them

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LanceCommitMessage:
        return LanceCommitMessage(self.plan.write_fragments(iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        fragments = [
            fragment
            for message in messages
            if isinstance(message, LanceCommitMessage)
            for fragment in message.fragments
        ]
        if not self.plan.managed:
            self.plan.commit(fragments)
            return
        with _bridge(self.options) as ns:  # the catalog arbitrates the version of a managed table
            self.plan.commit(fragments, ns)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing was committed, so the table is unchanged; written files are orphans."""


class LanceReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, plan: TableRead) -> None:
        self.plan = plan

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(task) for task in range(len(self.plan.tasks))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from self.plan.read_task(partition.value)


class LanceDataSource(DataSource):  # type: ignore[misc]
    """``format("lance")``: Lance tables registered in an Iceberg REST catalog."""

    @classmethod
    def name(cls) -> str:
        return "lance"

    def _read_plan(self) -> TableRead:
        columns = self.options.get("columns")
        version = self.options.get("version")
        parallelism = self.options.get("parallelism")
        return TableRead.plan(
            _bridge(self.options),
            _table_id(self.options),
            [c.strip() for c in columns.split(",")] if columns else None,
            self.options.get("filter"),
            int(version) if version else None,
            int(parallelism) if parallelism else None,
        )

    def schema(self) -> Any:
        return self._read_plan().spark_schema()

    def reader(self, schema: StructType) -> LanceReader:
        return LanceReader(self._read_plan().nullable_as(schema))

    def writer(self, schema: StructType, overwrite: bool) -> LanceArrowWriter:
        ns = _bridge(self.options)
        table_id = _table_id(self.options)
        try:
            ns.table_exists(TableExistsRequest(id=table_id))
            mode = "overwrite" if overwrite else "append"
        except TableNotFoundError:
            if self.options.get("existing_table") == "true":  # a view's: its table was dropped since
                raise
            mode = "create"
        plan = TableWrite.plan(
            ns,
            table_id,
            mode,
            spark_arrow_schema(schema),
            _vector_columns(self.options.get("vector_columns")),
            int(self.options.get("max_rows_per_file") or 1024 * 1024),
        )
        return LanceArrowWriter(plan, self.options)


def register_lance_data_source(spark: SparkSession) -> None:
    """Make ``format("lance")`` available in this Spark session (Spark 4)."""
    spark.dataSource.register(LanceDataSource)
