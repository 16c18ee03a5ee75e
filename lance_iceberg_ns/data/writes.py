"""Writes: insert, merge-insert, update and delete, each one new version of the dataset.

Each function takes the dataset at its latest version, an object of its own
(``OpenDatasets.writing``), and commits through it: a dataset of a managed table was opened through
the namespace, so its commit is the catalog's compare-and-swap; pylance retries a commit that lost
a race on top of the winner.
"""

from __future__ import annotations

from datetime import timedelta

import lance
import pyarrow as pa
from lance_namespace import (
    DeleteFromTableResponse,
    InsertIntoTableResponse,
    MergeInsertIntoTableRequest,
    MergeInsertIntoTableResponse,
    UpdateTableRequest,
    UpdateTableResponse,
)
from lance_namespace.errors import InvalidInputError

from lance_iceberg_ns.config.durations import duration_seconds
from lance_iceberg_ns.data import ResolvedTable
from lance_iceberg_ns.data.datasets import dataset_exists
from lance_iceberg_ns.data.opening import OpenDatasets
from lance_iceberg_ns.errors.pylance import pylance_failures
from lance_iceberg_ns.limits import MAX_DURATION_SECONDS
from lance_iceberg_ns.request_rules import parse_mode

INSERT_MODES = ("append", "overwrite")


def insert_mode(raw: str | None) -> str:
    """``append`` (the default) or ``overwrite``, in any case. Raises InvalidInputError."""
    return parse_mode(raw, "append", INSERT_MODES, "insert_into_table")


def merge_insert_into(
    datasets: OpenDatasets, table: ResolvedTable, request: MergeInsertIntoTableRequest, data: pa.Table
) -> MergeInsertIntoTableResponse:
    """``merge_insert`` on the table's dataset; on a table declared but not written yet, whose
    rows are all unmatched, the rows to insert are its first version (as the reference does)."""
    if request.when_not_matched_insert_all and not dataset_exists(table.location, table.storage_options):
        missing = [column for column in request.on or [] if column not in data.schema.names]
        if not request.on or missing:
            raise InvalidInputError(f"merge_insert_into_table: the key columns {missing or '(on)'} are missing")
        with pylance_failures("merge_insert_into_table"):
            dataset = datasets.write_first(table, data, "overwrite")
        if dataset is not None:  # else another writer made the first version meanwhile: merge into it
            return MergeInsertIntoTableResponse(
                num_updated_rows=0, num_inserted_rows=data.num_rows, num_deleted_rows=0, version=dataset.version
            )
    with datasets.writing(table) as dataset:
        return merge_insert(dataset, request, data)


def merge_insert(
    dataset: lance.LanceDataset, request: MergeInsertIntoTableRequest, data: pa.Table
) -> MergeInsertIntoTableResponse:
    """Match ``data`` to the table's rows on ``request.on``, then update the matched rows, insert
    the unmatched ones and delete the table's rows the data lacks, as the request's clauses say.
    Raises InvalidInputError (no clause, an unknown key column, a bad filter or timeout) and
    TableSchemaValidationError (data of another schema)."""
    if not request.on:
        raise InvalidInputError("merge_insert_into_table needs the key columns to match on ('on')")
    with pylance_failures("merge_insert_into_table"):
        builder = dataset.merge_insert(list(request.on))
        if request.when_matched_update_all:
            builder = builder.when_matched_update_all(request.when_matched_update_all_filt or None)
        if request.when_not_matched_insert_all:
            builder = builder.when_not_matched_insert_all()
        if request.when_not_matched_by_source_delete:
            builder = builder.when_not_matched_by_source_delete(request.when_not_matched_by_source_delete_filt or None)
        if request.use_index is not None:
            builder = builder.use_index(request.use_index)
        if request.timeout:
            builder = builder.retry_timeout(parse_timeout(request.timeout))
        stats = builder.execute(data)
    return MergeInsertIntoTableResponse(
        num_updated_rows=int(stats.get("num_updated_rows", 0)),
        num_inserted_rows=int(stats.get("num_inserted_rows", 0)),
        num_deleted_rows=int(stats.get("num_deleted_rows", 0)),
        version=dataset.version,
    )


def parse_timeout(raw: str) -> timedelta:
    """How long a merge-insert retries its commit: a duration (``30s``, ``500ms``, ``2m`` or
    seconds; see ``config.durations``) within ``limits.MAX_DURATION_SECONDS``. Raises InvalidInputError."""
    return timedelta(seconds=duration_seconds(raw, "timeout", maximum=MAX_DURATION_SECONDS))


def update(dataset: lance.LanceDataset, request: UpdateTableRequest) -> UpdateTableResponse:
    """Set columns to SQL expressions (``updates``: [column, expression] pairs) in the rows
    matching ``predicate`` (every row without one). Raises InvalidInputError."""
    if not request.updates:
        raise InvalidInputError("update_table needs at least one [column, expression] update")
    with pylance_failures("update_table"):
        result = dataset.update(
            dict((column, expression) for column, expression in request.updates), where=request.predicate or None
        )
    return UpdateTableResponse(updated_rows=int(result["num_rows_updated"]), version=dataset.version)


def delete(dataset: lance.LanceDataset, predicate: str) -> DeleteFromTableResponse:
    """Delete the rows matching the SQL ``predicate``. Raises InvalidInputError."""
    if not predicate or not predicate.strip():
        raise InvalidInputError("delete_from_table needs a predicate (use 'true' to delete every row)")
    with pylance_failures("delete_from_table"):
        dataset.delete(predicate)
    return DeleteFromTableResponse(version=dataset.version)


def create(datasets: OpenDatasets, table: ResolvedTable, data: pa.Table, declared: bool) -> lance.LanceDataset:
    """Write ``data`` as the first version of a table a create just ``declared``, or as the next
    version of one it brought back, replacing its rows. A declared table takes inserts as soon as
    its entry is there: rows another client inserted before the create's write are kept, the
    create's rows appended to them (an overwrite would replace rows already acknowledged)."""
    with pylance_failures("create_table"):
        return datasets.write(table, data, "append" if declared else "overwrite")


def insert(datasets: OpenDatasets, table: ResolvedTable, data: pa.Table, mode: str) -> InsertIntoTableResponse:
    """Append ``data`` to the table, or replace its rows (``overwrite``), as a new version.
    Raises TableSchemaValidationError (data of another schema)."""
    with pylance_failures("insert_into_table"):
        dataset = datasets.write(table, data, mode)
    return InsertIntoTableResponse(num_inserted_rows=data.num_rows, version=dataset.version)
