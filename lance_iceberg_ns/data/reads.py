"""Reads: counting rows, queries and search, query plans and table statistics.

A ``QueryTableRequest`` becomes one pylance scanner (``query_scanner``), so a query, its plan
and its analysis are the same thing. Where the reference (``DirectoryNamespace``) answers a
caller's mistake (a bad filter, an unknown column, a search without an index) as an internal
error, these answer InvalidInput (``errors.pylance``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lance
import lance.query as fts
import numpy as np
import pyarrow as pa
from lance_namespace import GetTableStatsResponse, QueryTableRequest
from lance_namespace.errors import InvalidInputError
from lance_namespace_urllib3_client.models import FragmentStats, FragmentSummary, FtsQuery, MatchQuery

from lance_iceberg_ns.data.ipc import QueryAnswer, to_ipc_file
from lance_iceberg_ns.errors.pylance import pylance_failures
from lance_iceberg_ns.limits import FLOAT32_MAX, all_within, check_query_window, is_number, listed, plain_number

DEFAULT_VECTOR_COLUMN = "vector"  # the spec's default, as the reference: not inferred from the schema
DEFAULT_K = 10  # nearest neighbours when k is 0
# the names the reference accepts, as pylance calls them
DISTANCE_TYPES = {
    "l2": "l2",
    "euclidean": "l2",
    "cosine": "cosine",
    "dot": "dot",
    "inner_product": "dot",
    "hamming": "hamming",
}
SMALL_FRAGMENT_ROWS = 1024 * 1024  # below the compaction target, as the reference counts them


def count_rows(dataset: lance.LanceDataset, predicate: str | None = None) -> int:
    """Rows of the dataset, those matching the SQL ``predicate`` if given."""
    with pylance_failures("count_table_rows"):
        return int(dataset.count_rows(filter=predicate or None))


def query(dataset: lance.LanceDataset, request: QueryTableRequest) -> QueryAnswer:
    """The rows a query selects, as Arrow IPC file bytes (one batch) in ``data``.
    Raises InvalidInputError for a query the table cannot answer."""
    return start_query(dataset, request)()


def start_query(dataset: lance.LanceDataset, request: QueryTableRequest) -> Callable[[], QueryAnswer]:
    """The query, under way: pylance runs it on its own threads from ``to_reader`` on, so the
    caller is free until it calls what this returns, which waits for the answer (``query``)."""
    with pylance_failures("query_table"):
        rows = query_scanner(dataset, request).to_reader()

    def answer() -> QueryAnswer:
        with pylance_failures("query_table"):
            table = rows.read_all()
        return QueryAnswer(to_ipc_file(table))

    return answer


def explain(dataset: lance.LanceDataset, request: QueryTableRequest, verbose: bool = False) -> str:
    """The physical plan of a query, without running it."""
    with pylance_failures("explain_table_query_plan"):
        return str(query_scanner(dataset, request).explain_plan(verbose=verbose))


def analyze(dataset: lance.LanceDataset, request: QueryTableRequest) -> str:
    """The plan of a query, run, with its metrics."""
    with pylance_failures("analyze_table_query_plan"):
        return str(query_scanner(dataset, request).analyze_plan())


def query_scanner(dataset: lance.LanceDataset, request: QueryTableRequest) -> lance.LanceScanner:
    """The pylance scanner for a query: the reference's reading of each request field.

    A plain scan takes ``k`` as its limit (0: no limit); a vector search takes ``k`` neighbours
    (0: 10) and ``offset`` skips into them. ``multi_vector`` of two or more vectors is a batch
    search, as the spec says: up to ``k`` rows per query vector with a ``query_index`` column (the
    reference searches with the first vector only); of one vector, a search with that vector.
    """
    nearest = _nearest(request)
    check_query_window(request.k, request.offset, nearest is not None)
    options: dict[str, Any] = {
        "columns": _columns(request),
        "filter": request.filter or None,
        "prefilter": request.prefilter,
        "with_row_id": request.with_row_id or None,
        "full_text_query": _full_text_query(dataset, request),
        "offset": request.offset,
    }
    if nearest is not None:
        options["nearest"] = nearest
        options["fast_search"] = request.fast_search or None
    elif request.k > 0:
        options["limit"] = request.k
    return dataset.scanner(**{key: value for key, value in options.items() if value is not None})


def _fit_float32(values: list[float]) -> bool:
    """Finite once searched with: pylance searches in float32, where 1e39 becomes infinity."""
    within = all_within(values, -FLOAT32_MAX, FLOAT32_MAX)
    if within is None:  # not all plain ints and floats: numpy scalars or Decimals, say, from a caller in process
        return all(is_number(value) and abs(plain_number(value)) <= FLOAT32_MAX for value in values)
    return within


def query_vector(request: QueryTableRequest) -> pa.Array | list[list[float]] | None:
    """One query vector as the float32 array pylance searches with, or the vectors of a batch."""
    vector = request.vector
    if vector is None:
        return None
    single, multi = listed(vector.single_vector), listed(vector.multi_vector)
    if single and multi:
        raise InvalidInputError("Give either vector.single_vector or vector.multi_vector, not both")
    vectors = [single] if single else [listed(v) for v in multi]
    if not any(vectors):  # no vector, or only empty ones: a scan, as the reference answers it
        return None
    if not all(vectors):
        raise InvalidInputError("Every query vector needs at least one value")
    if not all(map(_fit_float32, vectors)):
        raise InvalidInputError("Query vectors must hold finite 32-bit floats (no NaN, infinity or beyond ±3.4e38)")
    if len(vectors) == 1:  # one: no batch, as the reference answers it
        return _float32_array(vectors[0])
    return vectors  # pylance takes each vector as _float32_array does


def _float32_array(values: list[float]) -> pa.Array:
    """The values as pylance takes a query vector: through float64 to float32, so that an integer
    is searched at its nearest float32, as the reference searches it (Arrow's own conversion
    refuses 2**24 + 1 and ints past int64, and wraps a numpy uint64 past 2**63 around)."""
    return pa.array(np.asarray(values, dtype=np.float64).astype(np.float32))


def _nearest(request: QueryTableRequest) -> dict[str, Any] | None:
    vector = query_vector(request)
    if vector is None:
        return None
    nearest: dict[str, Any] = {
        "column": request.vector_column or DEFAULT_VECTOR_COLUMN,
        "q": vector,
        "k": request.k or DEFAULT_K,
        "use_index": not request.bypass_vector_index,
    }
    if request.distance_type is not None:
        metric = DISTANCE_TYPES.get(request.distance_type.lower())
        if metric is None:
            raise InvalidInputError(f"Unknown distance type: {request.distance_type}")
        nearest["metric"] = metric
    if request.minimum_nprobes is not None or request.maximum_nprobes is not None:
        # the spec: nprobes is ignored when either bound is given
        if (request.minimum_nprobes or 1) > (request.maximum_nprobes or float("inf")):
            raise InvalidInputError("minimum_nprobes must not exceed maximum_nprobes")
        nearest["minimum_nprobes"] = request.minimum_nprobes
        nearest["maximum_nprobes"] = request.maximum_nprobes
    elif request.nprobes:
        nearest["nprobes"] = request.nprobes
    if request.ef is not None:
        nearest["ef"] = request.ef
    if request.refine_factor is not None:
        nearest["refine_factor"] = request.refine_factor
    if request.lower_bound is not None or request.upper_bound is not None:
        nearest["distance_range"] = (request.lower_bound, request.upper_bound)
    return {key: value for key, value in nearest.items() if value is not None}


def _columns(request: QueryTableRequest) -> list[str] | dict[str, str] | None:
    """Column names, else aliases (alias → SQL expression), as the reference prefers them."""
    columns = request.columns
    if columns is None:
        return None
    if columns.column_names:
        return list(columns.column_names)
    if columns.column_aliases:
        return dict(columns.column_aliases)
    return None


def _full_text_query(dataset: lance.LanceDataset, request: QueryTableRequest) -> Any:
    search = request.full_text_query
    if search is None:
        return None
    if search.string_query is not None:
        return {"query": search.string_query.query, "columns": search.string_query.columns or None}
    if search.structured_query is not None:
        return _structured(dataset, search.structured_query.query)
    return None


def _structured(dataset: lance.LanceDataset, query: FtsQuery) -> fts.FullTextQuery:
    """The spec's structured query as pylance's: exactly one of its kinds is set."""
    if query.match is not None:
        return _match(dataset, query.match)
    if query.phrase is not None:
        phrase = query.phrase
        column = phrase.column or _only_text_column(dataset)
        return fts.PhraseQuery(phrase.terms, column, slop=phrase.slop or 0)
    if query.multi_match is not None:
        return _multi_match(dataset, query.multi_match.match_queries)
    if query.boolean is not None:
        clauses = [(fts.Occur.MUST, _structured(dataset, one)) for one in query.boolean.must]
        clauses += [(fts.Occur.SHOULD, _structured(dataset, one)) for one in query.boolean.should]
        clauses += [(fts.Occur.MUST_NOT, _structured(dataset, one)) for one in query.boolean.must_not]
        return fts.BooleanQuery(clauses)
    if query.boost is not None:
        boost = query.boost
        negative_boost = 0.5 if boost.negative_boost is None else float(boost.negative_boost)
        positive, negative = _structured(dataset, boost.positive), _structured(dataset, boost.negative)
        return fts.BoostQuery(positive, negative, negative_boost=negative_boost)
    raise InvalidInputError("structured_query.query must set one of match, phrase, multi_match, boolean or boost")


def _operator(raw: str | None) -> fts.FullTextOperator:
    try:
        return fts.FullTextOperator[(raw or "OR").upper()]
    except KeyError:
        raise InvalidInputError(f"Invalid FTS operator: {raw!r} (AND or OR)") from None


def _match(dataset: lance.LanceDataset, match: MatchQuery) -> fts.FullTextQuery:
    return fts.MatchQuery(
        match.terms,
        match.column or _only_text_column(dataset),
        boost=1.0 if match.boost is None else float(match.boost),
        fuzziness=match.fuzziness or 0,
        max_expansions=50 if match.max_expansions is None else match.max_expansions,
        operator=_operator(match.operator),
        prefix_length=match.prefix_length or 0,
    )


def _multi_match(dataset: lance.LanceDataset, matches: list[MatchQuery]) -> fts.FullTextQuery:
    """pylance's multi-match searches one text in several columns, each with its boost."""
    if not matches:
        raise InvalidInputError("multi_match needs at least one match query")
    if len({(one.terms, (one.operator or "OR").upper()) for one in matches}) > 1:
        raise InvalidInputError("multi_match: every match query must have the same terms and operator")
    columns = [one.column or _only_text_column(dataset) for one in matches]
    boosts = [1.0 if one.boost is None else float(one.boost) for one in matches]
    return fts.MultiMatchQuery(matches[0].terms, columns, boosts=boosts, operator=_operator(matches[0].operator))


