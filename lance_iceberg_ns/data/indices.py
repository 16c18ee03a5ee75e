"""Indices: create (vector, scalar, full-text), list, describe, drop.

The index types and their names are those the reference (``DirectoryNamespace``) accepts. Unlike
the reference, which builds every index with default parameters, the request's parameters
(partitions, sub-vectors, bits, HNSW's ``m`` and ``ef_construction``, the tokenizer's options)
are honoured.
"""

from __future__ import annotations

import json
import re
from typing import Any

import lance
import pyarrow as pa
from lance_namespace import (
    CreateTableIndexRequest,
    CreateTableIndexResponse,
    DescribeTableIndexStatsResponse,
    DropTableIndexResponse,
    ListTableIndicesResponse,
)
from lance_namespace.errors import InvalidInputError, TableColumnNotFoundError, TableIndexNotFoundError
from lance_namespace_urllib3_client.models import IndexContent

from lance_iceberg_ns.errors.pylance import pylance_failures
from lance_iceberg_ns.paging import page_of

# The reference's names of each index type → pylance's.
SCALAR_TYPES = {
    "SCALAR": "BTREE",
    "BTREE": "BTREE",
    "BITMAP": "BITMAP",
    "LABEL_LIST": "LABEL_LIST",
    "LABELLIST": "LABEL_LIST",
    "INVERTED": "INVERTED",
    "FTS": "INVERTED",
    "NGRAM": "NGRAM",
    "ZONEMAP": "ZONEMAP",
    "ZONE_MAP": "ZONEMAP",
    "BLOOMFILTER": "BLOOMFILTER",
    "BLOOM_FILTER": "BLOOMFILTER",
    "RTREE": "RTREE",
    "R_TREE": "RTREE",
}
VECTOR_TYPES = {
    "VECTOR": "IVF_PQ",
    "IVF_PQ": "IVF_PQ",
    "IVF_FLAT": "IVF_FLAT",
    "IVF_SQ": "IVF_SQ",
    "IVF_RQ": "IVF_RQ",
    "IVF_HNSW_FLAT": "IVF_HNSW_FLAT",
    "IVF_HNSW_SQ": "IVF_HNSW_SQ",
    "IVF_HNSW_PQ": "IVF_HNSW_PQ",
}
# An index name is a segment of the paths that address it (``/v1/table/{id}/index/{name}/stats``)
MAX_INDEX_NAME_BYTES = 255
_NOT_IN_A_PATH_SEGMENT = re.compile(r"[/\\\x00-\x1f\x7f-\x9f\ud800-\udfff]")
METRICS = ("l2", "cosine", "dot", "hamming")
# CreateTableIndexRequest's tokenizer fields, passed as they are to an INVERTED index
TOKENIZER_FIELDS = (
    "with_position",
    "base_tokenizer",
    "language",
    "max_token_length",
    "lower_case",
    "stem",
    "remove_stop_words",
    "ascii_folding",
)
# CreateTableIndexRequest's fields → pylance's create_index arguments
VECTOR_FIELDS = {
    "num_partitions": "num_partitions",
    "num_sub_vectors": "num_sub_vectors",
    "num_bits": "num_bits",
    "sample_rate": "sample_rate",
    "max_iterations": "max_iters",
    "target_partition_size": "target_partition_size",
    "m": "m",
    "ef_construction": "ef_construction",
}


def create(
    dataset: lance.LanceDataset, request: CreateTableIndexRequest, scalar_only: bool = False
) -> CreateTableIndexResponse:
    """Build the index a request describes (named ``<column>_idx`` by default) and commit it.
    Raises InvalidInputError (an unknown type or parameter, a vector type where only scalar ones
    are allowed), TableColumnNotFoundError, TableIndexAlreadyExistsError."""
    raw_type = request.index_type.strip().upper()
    if raw_type not in SCALAR_TYPES and raw_type not in VECTOR_TYPES:
        raise InvalidInputError(f"Unsupported index_type '{request.index_type}'")
    if scalar_only and raw_type not in SCALAR_TYPES:
        raise InvalidInputError(f"create_table_scalar_index only supports scalar index types, got {request.index_type}")
    name = index_name(request.name or f"{request.column}_idx", given=bool(request.name))
    with pylance_failures("create_table_index"):
        if raw_type in SCALAR_TYPES:
            index_type: Any = SCALAR_TYPES[raw_type]  # one of pylance's literal names
            if index_type == "INVERTED" and not _has_column(dataset.schema, request.column):
                raise TableColumnNotFoundError(f"Column {request.column[:100]!r} not found in schema")
            options = _fields(request, TOKENIZER_FIELDS) if index_type == "INVERTED" else {}
            dataset.create_scalar_index(request.column, index_type, name=name, replace=False, **options)
        else:
            options = {VECTOR_FIELDS[field]: value for field, value in _fields(request, VECTOR_FIELDS).items()}
            metric = _metric(request.distance_type)
            dataset.create_index(request.column, VECTOR_TYPES[raw_type], name=name, metric=metric, **options)
    return CreateTableIndexResponse(transaction_id=_transaction_id(dataset))


