"""Lance tables of the catalog read into Spark: the driver pins one version and lists its fragments;
every task reads its fragments with the projection and the filter pushed into Lance."""

from __future__ import annotations

import dataclasses
import heapq
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from lance_namespace import DescribeTableRequest

from lance_iceberg_ns.data import datasets
from lance_iceberg_ns.jobs.planned_writes import cast_columns
from lance_iceberg_ns.namespace import IcebergLanceNamespace, as_namespace

# A read task holds at most this many bytes of fragments: Spark's spark.sql.files.maxPartitionBytes.
MAX_TASK_BYTES = 128 * 1024 * 1024
# Batches handed to Spark: large ones cost Spark much less per row than Lance's default of 8192
# rows; wide rows (vectors) get fewer rows, so that a batch stays near READ_BATCH_BYTES.
MAX_READ_BATCH_ROWS = 128 * 1024
READ_BATCH_BYTES = 16 * 1024 * 1024


def _spark_friendly(schema: pa.Schema) -> pa.Schema:
    """Fixed-size lists become lists for Spark, which has no fixed-size array type."""

    def convert(data_type: pa.DataType) -> pa.DataType:
        if pa.types.is_fixed_size_list(data_type) or pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
            item = data_type.value_field
            return pa.list_(pa.field(item.name, convert(item.type), item.nullable))
        if pa.types.is_struct(data_type):
            return pa.struct([pa.field(f.name, convert(f.type), f.nullable) for f in data_type])
        return data_type

    return pa.schema([pa.field(f.name, convert(f.type), f.nullable) for f in schema])


@dataclass(frozen=True)
class TableRead:
    """One read of a Lance table at a pinned version, planned on the driver; executors read
    fragments with it."""

    location: str
    storage_options: dict[str, str]
    version: int
    tasks: list[list[int]]  # the fragment ids each read task reads
    batch_rows: int
    columns: list[str] | None
    filter: str | None
    output_schema_bytes: bytes

    @classmethod
    def plan(
        cls,
        ns: IcebergLanceNamespace,
        table_id: Sequence[str],
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        version: int | None = None,
        parallelism: int | None = None,
    ) -> TableRead:
        """``parallelism``: the tasks the cluster runs at once (Spark's default parallelism;
        the driver's CPU count when not given)."""
        described = ns.describe_table(DescribeTableRequest(id=list(table_id), version=version))
        location, options = described.location, dict(described.storage_options or {})
        assert location is not None
        dataset = ns.dataset(list(table_id), version)
        schema = dataset.schema if columns is None else pa.schema([dataset.schema.field(c) for c in columns])
        fragments = dataset.get_fragments()
        sizes = {fragment.fragment_id: _fragment_bytes(fragment) for fragment in fragments}
        return cls(
            location,
            options,
            dataset.version,
            read_tasks(sizes, parallelism or os.cpu_count() or 1),
            read_batch_rows(
                sum(size or 0 for size in sizes.values()),
                sum(fragment.physical_rows for fragment in fragments if sizes[fragment.fragment_id] is not None),
            ),
            list(columns) if columns is not None else None,
            filter,
            _spark_friendly(schema).serialize().to_pybytes(),
        )

    @property
    def output_schema(self) -> pa.Schema:
        return pa.ipc.read_schema(pa.py_buffer(self.output_schema_bytes))

    def spark_schema(self) -> Any:
        from pyspark.sql.pandas.types import from_arrow_schema

        return from_arrow_schema(self.output_schema, prefer_timestamp_ntz=False)

    def nullable_as(self, declared: Any) -> TableRead:
        """The plan answering a value as nullable wherever Spark's ``declared`` schema (a view's,
        kept since registration) says so, though the table now says NOT NULL (an overwrite of
        Spark rows, which Spark often calls NOT NULL, in a column, a struct or a list): Spark
        refuses a read whose nullability differs."""
        schema = self.output_schema
        relaxed = _relaxed_fields(list(schema), declared)
        if relaxed == list(schema):
            return self
        output = pa.schema(relaxed, metadata=schema.metadata)
        return dataclasses.replace(self, output_schema_bytes=output.serialize().to_pybytes())

    def read_task(self, task: int) -> Iterator[pa.RecordBatch]:
        """On an executor: the task's fragments, at the pinned version, projected and filtered by Lance."""
        target = self.output_schema
        dataset = datasets.lance_dataset(self.location, self.storage_options, self.version)
        for fragment_id in self.tasks[task]:
            fragment = dataset.get_fragment(fragment_id)
            if fragment is None:  # cannot happen at a pinned version; say so if it does
                raise RuntimeError(f"Fragment {fragment_id} is missing from version {self.version} of {self.location}")
            for data in fragment.to_batches(columns=self.columns, filter=self.filter, batch_size=self.batch_rows):
                yield cast_columns(data, target)