def _only_text_column(dataset: lance.LanceDataset) -> str:
    """A query without a column searches the one column with a full-text index."""
    indexed = sorted(
        {name for index in dataset.describe_indices() if index.index_type == "Inverted" for name in index.field_names}
    )
    if len(indexed) != 1:
        raise InvalidInputError(f"Name the column to search: the full-text indexed columns are {indexed}")
    return indexed[0]


def table_stats(dataset: lance.LanceDataset) -> GetTableStatsResponse:
    """Bytes on disk, rows, indices and the fragments' row counts, as the reference reports them."""
    fields: Any = dataset.stats.data_stats().fields  # a list, typed as one field in pylance's stubs
    total_bytes = sum(field.bytes_on_disk for field in fields)
    lengths = sorted(fragment.physical_rows for fragment in dataset.get_fragments())
    count = len(lengths)
    rows = sum(lengths)

    def percentile(share: float) -> int:
        return lengths[int((count - 1) * share)] if lengths else 0

    summary = FragmentSummary(
        min=percentile(0.0),
        max=lengths[-1] if lengths else 0,
        mean=rows // count if count else 0,
        p25=percentile(0.25),
        p50=percentile(0.50),
        p75=percentile(0.75),
        p99=percentile(0.99),
    )
    return GetTableStatsResponse(
        total_bytes=total_bytes,
        num_rows=rows,
        num_indices=len(dataset.describe_indices()),
        fragment_stats=FragmentStats(
            num_fragments=count,
            num_small_fragments=sum(1 for length in lengths if length < SMALL_FRAGMENT_ROWS),
            lengths=summary,
        ),
    )
