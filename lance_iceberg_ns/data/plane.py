"""The data plane: every operation on a table's rows, schema, indices and tags.

It meets the catalog at one seam, ``resolve`` (a table id → the live table as the catalog says it
is now: ``ResolvedTable``), opens datasets only through ``OpenDatasets``, and hands each dataset
and request to the module that owns the operation. It never imports pyiceberg.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from contextlib import contextmanager
from typing import TypeVar

import lance
from lance_namespace import (
    AlterTableAddColumnsRequest,
    AlterTableAddColumnsResponse,
    AlterTableAlterColumnsRequest,
    AlterTableAlterColumnsResponse,
    AlterTableDropColumnsRequest,
    AlterTableDropColumnsResponse,
    AnalyzeTableQueryPlanRequest,
    CountTableRowsRequest,
    CountTableRowsResponse,
    CreateTableBranchRequest,
    CreateTableBranchResponse,
    CreateTableIndexRequest,
    CreateTableIndexResponse,
    CreateTableScalarIndexResponse,
    CreateTableTagRequest,
    CreateTableTagResponse,
    DeleteFromTableRequest,
    DeleteFromTableResponse,
    DeleteTableBranchRequest,
    DeleteTableBranchResponse,
    DeleteTableTagRequest,
    DeleteTableTagResponse,
    DescribeTableIndexStatsRequest,
    DescribeTableIndexStatsResponse,
    DropTableIndexRequest,
    DropTableIndexResponse,
    ExplainTableQueryPlanRequest,
    GetTableStatsRequest,
    GetTableStatsResponse,
    GetTableTagVersionRequest,
    GetTableTagVersionResponse,
    InsertIntoTableRequest,
    InsertIntoTableResponse,
    ListTableBranchesRequest,
    ListTableBranchesResponse,
    ListTableIndicesRequest,
    ListTableIndicesResponse,
    ListTableTagsRequest,
    ListTableTagsResponse,
    MergeInsertIntoTableRequest,
    MergeInsertIntoTableResponse,
    QueryTableRequest,
    UpdateTableRequest,
    UpdateTableResponse,
    UpdateTableSchemaMetadataRequest,
    UpdateTableSchemaMetadataResponse,
    UpdateTableTagRequest,
    UpdateTableTagResponse,
)
from lance_namespace.errors import (
    ConcurrentModificationError,
    InvalidInputError,
    PermissionDeniedError,
    ServiceUnavailableError,
    UnsupportedOperationError,
)

from lance_iceberg_ns.data import ResolvedTable, datasets, indices, ipc, reads, schema, tags, writes
from lance_iceberg_ns.data.ipc import QueryAnswer
from lance_iceberg_ns.data.opening import OpenDatasets
from lance_iceberg_ns.data.outcomes import refusal_of
from lance_iceberg_ns.errors.pylance import unknown_commit
from lance_iceberg_ns.identifiers import parse_table_id
from lance_iceberg_ns.request_rules import refuse_branch, refuse_branches
from lance_iceberg_ns.storage import files

T = TypeVar("T")
INDICES = "Index changes"  # refused on a branch until they are written there
Resolve = Callable[[Sequence[str], bool], ResolvedTable]  # (table id, writing) → the live table


class DataPlane:
    """The data operations of one bridge, on the tables ``resolve`` finds."""

    def __init__(self, resolve: Resolve, datasets: OpenDatasets, lookups: Callable[[], Executor]) -> None:
        self._resolve = resolve
        self._datasets = datasets
        self._lookups = lookups

    # --- the seam -----------------------------------------------------------------------------

    def dataset(self, table_id: Sequence[str], version: datasets.Version = None) -> lance.LanceDataset:
        """The live table's dataset (at ``version``), for reading, through the one opener: an
        object of its own, since a caller's write through it would swap its state under the
        bridge's reads (``OpenDatasets.writing``)."""
        return copy.copy(self._datasets.open(self._resolve(table_id, False), version, reading=True))

    def _read(
        self, table_id: Sequence[str], read: Callable[[lance.LanceDataset], T], version: datasets.Version = None
    ) -> T:
        """``read`` on a live table's dataset (at ``version``), while the catalog confirms where
        the table is (``OpenDatasets.read``)."""
        key = tuple(table_id)
        start = lambda dataset: functools.partial(read, dataset)  # noqa: E731  (run by this thread)
        return self._datasets.read(key, lambda: self._resolve(key, False), start, version, self._lookups())

    def _read_started(
        self,
        table_id: Sequence[str],
        start: Callable[[lance.LanceDataset], Callable[[], T]],
        version: datasets.Version = None,
    ) -> T:
        """A read that pylance runs on its own threads once ``start`` has begun it: the catalog
        confirms where the table is on this thread meanwhile, with no other thread to wake."""
        key = tuple(table_id)
        return self._datasets.read(key, lambda: self._resolve(key, False), start, version, None)

    def _writable(self, table_id: Sequence[str], branch: str | None = None, what: str = "Writes") -> ResolvedTable:
        """A table for an operation that commits a version: resolved and shown to own its
        location; writes go to the main branch (another is UnsupportedOperationError, naming ``what``)."""
        refuse_branch(branch, what)
        return self._resolve_to_write(table_id)

    def _resolve_to_write(self, table_id: Sequence[str]) -> ResolvedTable:
        """The table resolved and shown to own its location (PermissionDeniedError); a location
        with nothing left at it (its directory deleted) is TableNotFoundError instead."""
        try:
            return self._resolve(table_id, True)
        except PermissionDeniedError:
            table = self._resolve(table_id, False)
            if files.is_empty_directory(table.location, table.storage_options):
                name = f"Table {'.'.join(table.id)}"
                raise datasets.missing_dataset_error(table.location, table.storage_options, name) from None
            raise

    @contextmanager
    def _to_write(
        self, table_id: Sequence[str], branch: str | None = None, what: str = "Writes"
    ) -> Iterator[lance.LanceDataset]:
        """The dataset of a table an operation commits to (``_writable``), the operation's own
        (``OpenDatasets.writing``)."""
        with self._datasets.writing(self._writable(table_id, branch, what)) as dataset:
            yield dataset

    @contextmanager
    def _committing(self, table_id: Sequence[str]) -> Iterator[None]:
        """A commit refused by the catalog reaches here as a conflict, or as of unknown outcome
        (ServiceUnavailableError: pylance refused commits it cannot read back as such, whatever the
        refusal). One this process refused without the catalog taking it is that refusal (a
        conflict may be retried, bad input may not); one that may have landed, or is not known
        here, stays ServiceUnavailableError: the client must look before it writes again. A
        conflict is asked again: a writer by location that moved the dataset ahead of the catalog
        is InvalidTableStateError naming the way out."""
        try:
            yield
        except (ConcurrentModificationError, ServiceUnavailableError) as exc:
            version = unknown_commit(exc)
            refusal = refusal_of(parse_table_id(table_id).parts, version) if version is not None else None
            if version is not None and refusal is None:
                raise
            if isinstance(refusal, UnsupportedOperationError):  # the table stopped being managed under the write
                raise ConcurrentModificationError(f"The table changed under the write ({refusal}): retry") from exc
            if refusal is not None and not isinstance(refusal, ConcurrentModificationError):
                raise copy.copy(refusal) from exc
            self._resolve(tuple(table_id), True)  # a write by location found here is InvalidTableState
            if refusal is not None:
                raise copy.copy(refusal) from exc
            raise

    @contextmanager
    def _refs_of(
        self, table_id: Sequence[str], branch: str | None, what: str, branches: bool = False
    ) -> Iterator[lance.LanceDataset]:
        """The dataset whose tags or branches an operation changes, the operation's own: resolved
        as for a write (refs live in the dataset's own files); branches are refused on a managed
        table, whose versions the catalog keeps in one line."""
        table = self._resolve_to_write(table_id)
        if table.managed and branches:  # whatever the branch's name, ``main`` included
            refuse_branches(what)
        if table.managed:
            refuse_branch(branch, what)
        with self._datasets.writing(table) as dataset:
            yield dataset

    # --- writes -------------------------------------------------------------------------------

    def insert_into_table(self, request: InsertIntoTableRequest, request_data: bytes | None) -> InsertIntoTableResponse:
        table = self._writable(request.id or [], request.branch)
        mode = writes.insert_mode(request.mode)
        data = ipc.read_arrow_stream(request_data, "insert_into_table")
        with self._committing(table.id):
            return writes.insert(self._datasets, table, data, mode)

    def merge_insert_into_table(
        self, request: MergeInsertIntoTableRequest, request_data: bytes | None
    ) -> MergeInsertIntoTableResponse:
        table = self._writable(request.id or [], request.branch)
        data = ipc.read_arrow_stream(request_data, "merge_insert_into_table")
        with self._committing(table.id):
            return writes.merge_insert_into(self._datasets, table, request, data)

    def update_table(self, request: UpdateTableRequest) -> UpdateTableResponse:
        with self._committing(request.id or []), self._to_write(request.id or [], request.branch) as dataset:
            return writes.update(dataset, request)

    def delete_from_table(self, request: DeleteFromTableRequest) -> DeleteFromTableResponse:
        with self._committing(request.id or []), self._to_write(request.id or [], request.branch) as dataset:
            return writes.delete(dataset, request.predicate)

    # --- tags and branches --------------------------------------------------------------------

    def list_table_tags(self, request: ListTableTagsRequest) -> ListTableTagsResponse:
        return self._read(request.id or [], lambda dataset: tags.list_tags(dataset, request.page_token, request.limit))

    def get_table_tag_version(self, request: GetTableTagVersionRequest) -> GetTableTagVersionResponse:
        return self._read(request.id or [], lambda dataset: tags.tag_version(dataset, request.tag))

    def create_table_tag(self, request: CreateTableTagRequest) -> CreateTableTagResponse:
        with self._refs_of(request.id or [], request.branch, "create_table_tag") as dataset:
            tags.create_tag(dataset, request.tag, request.version, request.branch)
        return CreateTableTagResponse()

    def update_table_tag(self, request: UpdateTableTagRequest) -> UpdateTableTagResponse:
        with self._refs_of(request.id or [], request.branch, "update_table_tag") as dataset:
            tags.update_tag(dataset, request.tag, request.version, request.branch)
        return UpdateTableTagResponse()

    def delete_table_tag(self, request: DeleteTableTagRequest) -> DeleteTableTagResponse:
        with self._refs_of(request.id or [], None, "delete_table_tag") as dataset:
            tags.delete_tag(dataset, request.tag)
        return DeleteTableTagResponse()

    def list_table_branches(self, request: ListTableBranchesRequest) -> ListTableBranchesResponse:
        page_token, limit = request.page_token, request.limit
        return self._read(request.id or [], lambda dataset: tags.list_branches(dataset, page_token, limit))

    def create_table_branch(self, request: CreateTableBranchRequest) -> CreateTableBranchResponse:
        with self._refs_of(request.id or [], None, "create_table_branch", branches=True) as dataset:
            tags.create_branch(dataset, request.name, request.from_branch, request.from_version)
        return CreateTableBranchResponse()

    def delete_table_branch(self, request: DeleteTableBranchRequest) -> DeleteTableBranchResponse:
        with self._refs_of(request.id or [], None, "delete_table_branch", branches=True) as dataset:
            tags.delete_branch(dataset, request.name)
        return DeleteTableBranchResponse()

    # --- schema -------------------------------------------------------------------------------

    def alter_table_add_columns(self, request: AlterTableAddColumnsRequest) -> AlterTableAddColumnsResponse:
        with self._to_write(request.id or [], request.branch) as dataset, self._committing(request.id or []):
            return AlterTableAddColumnsResponse(version=schema.add_columns(dataset, request.new_columns))

    def alter_table_alter_columns(self, request: AlterTableAlterColumnsRequest) -> AlterTableAlterColumnsResponse:
        with self._to_write(request.id or [], request.branch) as dataset, self._committing(request.id or []):
            return AlterTableAlterColumnsResponse(version=schema.alter_columns(dataset, request.alterations))

    def alter_table_drop_columns(self, request: AlterTableDropColumnsRequest) -> AlterTableDropColumnsResponse:
        with self._to_write(request.id or [], request.branch) as dataset, self._committing(request.id or []):
            return AlterTableDropColumnsResponse(version=schema.drop_columns(dataset, request.columns))

    def update_table_schema_metadata(
        self, request: UpdateTableSchemaMetadataRequest
    ) -> UpdateTableSchemaMetadataResponse:
        with self._to_write(request.id or [], request.branch) as dataset:
            return UpdateTableSchemaMetadataResponse(
                metadata=schema.update_schema_metadata(dataset, request.metadata or {})
            )

    # --- reads and search ---------------------------------------------------------------------

    def count_table_rows(self, request: CountTableRowsRequest) -> CountTableRowsResponse:
        version = datasets.version_on(request.branch, request.version)
        count = self._read(request.id or [], lambda dataset: reads.count_rows(dataset, request.predicate), version)
        return CountTableRowsResponse(count=count)

    def query_table(self, request: QueryTableRequest) -> QueryAnswer:
        start = lambda dataset: reads.start_query(dataset, request)  # noqa: E731
        return self._read_started(request.id or [], start, datasets.version_on(request.branch, request.version))

    def explain_table_query_plan(self, request: ExplainTableQueryPlanRequest) -> str:
        query, verbose = request.query, bool(request.verbose)
        version = datasets.version_on(_one_branch(request.branch, query.branch), query.version)
        return self._read(request.id or [], lambda dataset: reads.explain(dataset, query, verbose), version)

    def analyze_table_query_plan(self, request: AnalyzeTableQueryPlanRequest) -> str:
        query = QueryTableRequest.model_validate(request.model_dump(exclude={"id"}))
        version = datasets.version_on(request.branch, request.version)
        return self._read(request.id or [], lambda dataset: reads.analyze(dataset, query), version)

    def get_table_stats(self, request: GetTableStatsRequest) -> GetTableStatsResponse:
        return self._read(request.id or [], reads.table_stats, datasets.version_on(request.branch, None))

    # --- indices ------------------------------------------------------------------------------

    def create_table_index(self, request: CreateTableIndexRequest) -> CreateTableIndexResponse:
        with self._committing(request.id or []), self._to_write(request.id or [], request.branch, INDICES) as dataset:
            return indices.create(dataset, request)

    def create_table_scalar_index(self, request: CreateTableIndexRequest) -> CreateTableScalarIndexResponse:
        with self._committing(request.id or []), self._to_write(request.id or [], request.branch, INDICES) as dataset:
            created = indices.create(dataset, request, scalar_only=True)
        return CreateTableScalarIndexResponse(transaction_id=created.transaction_id)

    def list_table_indices(self, request: ListTableIndicesRequest) -> ListTableIndicesResponse:
        page_token, limit = request.page_token, request.limit
        version = datasets.version_on(request.branch, request.version)
        return self._read(request.id or [], lambda dataset: indices.list_indices(dataset, page_token, limit), version)

    def describe_table_index_stats(self, request: DescribeTableIndexStatsRequest) -> DescribeTableIndexStatsResponse:
        version = datasets.version_on(request.branch, request.version)
        return self._read(request.id or [], lambda dataset: indices.stats(dataset, request.index_name), version)

    def drop_table_index(self, request: DropTableIndexRequest) -> DropTableIndexResponse:
        with self._committing(request.id or []), self._to_write(request.id or [], request.branch, INDICES) as dataset:
            return indices.drop(dataset, request.index_name)


def _one_branch(request_branch: str | None, query_branch: str | None) -> str | None:
    """The branch a query plan is asked for: the request's and its query's must not differ."""
    if request_branch and query_branch and request_branch != query_branch:
        raise InvalidInputError(f"The request names branch {request_branch[:40]!r}, its query {query_branch[:40]!r}")
    return request_branch or query_branch