def _relaxed_fields(fields: list[pa.Field], declared: Any) -> list[pa.Field]:
    """``fields`` nullable where the Spark struct type ``declared`` has a nullable field of that name."""
    spark_fields = {field.name: field for field in declared.fields}
    relaxed = []
    for field in fields:
        spark_field = spark_fields.get(field.name)
        if spark_field is not None:
            field = field.with_type(_relaxed_type(field.type, spark_field.dataType))
            field = field.with_nullable(field.nullable or spark_field.nullable)
        relaxed.append(field)
    return relaxed


def _relaxed_type(arrow_type: pa.DataType, spark_type: Any) -> pa.DataType:
    """``arrow_type`` with the nullability of the values inside it relaxed as ``spark_type`` allows."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if pa.types.is_struct(arrow_type) and isinstance(spark_type, StructType):
        return pa.struct(_relaxed_fields(list(arrow_type), spark_type))
    if isinstance(spark_type, ArrayType) and (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)):
        value = arrow_type.value_field
        value = value.with_type(_relaxed_type(value.type, spark_type.elementType))
        value = value.with_nullable(value.nullable or spark_type.containsNull)
        return pa.list_(value) if pa.types.is_list(arrow_type) else pa.large_list(value)
    if isinstance(spark_type, MapType) and pa.types.is_map(arrow_type):
        item = arrow_type.item_field
        item = item.with_type(_relaxed_type(item.type, spark_type.valueType))
        item = item.with_nullable(item.nullable or spark_type.valueContainsNull)
        return pa.map_(arrow_type.key_field, item)
    return arrow_type


def _fragment_bytes(fragment: Any) -> int | None:
    """A fragment's size from its metadata (files written by older Lance versions do not say)."""
    sizes = [data_file.file_size_bytes for data_file in fragment.data_files()]
    return None if None in sizes else sum(size for size in sizes if size is not None)


def read_batch_rows(stored_bytes: int, rows: int) -> int:
    """Rows per batch for a table whose ``rows`` take ``stored_bytes`` on storage."""
    if not stored_bytes or not rows:
        return MAX_READ_BATCH_ROWS
    return max(1024, min(MAX_READ_BATCH_ROWS, READ_BATCH_BYTES * rows // stored_bytes))


def read_tasks(sizes: Mapping[int, int | None], parallelism: int) -> list[list[int]]:
    """Fragments grouped into read tasks, as Spark sizes a file source's tasks: enough tasks to
    keep ``parallelism`` cores busy, and more when a task would exceed ``MAX_TASK_BYTES``. Each
    fragment goes, largest first, to the task holding the fewest bytes, so tasks come out even
    (a fragment is not split). A fragment of unknown size counts as the average known one."""
    known = [size for size in sizes.values() if size is not None]
    average = sum(known) // len(known) if known else 1
    weights = {fragment_id: average if size is None else size for fragment_id, size in sizes.items()}
    count = min(len(weights), max(parallelism, math.ceil(sum(weights.values()) / MAX_TASK_BYTES)))
    tasks: list[list[int]] = [[] for _ in range(count)]
    least_loaded = [(0, index) for index in range(count)]
    for fragment_id, weight in sorted(weights.items(), key=lambda item: (-item[1], item[0])):
        load, index = heapq.heappop(least_loaded)
        tasks[index].append(fragment_id)
        heapq.heappush(least_loaded, (load + weight, index))
    return tasks


def read_lance(
    spark: Any,
    namespace: IcebergLanceNamespace | Mapping[str, str],
    table_id: Sequence[str],
    columns: Sequence[str] | None = None,
    filter: str | None = None,
    version: int | None = None,
) -> Any:
    """A Spark DataFrame over a Lance table of the catalog, at one pinned version (the latest, or
    ``version``); ``columns`` and ``filter`` (a SQL predicate) are pushed into Lance."""
    plan = TableRead.plan(as_namespace(namespace), table_id, columns, filter, version, _parallelism(spark))

    def read_tasks_of(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column("id").to_pylist():
                yield from plan.read_task(index)

    # Spark task i reads the plan's task i, without a shuffle.
    count = len(plan.tasks)
    return spark.range(0, count, numPartitions=max(1, count)).mapInArrow(read_tasks_of, plan.spark_schema())


def _parallelism(spark: Any) -> int | None:
    """Spark's default parallelism (None on Spark Connect, which does not expose it)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect: no SparkContext on the client
        return None