def index_name(name: str, given: bool = True) -> str:
    """``name`` when an index can be called so: one that the routes naming an index (its stats, its
    drop) can address, a single path segment, once it is percent-encoded. InvalidInputError, before
    anything is built, otherwise (``given``: the request named it, else it is the column's)."""
    why = None
    if not name:
        why = "it is empty"
    elif _NOT_IN_A_PATH_SEGMENT.search(name):
        why = "it may not hold '/', '\\', control characters or lone surrogates"
    elif len(name.encode()) > MAX_INDEX_NAME_BYTES:
        why = f"it takes more than {MAX_INDEX_NAME_BYTES} bytes (UTF-8)"
    elif name == "." or ".." in name:
        why = "it may not be '.' or hold '..'"
    if why is None:
        return name
    hint = "" if given else " (it is the column's name and '_idx': give the index a name)"
    raise InvalidInputError(f"Index name {name[:40]!r}: {why}{hint}")


def _has_column(schema: pa.Schema, path: str) -> bool:
    """Whether ``path`` names a column, or a field of a struct column (``a.b``). pylance's own
    answer for a full-text index on a column that is not there reads as a bad search."""
    if path in schema.names:
        return True
    fields: Any = schema
    for part in path.split("."):
        index = fields.get_field_index(part) if fields is not None else -1
        if index < 0:
            return False
        found = fields.field(index).type
        fields = found if pa.types.is_struct(found) else None
    return True


def _fields(request: CreateTableIndexRequest, names: Any) -> dict[str, Any]:
    return {name: getattr(request, name) for name in names if getattr(request, name) is not None}


def _metric(distance_type: str | None) -> str:
    metric = (distance_type or "l2").lower()
    if metric not in METRICS:
        raise InvalidInputError(f"Unsupported distance_type '{distance_type}' for vector index")
    return metric


def _transaction_id(dataset: lance.LanceDataset) -> str | None:
    """The id of the commit that made the dataset's version (pylance commits in place)."""
    transaction = dataset.read_transaction(dataset.version)
    return None if transaction is None else str(transaction.uuid)


def list_indices(dataset: lance.LanceDataset, page_token: str | None, limit: int | None) -> ListTableIndicesResponse:
    """The table's indices by name, a page of ``limit`` after the name ``page_token``; the next
    page's token is the last name of a full page, as the reference pages them."""
    described, next_token = page_of(dataset.describe_indices(), lambda index: index.name, page_token or None, limit)
    return ListTableIndicesResponse(
        indexes=[_index_content(dataset, index) for index in described], page_token=next_token
    )


def _index_content(dataset: lance.LanceDataset, index: Any) -> IndexContent:
    stats = dataset.stats.index_stats(index.name)
    segment = index.segments[0]
    return IndexContent(
        index_name=index.name,
        index_uuid=segment.uuid,
        columns=list(index.field_names),
        status="SUCCEEDED",  # an index in the manifest is built and committed
        index_type=stats.get("index_type"),
        type_url=index.type_url,
        num_indexed_rows=stats.get("num_indexed_rows"),
        num_unindexed_rows=stats.get("num_unindexed_rows"),
        size_bytes=index.total_size_bytes,
        num_segments=len(index.segments),
        created_at=segment.created_at,
        index_version=segment.index_version,
        index_details=json.dumps(index.details, separators=(",", ":")),
    )


def stats(dataset: lance.LanceDataset, name: str | None) -> DescribeTableIndexStatsResponse:
    """Rows indexed and not yet indexed, the index type and (for a vector index) its distance
    type. Raises TableIndexNotFoundError."""
    found = _index_stats(dataset, name)
    segments = found.get("segments") or [{}]
    return DescribeTableIndexStatsResponse(
        index_type=found.get("index_type"),
        distance_type=found.get("distance_type") or segments[0].get("metric_type"),
        num_indexed_rows=found.get("num_indexed_rows"),
        num_unindexed_rows=found.get("num_unindexed_rows"),
        num_indices=found.get("num_indices"),
    )


def _index_stats(dataset: lance.LanceDataset, name: str | None) -> dict[str, Any]:
    return dict(dataset.stats.index_stats(_existing(dataset, name)))


def _existing(dataset: lance.LanceDataset, name: str | None) -> str:
    """The name of an index the dataset has; TableIndexNotFoundError otherwise."""
    if not name or name not in {index.name for index in dataset.describe_indices()}:
        raise TableIndexNotFoundError(f"Index '{name}' not found")
    return name


def drop(dataset: lance.LanceDataset, name: str | None) -> DropTableIndexResponse:
    """Drop an index and commit; raises TableIndexNotFoundError."""
    with pylance_failures("drop_table_index"):
        dataset.drop_index(_existing(dataset, name))
    return DropTableIndexResponse(transaction_id=_transaction_id(dataset))
