"""One write to a Lance table planned on one machine and carried out on others: the driver plans it
(where, in which schema, against which version), workers write fragments with it, and one commit
publishes exactly the fragments collected. Spark's writers and the atomic commits of several
tables go through it, so a write that is never published can delete all it wrote (``discard``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
from lance_namespace import DeclareTableRequest, DescribeTableRequest, LanceNamespace
from lance_namespace.errors import (
    ConcurrentModificationError,
    InvalidInputError,
    PermissionDeniedError,
    TableNotFoundError,
)

from lance_iceberg_ns.data import datasets
from lance_iceberg_ns.errors.pylance import pylance_failures
from lance_iceberg_ns.jobs.adoption import refuse_if_written_by_location
from lance_iceberg_ns.namespace import IcebergLanceNamespace
from lance_iceberg_ns.storage import files
from lance_iceberg_ns.versions.manifests import discard_staged, forget_version_hint

WRITE_MODES = ("create", "append", "overwrite")
_DATA_DIRECTORY, _TRANSACTIONS_DIRECTORY = "data", "_transactions"  # in a Lance dataset


@dataclass(frozen=True)
class WriteResult:
    """What a write committed."""

    location: str
    version: int
    fragments: int
    rows: int


def _aligned(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A copy of the batch in freshly allocated buffers: Spark hands Arrow buffers that are only
    8-byte aligned, which Lance's decimal path does not accept (other types are written as they are)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    copy = pa.ipc.open_stream(sink.getvalue()).read_next_batch()
    return pa.RecordBatch.from_arrays([pa.concat_arrays([column]) for column in copy.columns], schema=copy.schema)


def _has_decimal(data_type: pa.DataType) -> bool:
    if pa.types.is_decimal(data_type):
        return True
    return any(_has_decimal(data_type.field(i).type) for i in range(data_type.num_fields))


def cast_columns(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """The batch in ``schema``, casting only the columns whose type differs."""
    columns = []
    for field in schema:
        column = batch.column(field.name)
        columns.append(column if column.type == field.type else pc.cast(column, field.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _to_lance_batch(batch: pa.RecordBatch, schema: pa.Schema, copy: bool) -> pa.RecordBatch:
    """The batch in the table's schema (fixed-size vectors; aligned buffers when ``copy``), as
    Lance would take it: a nullable column it lacks is all nulls. KeyError for a column it has that
    the table has not, or lacks that takes no nulls; ArrowInvalid for text into a column of another
    type (Lance refuses it, and a cast would parse it) or a value that does not fit its column."""
    if extra := [name for name in batch.schema.names if name not in schema.names]:
        raise KeyError(f"the table has no column {extra[0]!r}")  # never dropped unseen
    for field in schema:
        given = batch.schema.field(field.name) if field.name in batch.schema.names else None
        if given is None:
            if not field.nullable:
                raise KeyError(f"column {field.name!r} is missing, and it takes no nulls")
            batch = batch.append_column(field, pa.nulls(batch.num_rows, field.type))
        elif _is_text(given.type) and not _is_text(field.type):
            raise pa.ArrowInvalid(f"column {field.name!r} is {field.type}, not text")
    converted = cast_columns(batch, schema)
    return _aligned(converted) if copy else converted


def _is_text(data_type: pa.DataType) -> bool:
    return any(check(data_type) for check in (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view))


def lance_schema(spark_arrow_schema: pa.Schema, vector_columns: Mapping[str, int] | None = None) -> pa.Schema:
    """The Lance schema for a DataFrame: its Arrow schema, with ``array<float>`` columns named in
    ``vector_columns`` as fixed-size lists of that dimension (Lance's vector type)."""
    fields = []
    for field in spark_arrow_schema:
        dimension = (vector_columns or {}).get(field.name)
        if dimension is not None:
            if not pa.types.is_list(field.type):
                raise InvalidInputError(f"Vector column {field.name!r} must be an array, not {field.type}")
            field = pa.field(field.name, pa.list_(field.type.value_type, dimension), field.nullable)
        fields.append(field)
    return pa.schema(fields)


@dataclass(frozen=True)
class TableWrite:
    """One write to a Lance table, planned on the driver: where, in which schema, against which
    version. It pickles, so executors write fragments with it; the driver commits with it, or,
    when it is not to be published, discards what it wrote."""

    location: str
    storage_options: dict[str, str]
    schema_bytes: bytes
    read_version: int | None
    append: bool
    max_rows_per_file: int
    table_id: tuple[str, ...] = ()
    managed: bool = False  # the catalog manages the table's versions: commit through the namespace
    transaction_uuid: str = dataclasses.field(default_factory=lambda: str(uuid.uuid4()))  # names its transaction file

    @classmethod
    def plan(
        cls,
        ns: IcebergLanceNamespace,
        table_id: Sequence[str],
        mode: str,
        arrow_schema: pa.Schema,
        vector_columns: Mapping[str, int] | None = None,
        max_rows_per_file: int = 1024 * 1024,
    ) -> TableWrite:
        if mode not in WRITE_MODES:
            raise InvalidInputError(f"mode must be one of {WRITE_MODES}, got {mode!r}")
        schema = lance_schema(arrow_schema, vector_columns)
        if mode == "create":
            declared = ns.declare_table(DeclareTableRequest(id=list(table_id)))
            location, options, read_version = declared.location, dict(declared.storage_options or {}), None
            managed = bool(declared.managed_versioning)
        else:
            described = ns.describe_table(DescribeTableRequest(id=list(table_id)))
            location, options = described.location, dict(described.storage_options or {})
            managed = bool(described.managed_versioning)
            existing = _written_dataset(ns, table_id)
            read_version = existing.version if existing is not None else None
            if mode == "append" and existing is not None:  # cast into the table's schema (its vector types too)
                schema = existing.schema
        assert location is not None
        return cls(
            location,
            options,
            schema.serialize().to_pybytes(),
            read_version,
            mode == "append" and read_version is not None,
            max_rows_per_file,
            tuple(table_id),
            managed,
        )

    @property
    def schema(self) -> pa.Schema:
        return pa.ipc.read_schema(pa.py_buffer(self.schema_bytes))

    def write_fragments(self, batches: Iterator[pa.RecordBatch]) -> list[str]:
        """On an executor: write the batches as fragments; their metadata, as JSON. Rows that do
        not fit the table are InvalidInputError; what the batches' own source raises is raised
        as it was (Lance would report either as its own error, a Python traceback in its text)."""
        target = self.schema
        failures: list[Exception] = []
        try:
            with pylance_failures(f"Writing to table {'.'.join(self.table_id)}"):
                fragments = lance.fragment.write_fragments(
                    pa.RecordBatchReader.from_batches(
                        target, datasets.in_write_batches(self._in_schema(batches, target, failures))
                    ),
                    self.location,
                    schema=target,
                    mode=self._fragment_mode,
                    storage_options=self.storage_options or None,
                    max_rows_per_file=self.max_rows_per_file,
                )
        except Exception:
            if failures:
                raise failures[0] from None
            raise
        return [json.dumps(fragment.to_json()) for fragment in fragments]

    @property
    def _fragment_mode(self) -> str:
        """How fragments are checked against the dataset: an append's against its schema; an
        overwrite's not at all (it may change the schema); a first version's, with nothing there."""
        if self.read_version is None:
            return "create"
        return "append" if self.append else "overwrite"

    def _in_schema(
        self, batches: Iterator[pa.RecordBatch], target: pa.Schema, failures: list[Exception]
    ) -> Iterator[pa.RecordBatch]:
        """The batches in the table's schema; each failure is kept in ``failures`` as it is raised."""
        copy = any(_has_decimal(field.type) for field in target)  # only decimals need aligned buffers
        source = iter(batches)
        while True:
            try:
                batch = next(source)
            except StopIteration:
                return
            except Exception as exc:  # the source's own
                failures.append(exc)
                raise
            try:
                converted = _to_lance_batch(batch, target, copy)
            except (KeyError, pa.ArrowException) as exc:
                reason = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
                failures.append(InvalidInputError(f"Rows do not fit table {'.'.join(self.table_id)}: {reason}"))
                raise failures[-1] from None
            yield converted

    def commit(self, fragment_metadata: Iterable[str], namespace: LanceNamespace | None = None) -> WriteResult:
        """On the driver: one commit of exactly these fragments; for a table whose versions the
        catalog manages, through ``namespace`` (the catalog arbitrates the version)."""
        fragments = [lance.FragmentMetadata.from_json(metadata) for metadata in fragment_metadata]
        if self.read_version is None and datasets.dataset_exists(self.location, self.storage_options):
            raise ConcurrentModificationError(  # pylance would commit over it as the next version
                f"Table {'.'.join(self.table_id)} was written by another writer while this write created it"
            )
        operation: lance.LanceOperation.BaseOperation
        if self.append:
            operation = lance.LanceOperation.Append(fragments)
        else:
            operation = lance.LanceOperation.Overwrite(self.schema, fragments)
        through_catalog: dict[str, Any] = {}
        if self.managed:
            if namespace is None:
                raise InvalidInputError(
                    f"The catalog manages the versions of {'.'.join(self.table_id)}: commit through it"
                )
            through_catalog = {
                "namespace_client": namespace,
                "table_id": list(self.table_id),
                "namespace_client_managed_versioning": True,
            }
        try:
            dataset = lance.LanceDataset.commit(
                self.location,
                lance.Transaction(self.read_version or 0, operation, uuid=self.transaction_uuid),
                storage_options=self.storage_options or None,
                **through_catalog,
            )
        except OSError:  # pylance reports a refused managed commit as of unknown outcome: say why
            bridge = getattr(namespace, "bridge", namespace)  # an atomic commit's staging namespace asks one
            if isinstance(bridge, IcebergLanceNamespace) and self.managed:
                refuse_if_written_by_location(bridge, self.table_id)
            raise
        return WriteResult(self.location, dataset.version, len(fragments), dataset.count_rows())

    def discard(self, fragment_metadata: Iterable[str], staged_manifest: str | None = None) -> None:
        """Delete what this write wrote and will never publish: the data files of its fragments, its
        transaction file and the manifest it staged (``staged_manifest``, as the namespace was asked
        to create the version with). Every name is one it made itself, under its table's location."""
        names = [f"{_TRANSACTIONS_DIRECTORY}/{self.read_version or 0}-{self.transaction_uuid}.txn"]
        for metadata in fragment_metadata:
            for file in json.loads(metadata).get("files", []):
                path = file.get("path", "")
                if file.get("base_id") is None and _plain_name(path):
                    names.append(f"{_DATA_DIRECTORY}/{path}")
        with contextlib.suppress(OSError):  # best effort: what is left is never read (those not there are let be)
            files.delete_files(self.location, names, self.storage_options)
        if staged_manifest is not None:
            discard_staged(self.location, self.storage_options, staged_manifest)
        if self.read_version is None:  # back to declared, as it was
            self._forget_first_version()

    def _forget_first_version(self) -> None:
        """pylance, told the staged first version was made, hinted at it (``latest_version_hint.json``):
        with no manifest beside it, the hint and the directories left empty go, so that the place
        reads as declared and never written, not as a dataset whose files are missing."""
        forget_version_hint(self.location, self.storage_options)
        directories = (_DATA_DIRECTORY, _TRANSACTIONS_DIRECTORY, files.VERSIONS_DIRECTORY)
        files.remove_empty_entries(self.location, directories)  # not empty: another writer's files are there


def _written_dataset(ns: IcebergLanceNamespace, table_id: Sequence[str]) -> lance.LanceDataset | None:
    """The table's dataset; None for a table declared and never written (its location proved its
    own), whose first version the write makes. TableNotFoundError for a table that is not there."""
    try:
        return ns.dataset(list(table_id))
    except TableNotFoundError:
        try:  # a location with nothing of the entry's own is not written to
            declared = ns.resolve_table(list(table_id), proved=True)
        except PermissionDeniedError:
            raise TableNotFoundError(
                f"Table {'.'.join(table_id)} has no data, and its location is not its own"
            ) from None
        if datasets.dataset_exists(declared.location, declared.storage_options):
            raise  # written meanwhile: not a first version
        return None


def _plain_name(path: str) -> bool:
    """A file name inside ``data/`` itself, as the fragment writer names the files it writes."""
    return bool(path) and path not in (".", "..") and not any(sep in path for sep in ("/", "\\", ":"))
