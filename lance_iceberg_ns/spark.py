"""Lance tables in the Iceberg catalog from Spark, through PySpark (extra ``spark``).

The work is done by the executors: every task writes its partition as Lance fragments with
pylance's fragment writer and returns only the fragments' metadata; the driver commits once.
Reading, the driver pins one version and lists its fragments; every task reads its fragments with
the projection and the filter pushed into Lance.

Only fragments collected by the one action the write runs are committed, so files written by
failed or speculative task attempts are never part of the table
(``lance_iceberg_ns.orphans.remove_orphan_files`` deletes them later).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import heapq
import inspect
import json
import math
import os
import sys
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from lance_namespace import DescribeTableRequest, ListNamespacesRequest, ListTablesRequest
from lance_namespace.errors import InvalidInputError

from lance_iceberg_ns import datasets
from lance_iceberg_ns.identifiers import parse_namespace_id
from lance_iceberg_ns.namespace import IcebergLanceNamespace, as_namespace
from lance_iceberg_ns.planned_writes import TableWrite, WriteResult, cast_columns

# A read task holds at most this many bytes of fragments: Spark's spark.sql.files.maxPartitionBytes.
MAX_TASK_BYTES = 128 * 1024 * 1024
# Batches handed to Spark: large ones cost Spark much less per row than Lance's default of 8192
# rows; wide rows (vectors) get fewer rows, so that a batch stays near READ_BATCH_BYTES.
MAX_READ_BATCH_ROWS = 128 * 1024
READ_BATCH_BYTES = 16 * 1024 * 1024


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


def _spark_arrow_schema(df: Any) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    if "timezone" in inspect.signature(to_arrow_schema).parameters:  # PySpark 4
        return to_arrow_schema(df.schema, timezone=df.sparkSession.conf.get("spark.sql.session.timeZone"))
    return to_arrow_schema(df.schema)  # PySpark 3.5: timestamps in UTC


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
    plan = TableWrite.plan(ns, table_id, mode, _spark_arrow_schema(df), vector_columns, max_rows_per_file)
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
    from lance_iceberg_ns.atomic import PlannedWrite, write_planned_together

    planned = [
        PlannedWrite(table_id, mode, _spark_arrow_schema(df), functools.partial(_write_fragments, df))
        for df, table_id, mode in writes
    ]
    return write_planned_together(namespace, planned, max_rows_per_file)


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


# The views register_lance_views made, per Spark session: view name -> the registration that made
# it, and the view's definition as made (``_temp_view``): a view the user put under the name since
# is not dropped with the table.
_REGISTERED_VIEWS: weakref.WeakKeyDictionary[Any, dict[str, tuple[tuple[Any, ...], Any]]] = weakref.WeakKeyDictionary()


def register_lance_views(
    spark: Any,
    namespace: IcebergLanceNamespace | Mapping[str, str],
    namespace_id: str | Sequence[str],
    *,
    recursive: bool = False,
) -> list[str]:
    """A temporary view for every Lance table of a namespace (``"wh.db"`` or ``["wh", "db"]``), so
    that ``spark.sql("SELECT ... FROM orders")`` reads it; the view names, sorted.

    A view is named after its table; with ``recursive``, tables of the namespaces beneath too, named
    by their path below ``namespace_id`` joined by ``_`` (``sales_orders``). Names that are not plain
    identifiers are written in backquotes. On Spark 4 a view is the ``lance`` data source, and
    ``INSERT INTO`` appends. Where Spark reloads a view's table on every query (Spark 4.3 with its
    built-in in-memory session catalog), the view reads through a placeholder table of the session
    catalog (``spark_catalog.default.lance_view_...``: schema and provider only, no options, no
    files), so every query reads the table's latest version, and the scans of one query one
    version; elsewhere (Hive catalog, a custom ``spark_catalog``, Spark Connect, older Spark 4)
    Spark keeps the source's read plan, so the view reads the version its first query read. Filters
    are not pushed into Lance: Spark 4.3 keeps a pushed-down read plan on the source and hands it to
    every scan of the view in the query, which would give wrong rows. On Spark 3.5 a view is
    ``read_lance``'s DataFrame, at the version read here. Registering again refreshes the views, and
    drops those this function made for the namespace whose tables are gone.
    """
    ns = as_namespace(namespace)
    parent = _namespace_parts(namespace_id)
    views = _view_names(parent, _lance_tables(ns, parent, recursive))
    source = _lance_source(spark)
    placeholders = source and _reloads_view_tables(spark)
    for name, table_id in views.items():
        options = {**ns.properties, "table_id": json.dumps(table_id), "existing_table": "true"}
        if placeholders:
            frame = spark.read.options(**options).table(_placeholder_table(spark, ns, name, table_id))
        elif source:
            frame = spark.read.format("lance").options(**options).load()
        else:
            frame = read_lance(spark, ns, table_id)
        frame.createOrReplaceTempView(_quoted(name))
    registration = (ns.properties.get("endpoint"), tuple(parent), recursive)
    made = _REGISTERED_VIEWS.setdefault(spark, {})
    current = {name.lower() for name in views}  # Spark's view names ignore case
    for name in [name for name, (owner, _) in made.items() if owner == registration and name not in views]:
        if name.lower() not in current and _temp_view(spark, name) == made[name][1]:  # else replaced since
            spark.catalog.dropTempView(name)  # the name as it is: this one is not parsed
        if placeholders:
            spark.sql(f"DROP TABLE IF EXISTS {_placeholder_name(spark, name)}")
        del made[name]
    made.update({name: (registration, _temp_view(spark, name)) for name in views})
    return sorted(views)


def _temp_view(spark: Any, name: str) -> Any:
    """The session's definition of the temporary view ``name`` (a JVM object, equal only to the
    same definition), None when there is none; where it cannot be read (Spark Connect), a stand-in
    equal to every other, so that only the name tells a view this module made."""
    try:
        found = spark._jsparkSession.sessionState().catalog().getRawTempView(name)
    except Exception:  # Spark Connect: no JVM session
        return _UNREADABLE
    return found.get() if found.isDefined() else None


_UNREADABLE = object()


# Per Spark session, a token naming its placeholder tables (the session catalog is shared by the
# sessions of one application; temporary views are not).
_SESSION_TOKENS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_V2_TABLE_REFERENCE = "org.apache.spark.sql.catalyst.analysis.V2TableReference"


def _reloads_view_tables(spark: Any) -> bool:
    """Whether a temporary view made from a session catalog table loads the table again on every
    query (Spark 4.3's V2TableReference), in a session whose catalog is Spark's own in-memory one,
    where a placeholder table lives as long as the application and writes no files."""
    try:
        jvm = spark._jvm  # none on Spark Connect
        if jvm is None or spark.conf.get("spark.sql.catalogImplementation") != "in-memory":
            return False
        if spark.conf.get("spark.sql.catalog.spark_catalog", None):  # a catalog of its own
            return False
        jvm.java.lang.Class.forName(_V2_TABLE_REFERENCE)
    except Exception:  # Spark Connect, a Spark 4 without the class, a conf that cannot be read
        return False
    return True


def _placeholder_name(spark: Any, view: str) -> str:
    token = _SESSION_TOKENS.setdefault(spark, uuid.uuid4().hex[:12])
    return f"spark_catalog.default.lance_view_{token}_{hashlib.sha256(view.encode()).hexdigest()[:16]}"


def _placeholder_table(spark: Any, ns: IcebergLanceNamespace, view: str, table_id: Sequence[str]) -> str:
    """A table of the session catalog standing for the Lance table: the ``lance`` provider and the
    table's schema, external at the table's location (so that nothing is written), no options (the
    view passes them); its name."""
    plan = TableRead.plan(ns, table_id, parallelism=1)
    name = _placeholder_name(spark, view)
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.catalog.createTable(name, path=plan.location, source="lance", schema=plan.spark_schema())
    return name


def _namespace_parts(namespace_id: str | Sequence[str]) -> list[str]:
    """``"wh.db"`` or ``["wh", "db"]`` as its parts; ``""`` is the root (every configured warehouse)."""
    if isinstance(namespace_id, str):
        return namespace_id.split(".") if namespace_id else []
    return list(namespace_id)


def _lance_tables(ns: IcebergLanceNamespace, parent: list[str], recursive: bool) -> list[list[str]]:
    """The Lance tables with data (no declared-only ones) of ``parent``, or beneath it, each id as
    its parts (a name may hold ``$``, which joins the ids ``list_all_tables`` answers)."""
    if not recursive:
        return [[*parent, name] for name in _table_names(ns, parent)]
    pending = [parent] if parent else [[warehouse] for warehouse in ns.settings.warehouses]
    if not pending:
        raise InvalidInputError("Give the warehouse to register, or configure the property 'warehouses'")
    found = []
    while pending:
        namespace = pending.pop()
        if len(namespace) > 1:  # a warehouse holds namespaces, not tables
            found += [[*namespace, name] for name in _table_names(ns, namespace)]
        children = ([*namespace, child] for child in _child_namespaces(ns, namespace))
        pending += [child for child in children if _addressable(child)]
    return found


def _addressable(namespace_id: list[str]) -> bool:
    """Whether the bridge can name a namespace: an Iceberg engine may make one under a name it
    refuses (``"scratch "``), which then holds no Lance table to make a view of."""
    try:
        parse_namespace_id(namespace_id)
    except InvalidInputError:
        return False
    return True


def _table_names(ns: IcebergLanceNamespace, namespace: list[str]) -> list[str]:
    return _every_page(
        lambda token: ns.list_tables(ListTablesRequest(id=namespace, include_declared=False, page_token=token))
    )


def _child_namespaces(ns: IcebergLanceNamespace, namespace: list[str]) -> list[str]:
    return _every_page(lambda token: ns.list_namespaces(ListNamespacesRequest(id=namespace, page_token=token)))


def _every_page(page: Callable[[str | None], Any]) -> list[str]:
    """Every name of a paged listing; ``page`` answers the page after a token."""
    names: list[str] = []
    token = None
    while True:
        answer = page(token)
        names += getattr(answer, "tables", None) or getattr(answer, "namespaces", None) or []
        token = answer.page_token
        if not token:
            return names


def _view_names(parent: list[str], tables: list[list[str]]) -> dict[str, list[str]]:
    """View name -> table id. Spark's names ignore case: two tables with one name are refused."""
    views: dict[str, list[str]] = {}
    for table_id in tables:
        name = "_".join(table_id[len(parent) :])
        clash = next((other for other in views if other.lower() == name.lower()), None)
        if clash is not None:
            raise InvalidInputError(
                f"Tables {'.'.join(views[clash])} and {'.'.join(table_id)} would both be the view {name!r}: "
                "register their namespaces one at a time"
            )
        views[name] = table_id
    return views


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _lance_source(spark: Any) -> bool:
    """Whether ``format("lance")`` is available (Spark 4), registering it."""
    try:
        from lance_iceberg_ns.spark_source import register_lance_data_source
    except ImportError:  # PySpark 3.5
        return False
    register_lance_data_source(spark)
    return True
