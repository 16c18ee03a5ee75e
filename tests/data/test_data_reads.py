"""Reads, search and indices: the same requests against our namespace and the reference
(pylance's ``DirectoryNamespace`` on the same data) give the same rows, in the same order, with
the same distances and scores; in process and through the REST server."""

from __future__ import annotations

import decimal
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lance
import lance.namespace
import lancedb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import requests
from lance_namespace import (
    AnalyzeTableQueryPlanRequest,
    CreateNamespaceRequest,
    CreateTableIndexRequest,
    DescribeTableIndexStatsRequest,
    DropTableIndexRequest,
    ExplainTableQueryPlanRequest,
    GetTableStatsRequest,
    LanceNamespace,
    ListTableIndicesRequest,
    QueryTableRequest,
    QueryTableResponse,
)
from lance_namespace.errors import (
    InternalError,
    InvalidInputError,
    LanceNamespaceError,
    TableColumnNotFoundError,
    TableIndexAlreadyExistsError,
    TableIndexNotFoundError,
    TableNotFoundError,
    TableVersionNotFoundError,
)
from lancedb.index import FTS
from lancedb.namespace import LanceNamespaceDBConnection

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.data.ipc import QueryAnswer
from lance_iceberg_ns.server import RunningServer

from ..stores import Store

on_each_store = pytest.mark.usefixtures("store")  # the test runs on a local disk and on S3

DIM = 8
ROWS = 300
RNG = np.random.default_rng(7)
VECTORS = RNG.random((ROWS + 20, DIM)).astype("float32")
WORDS = ["apple", "banana", "cherry", "grape", "lemon", "mango", "peach", "plum"]


def rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "text": [f"{WORDS[i % 8]} {WORDS[(i * 3) % 8]} pie number {i}" for i in ids],
            "tags": [[WORDS[i % 8], WORDS[i % 3]] for i in ids],
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(VECTORS[start : start + count].ravel()), DIM),
        }
    )


REQUEST_MODELS: dict[str, Any] = {
    "query_table": QueryTableRequest,
    "create_table_index": CreateTableIndexRequest,
    "create_table_scalar_index": CreateTableIndexRequest,
    "describe_table_index_stats": DescribeTableIndexStatsRequest,
    "drop_table_index": DropTableIndexRequest,
}


@dataclass
class Side:
    """One namespace and the id of the table it serves."""

    namespace: LanceNamespace
    table_id: list[str]

    def query(self, **fields: Any) -> pa.Table:
        answer = self.namespace.query_table(QueryTableRequest(id=self.table_id, **fields))
        assert isinstance(answer, QueryTableResponse | QueryAnswer)  # the reference's, ours
        assert isinstance(answer.data, bytes) and answer.data[:6] == b"ARROW1"  # the IPC *file* format
        reader = pa.ipc.open_file(answer.data)
        assert reader.num_record_batches == 1
        return reader.read_all()

    def failure(self, call: str, **fields: Any) -> LanceNamespaceError:
        request = REQUEST_MODELS[call](id=self.table_id, **fields)
        with pytest.raises(LanceNamespaceError) as caught:
            getattr(self.namespace, call)(request)
        return caught.value


def write_both(ours: Side, reference: Side) -> None:
    """The same two commits on both sides: 300 rows, then 20 more (version 2)."""
    for side in (ours, reference):
        lance.write_dataset(rows(0, ROWS), namespace_client=side.namespace, table_id=side.table_id)
        lance.write_dataset(rows(ROWS, 20), namespace_client=side.namespace, table_id=side.table_id, mode="append")


def index_both(ours: Side, reference: Side) -> None:
    """A vector index (IVF_FLAT: exact, so both sides find the same neighbours), a full-text index
    with positions (for phrases) and a BTREE, with the reference's default names."""
    for side in (ours, reference):
        for request in (
            CreateTableIndexRequest(id=side.table_id, column="vec", index_type="IVF_FLAT", distance_type="l2"),
            CreateTableIndexRequest(id=side.table_id, column="text", index_type="INVERTED", with_position=True),
            CreateTableIndexRequest(id=side.table_id, column="id", index_type="BTREE"),
        ):
            side.namespace.create_table_index(request)


@pytest.fixture
def reference(tmp_path: Path) -> Side:
    namespace = lance.namespace.DirectoryNamespace(root=str(tmp_path / "reference"))
    namespace.create_namespace(CreateNamespaceRequest(id=["db"]))
    return Side(namespace, ["db", "t"])


@pytest.fixture
def ours(ns: IcebergLanceNamespace, db: list[str]) -> Side:
    return Side(ns, [*db, "t"])


@pytest.fixture
def indexed(ours: Side, reference: Side) -> tuple[Side, Side]:
    write_both(ours, reference)
    index_both(ours, reference)
    return ours, reference


Q = VECTORS[3].tolist()
MATCH = {"match": {"terms": "mango", "column": "text"}}
QUERIES: dict[str, dict[str, Any]] = {
    "scan_limit": {"k": 5, "vector": {}},
    "scan_filter_columns_offset": {
        "k": 4,
        "offset": 2,
        "vector": {},
        "filter": "id % 7 = 0",
        "columns": {"column_names": ["id", "text"]},
    },
    "scan_column_aliases": {"k": 3, "vector": {}, "columns": {"column_aliases": {"double": "id * 2"}}},
    "scan_no_limit": {"k": 0, "vector": {}, "filter": "id >= 290", "columns": {"column_names": ["id"]}},
    "scan_with_row_id": {"k": 3, "vector": {}, "with_row_id": True, "columns": {"column_names": ["id"]}},
    "scan_at_version": {"k": 0, "vector": {}, "version": 1, "columns": {"column_names": ["id"]}},
    "vector": {"k": 5, "vector": {"single_vector": Q}, "vector_column": "vec"},
    "vector_default_k": {"k": 0, "vector": {"single_vector": Q}, "vector_column": "vec"},
    "vector_cosine": {"k": 5, "vector": {"single_vector": Q}, "vector_column": "vec", "distance_type": "cosine"},
    "vector_dot": {"k": 5, "vector": {"single_vector": Q}, "vector_column": "vec", "distance_type": "dot"},
    "vector_postfilter": {"k": 5, "vector": {"single_vector": Q}, "vector_column": "vec", "filter": "id % 2 = 0"},
    "vector_prefilter": {
        "k": 5,
        "vector": {"single_vector": Q},
        "vector_column": "vec",
        "filter": "id % 2 = 0",
        "prefilter": True,
    },
    "vector_offset_row_id": {
        "k": 6,
        "offset": 2,
        "vector": {"single_vector": Q},
        "vector_column": "vec",
        "with_row_id": True,
        "columns": {"column_names": ["id"]},
    },
    "vector_nprobes_refine_ef": {
        "k": 5,
        "vector": {"single_vector": Q},
        "vector_column": "vec",
        "nprobes": 1,
        "refine_factor": 2,
        "ef": 20,
    },
    "vector_probe_bounds": {
        "k": 5,
        "vector": {"single_vector": Q},
        "vector_column": "vec",
        "minimum_nprobes": 1,
        "maximum_nprobes": 2,
    },
    "vector_distance_bounds": {
        "k": 20,
        "vector": {"single_vector": Q},
        "vector_column": "vec",
        "lower_bound": 0.2,
        "upper_bound": 0.6,
    },
    "vector_bypass_index": {
        "k": 5,
        "vector": {"single_vector": Q},
        "vector_column": "vec",
        "bypass_vector_index": True,
    },
    "vector_fast_search": {"k": 30, "vector": {"single_vector": Q}, "vector_column": "vec", "fast_search": True},
    "vector_at_version": {"k": 5, "vector": {"single_vector": Q}, "vector_column": "vec", "version": 1},
    "multi_vector_of_one": {"k": 5, "vector": {"multi_vector": [Q]}, "vector_column": "vec"},
    "fts_string": {"k": 5, "vector": {}, "full_text_query": {"string_query": {"query": "mango plum"}}},
    "fts_string_columns_filter": {
        "k": 5,
        "vector": {},
        "filter": "id > 100",
        "columns": {"column_names": ["id"]},
        "prefilter": True,
        "full_text_query": {"string_query": {"query": "cherry", "columns": ["text"]}},
    },
    "fts_match": {"k": 5, "vector": {}, "full_text_query": {"structured_query": {"query": MATCH}}},
    "fts_match_and_fuzzy": {
        "k": 5,
        "vector": {},
        "full_text_query": {
            "structured_query": {
                "query": {"match": {"terms": "mangoo plum", "column": "text", "fuzziness": 1, "operator": "AND"}}
            }
        },
    },
    "fts_phrase": {
        "k": 5,
        "vector": {},
        "full_text_query": {"structured_query": {"query": {"phrase": {"terms": "banana grape", "column": "text"}}}},
    },
    "fts_boolean": {
        "k": 5,
        "vector": {},
        "full_text_query": {
            "structured_query": {
                "query": {
                    "boolean": {
                        "must": [MATCH],
                        "should": [{"match": {"terms": "peach", "column": "text"}}],
                        "must_not": [{"match": {"terms": "apple", "column": "text"}}],
                    }
                }
            }
        },
    },
    "fts_boost": {
        "k": 5,
        "vector": {},
        "full_text_query": {
            "structured_query": {
                "query": {
                    "boost": {
                        "positive": MATCH,
                        "negative": {"match": {"terms": "grape", "column": "text"}},
                        "negative_boost": 0.3,
                    }
                }
            }
        },
    },
    "fts_multi_match": {
        "k": 5,
        "vector": {},
        "full_text_query": {
            "structured_query": {"query": {"multi_match": {"match_queries": [{"terms": "plum", "column": "text"}]}}}
        },
    },
}


@on_each_store
@pytest.mark.parametrize("case", sorted(QUERIES))
def test_query_answers_the_rows_the_reference_answers(indexed: tuple[Side, Side], case: str) -> None:
    ours, reference = indexed
    expected = reference.query(**QUERIES[case])
    assert expected.num_rows > 0 or case == "vector_fast_search"
    assert ours.query(**QUERIES[case]).equals(expected)


@on_each_store
def test_query_through_the_server_answers_what_the_reference_server_answers(
    indexed: tuple[Side, Side], server: RunningServer, tmp_path: Path
) -> None:
    ours, reference = indexed
    remote = Side(lance.namespace.RestNamespace(uri=server.uri), ours.table_id)
    for case in ("scan_filter_columns_offset", "vector_prefilter", "fts_boolean", "vector_distance_bounds"):
        assert remote.query(**QUERIES[case]).equals(reference.query(**QUERIES[case])), case
    adapter = lance.namespace.RestAdapter("dir", {"root": str(tmp_path / "reference")}, host="127.0.0.1", port=0)
    adapter.start()
    try:
        body = QUERIES["vector_offset_row_id"]
        theirs = requests.post(f"http://127.0.0.1:{adapter.port}/v1/table/db$t/query", json=body, timeout=30)
        mine = requests.post(f"{server.uri}/v1/table/{'$'.join(ours.table_id)}/query", json=body, timeout=30)
    finally:
        adapter.stop()
    assert theirs.status_code == mine.status_code == 200
    assert mine.headers["content-type"] == theirs.headers["content-type"] == "application/vnd.apache.arrow.file"
    assert pa.ipc.open_file(mine.content).read_all().equals(pa.ipc.open_file(theirs.content).read_all())


@on_each_store
def test_multi_vector_is_a_batch_search_with_a_query_index(
    indexed: tuple[Side, Side], ns: IcebergLanceNamespace, store: Store
) -> None:
    """The spec's batch search (the reference searches with the first vector only): up to k rows
    per query vector, as pylance answers the same 2-D query."""
    ours, _ = indexed
    queries = [VECTORS[3].tolist(), VECTORS[200].tolist()]
    answer = ours.query(k=3, vector={"multi_vector": queries}, vector_column="vec", columns={"column_names": ["id"]})
    dataset = store.dataset(ns.describe_table({"id": ours.table_id}).location)
    expected = dataset.to_table(columns=["id"], nearest={"column": "vec", "q": queries, "k": 3})
    assert answer.equals(expected)
    assert answer.column("query_index").to_pylist() == [0, 0, 0, 1, 1, 1]
    assert answer.column("id").to_pylist()[::3] == [3, 200]


@on_each_store
def test_integer_query_vectors_are_searched_at_their_float32_values_as_the_reference_does(
    indexed: tuple[Side, Side], server: RunningServer
) -> None:
    """JSON integers in a query vector, one float32 cannot hold exactly (2**24 + 1) or ones past
    int64 (2**63, -2**63 - 1) among them, are searched at their nearest float32, as the reference
    answers; so is float32's largest value as it prints (3.4028235e38, a little past it in float64).
    In process and through the server, alone and in a batch (whose first query is the same search)."""
    ours, reference = indexed
    remote = Side(lance.namespace.RestNamespace(uri=server.uri), ours.table_id)
    fields = {"k": 4, "vector_column": "vec", "columns": {"column_names": ["id"]}}
    for first in (2**24 + 1, 2**63, -(2**63) - 1, 3.4028235e38, 3):
        vector = [first, *range(1, DIM)]
        alone = reference.query(**fields, vector={"single_vector": vector})
        assert alone.num_rows == (4 if isinstance(first, int) else 0), first  # 3.4e38 squared: no finite distance
        batch = ours.query(**fields, vector={"multi_vector": [vector, Q]})
        assert ours.query(**fields, vector={"single_vector": vector}).equals(alone), first
        assert remote.query(**fields, vector={"single_vector": vector}).equals(alone), first
        assert remote.query(**fields, vector={"multi_vector": [vector, Q]}).equals(batch), first
        assert batch.filter(pc.equal(batch["query_index"], 0)).drop_columns(["query_index"]).equals(alone), first


ERRORS: dict[str, tuple[dict[str, Any], type[LanceNamespaceError]]] = {
    "filter_does_not_parse": ({"k": 3, "vector": {}, "filter": "id >"}, InvalidInputError),
    "filter_unknown_column": ({"k": 3, "vector": {}, "filter": "nope = 1"}, InvalidInputError),
    "unknown_column": ({"k": 3, "vector": {}, "columns": {"column_names": ["nope"]}}, InvalidInputError),
    "wrong_dimension": ({"k": 3, "vector": {"single_vector": [1.0, 2.0]}, "vector_column": "vec"}, InvalidInputError),
    "unknown_vector_column": ({"k": 3, "vector": {"single_vector": Q}}, InvalidInputError),
    "unknown_distance_type": (
        {"k": 3, "vector": {"single_vector": Q}, "vector_column": "vec", "distance_type": "far"},
        InvalidInputError,
    ),
    "missing_version": ({"k": 3, "vector": {}, "version": 99}, TableVersionNotFoundError),
    "fts_unknown_column": (
        {"k": 3, "vector": {}, "full_text_query": {"string_query": {"query": "x", "columns": ["nope"]}}},
        InvalidInputError,
    ),
}


@on_each_store
@pytest.mark.parametrize("case", sorted(ERRORS))
def test_a_query_the_table_cannot_answer_is_the_callers_mistake(
    indexed: tuple[Side, Side], server: RunningServer, case: str
) -> None:
    """Our code, in process and through the server (a 4xx); the reference answers the same code,
    or an internal error where it does not tell a caller's mistake from its own."""
    ours, reference = indexed
    fields, expected = ERRORS[case]
    assert type(ours.failure("query_table", **fields)) is expected
    assert type(reference.failure("query_table", **fields)) in (expected, InternalError)
    remote = Side(lance.namespace.RestNamespace(uri=server.uri), ours.table_id)
    assert type(remote.failure("query_table", **fields)) is expected
    answer = requests.post(f"{server.uri}/v1/table/{'$'.join(ours.table_id)}/query", json=fields, timeout=30)
    assert 400 <= answer.status_code < 500 and answer.json()["code"] == expected("").code


@on_each_store
def test_full_text_search_without_an_index_is_invalid_input(ours: Side, reference: Side) -> None:
    write_both(ours, reference)
    fields = {"k": 3, "vector": {}, "full_text_query": {"string_query": {"query": "mango"}}}
    assert type(ours.failure("query_table", **fields)) is InvalidInputError
    assert type(reference.failure("query_table", **fields)) is InternalError  # the reference's own word


@on_each_store
def test_query_of_a_missing_table_is_table_not_found(ours: Side) -> None:
    assert type(ours.failure("query_table", k=1, vector={})) is TableNotFoundError


@on_each_store
def test_plans_and_stats_are_the_references(indexed: tuple[Side, Side], server: RunningServer) -> None:
    ours, reference = indexed
    remote = lance.namespace.RestNamespace(uri=server.uri)
    query = QUERIES["vector_prefilter"]
    for side in (ours, reference):
        plan = side.namespace.explain_table_query_plan(
            ExplainTableQueryPlanRequest(id=side.table_id, query=QueryTableRequest(**query))
        )
        assert "KNNVectorDistance" in plan or "ANNSubIndex" in plan
        analyzed = side.namespace.analyze_table_query_plan(AnalyzeTableQueryPlanRequest(id=side.table_id, **query))
        assert analyzed.startswith("AnalyzeExec") and "output_rows=5" in analyzed
    remote_plan = remote.explain_table_query_plan(
        ExplainTableQueryPlanRequest(id=ours.table_id, query=QueryTableRequest(**QUERIES["scan_limit"]))
    )
    assert remote_plan.startswith("LanceRead") and "range_before=Some(0..5)" in remote_plan
    theirs = reference.namespace.get_table_stats(GetTableStatsRequest(id=reference.table_id))
    mine = ours.namespace.get_table_stats(GetTableStatsRequest(id=ours.table_id))
    assert mine == theirs
    assert (mine.num_rows, mine.num_indices, mine.fragment_stats.num_fragments) == (ROWS + 20, 3, 2)
    remote_stats = remote.get_table_stats(GetTableStatsRequest(id=ours.table_id))
    assert remote_stats.model_copy(update={"context": None}) == theirs


def comparable(listing: Any) -> list[dict[str, Any]]:
    """An index listing without what differs from table to table (uuids, times, sizes)."""
    ignored = {"index_uuid", "created_at", "size_bytes", "index_details"}
    return [
        {**{k: v for k, v in index.to_dict().items() if k not in ignored}, "details": json.loads(index.index_details)}
        for index in listing.indexes
    ]


@on_each_store
def test_indices_are_listed_paged_described_and_dropped_as_the_reference_does(
    indexed: tuple[Side, Side], server: RunningServer
) -> None:
    ours, reference = indexed
    remote = Side(lance.namespace.RestNamespace(uri=server.uri), ours.table_id)
    for side in (ours, remote):
        listing = side.namespace.list_table_indices(ListTableIndicesRequest(id=side.table_id))
        theirs = reference.namespace.list_table_indices(ListTableIndicesRequest(id=reference.table_id))
        assert comparable(listing) == comparable(theirs)
        assert [index.index_name for index in listing.indexes] == ["id_idx", "text_idx", "vec_idx"]
        first = side.namespace.list_table_indices(ListTableIndicesRequest(id=side.table_id, limit=2))
        assert [index.index_name for index in first.indexes] == [
            "id_idx",
            "text_idx",
        ] and first.page_token == "text_idx"
        rest = side.namespace.list_table_indices(
            ListTableIndicesRequest(id=side.table_id, limit=2, page_token="text_idx")
        )
        assert [index.index_name for index in rest.indexes] == ["vec_idx"] and rest.page_token is None
        for name in ("id_idx", "text_idx", "vec_idx"):
            mine = side.namespace.describe_table_index_stats(
                DescribeTableIndexStatsRequest(id=side.table_id, index_name=name)
            )
            expected = reference.namespace.describe_table_index_stats(
                DescribeTableIndexStatsRequest(id=reference.table_id, index_name=name)
            )
            assert (mine.index_type, mine.num_indexed_rows, mine.num_unindexed_rows, mine.num_indices) == (
                expected.index_type,
                expected.num_indexed_rows,
                expected.num_unindexed_rows,
                expected.num_indices,
            )
        vec_stats = side.namespace.describe_table_index_stats(
            DescribeTableIndexStatsRequest(id=side.table_id, index_name="vec_idx")
        )
        assert vec_stats.distance_type == "l2"  # the reference leaves it out
    for side in (ours, remote, reference):
        assert type(side.failure("describe_table_index_stats", index_name="nope")) is TableIndexNotFoundError
        assert type(side.failure("drop_table_index", index_name="nope")) is TableIndexNotFoundError
    dropped = remote.namespace.drop_table_index(DropTableIndexRequest(id=ours.table_id, index_name="id_idx"))
    assert dropped.transaction_id
    names = [index.index_name for index in ours.namespace.list_table_indices({"id": ours.table_id}).indexes]
    assert names == ["text_idx", "vec_idx"]
    assert type(ours.failure("drop_table_index", index_name="id_idx")) is TableIndexNotFoundError


INDEX_ERRORS: dict[str, tuple[dict[str, Any], type[LanceNamespaceError]]] = {
    "already_exists": ({"column": "id", "index_type": "BTREE"}, TableIndexAlreadyExistsError),
    "unknown_column": ({"column": "nope", "index_type": "BTREE"}, TableColumnNotFoundError),
    "unknown_column_full_text": ({"column": "nope", "index_type": "FTS"}, TableColumnNotFoundError),
    "unknown_type": ({"column": "id", "index_type": "WHAT"}, InvalidInputError),
    "vector_type_on_scalar_column": ({"column": "id", "index_type": "IVF_FLAT", "name": "x"}, InvalidInputError),
    "sub_vectors_not_dividing": (
        {"column": "vec", "index_type": "IVF_PQ", "name": "pq", "num_partitions": 2, "num_sub_vectors": 3},
        InvalidInputError,
    ),
    "unknown_distance_type": ({"column": "vec", "index_type": "IVF_FLAT", "distance_type": "far"}, InvalidInputError),
}


@on_each_store
@pytest.mark.parametrize("case", sorted(INDEX_ERRORS))
def test_an_index_the_table_cannot_have_answers_the_references_code(
    indexed: tuple[Side, Side], server: RunningServer, case: str
) -> None:
    ours, reference = indexed
    fields, expected = INDEX_ERRORS[case]
    remote = Side(lance.namespace.RestNamespace(uri=server.uri), ours.table_id)
    assert type(ours.failure("create_table_index", **fields)) is expected
    assert type(remote.failure("create_table_index", **fields)) is expected
    assert type(reference.failure("create_table_index", **fields)) in (expected, InternalError)


@on_each_store
def test_scalar_index_operation_takes_scalar_types_only(ours: Side, reference: Side) -> None:
    write_both(ours, reference)
    for side in (ours, reference):
        failure = side.failure("create_table_scalar_index", column="vec", index_type="IVF_FLAT")
        assert type(failure) is InvalidInputError
        created = side.namespace.create_table_scalar_index(
            CreateTableIndexRequest(id=side.table_id, column="tags", index_type="LABEL_LIST", name="tags")
        )
        assert created.transaction_id
    assert ours.query(k=0, vector={}, filter="array_has_any(tags, ['lemon'])").equals(
        reference.query(k=0, vector={}, filter="array_has_any(tags, ['lemon'])")
    )


@on_each_store
@pytest.mark.parametrize(
    ("index", "built"),
    [
        (
            {"index_type": "IVF_PQ", "num_partitions": 2, "num_sub_vectors": 2, "num_bits": 8, "max_iterations": 10},
            {"num_sub_vectors": 2, "nbits": 8},
        ),
        (
            {"index_type": "IVF_HNSW_SQ", "num_partitions": 2, "m": 8, "ef_construction": 40, "sample_rate": 64},
            {"m": 8, "ef_construction": 40, "num_partitions": 2},
        ),
        (
            {"index_type": "IVF_HNSW_PQ", "num_partitions": 1, "num_sub_vectors": 4, "distance_type": "cosine"},
            {"num_partitions": 1, "metric_type": "cosine"},
        ),
        ({"index_type": "IVF_HNSW_FLAT", "target_partition_size": 400, "m": 12}, {"num_partitions": 1, "m": 12}),
    ],
)
@on_each_store
def test_vector_indices_are_built_with_the_requested_parameters_and_searched(
    ours: Side, store: Store, index: dict[str, Any], built: dict[str, Any]
) -> None:
    lance.write_dataset(rows(0, ROWS), namespace_client=ours.namespace, table_id=ours.table_id)
    ours.namespace.create_table_index(CreateTableIndexRequest(id=ours.table_id, column="vec", **index))
    stats = ours.namespace.describe_table_index_stats({"id": ours.table_id, "index_name": "vec_idx"})
    assert stats.index_type == index["index_type"] and stats.num_indexed_rows == ROWS
    assert stats.distance_type == index.get("distance_type", "l2")
    dataset = store.dataset(ours.namespace.describe_table({"id": ours.table_id}).location)
    segment = dataset.stats.index_stats("vec_idx")["segments"][0]
    found_parameters = {**segment["sub_index"], **segment["sub_index"].get("params", {}), **segment}
    assert {key: found_parameters[key] for key in built} == built
    search = {"k": 3, "vector": {"single_vector": VECTORS[9].tolist()}, "vector_column": "vec"}
    found = ours.query(**search, nprobes=2, ef=50)
    assert found.num_rows == 3 and 9 in found.column("id").to_pylist()
    plan = ours.namespace.explain_table_query_plan({"id": ours.table_id, "query": search})
    assert "ANNSubIndex" in plan


@on_each_store
def test_full_text_index_takes_the_tokenizer_options(ours: Side, reference: Side) -> None:
    write_both(ours, reference)
    options = {"base_tokenizer": "whitespace", "lower_case": False, "stem": False, "remove_stop_words": False}
    for side in (ours, reference):
        side.namespace.create_table_scalar_index(
            CreateTableIndexRequest(id=side.table_id, column="text", index_type="FTS", **options)
        )
    search = {"k": 0, "vector": {}, "full_text_query": {"string_query": {"query": "Mango"}}}
    assert ours.query(**search).num_rows == 0  # not lower-cased: no "Mango" in the text
    details = ours.namespace.list_table_indices({"id": ours.table_id}).indexes[0].index_details
    assert '"base_tokenizer":"whitespace"' in details and '"lower_case":false' in details


LANCEDB_SEARCHES: dict[str, Any] = {
    "vector": lambda table: table.search(VECTORS[3].tolist(), vector_column_name="vec").limit(4).select(["id"]),
    "vector_prefilter": lambda table: (
        table.search(VECTORS[3].tolist(), vector_column_name="vec").where("id > 50", prefilter=True).limit(4)
    ),
    "vector_postfilter_cosine": lambda table: (
        table.search(VECTORS[3].tolist(), vector_column_name="vec")
        .distance_type("cosine")
        .where("id % 2 = 0", prefilter=False)
        .limit(6)
        .select(["id", "text"])
    ),
    "scan": lambda table: table.search().where("id < 5").select(["id", "text"]),
}


def lancedb_full_text_search(table: Any) -> Any:
    return table.search("mango", query_type="fts").limit(5).select(["id"])


@on_each_store
def test_lancedb_pushes_queries_through_the_server_and_finds_what_it_finds_locally(
    endpoint: str, store: Store, db: list[str], server: RunningServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in store.credentials_environment().items():  # a client of the server brings its own
        monkeypatch.setenv(name, value)
    local = lancedb.connect_namespace("iceberg", {"endpoint": endpoint, "root": store.root, **store.properties})
    table = local.create_table("t", rows(0, ROWS), namespace_path=db)
    table.create_index("text", config=FTS())
    pushed = lancedb.connect_namespace(
        "rest", {"uri": server.uri}, namespace_client_pushdown_operations=["QueryTable"]
    ).open_table("t", namespace_path=db)
    for name, search in LANCEDB_SEARCHES.items():
        expected = search(table).to_arrow()
        assert expected.num_rows > 0, name
        assert search(pushed).to_arrow().equals(expected), name
    # lancedb sends a full-text search as the Rust debug text of its query ("Match(MatchQuery {
    # ...") in string_query: not what it finds locally, but what the reference server answers too
    adapter = lance.namespace.RestAdapter("dir", {"root": str(tmp_path / "reference")}, host="127.0.0.1", port=0)
    adapter.start()
    try:
        uri = f"http://127.0.0.1:{adapter.port}"
        lancedb.connect_namespace("rest", {"uri": uri}).create_table("t", rows(0, ROWS)).create_index(
            "text", config=FTS()
        )
        theirs = lancedb.connect_namespace("rest", {"uri": uri}, namespace_client_pushdown_operations=["QueryTable"])
        full_text = lancedb_full_text_search(theirs.open_table("t")).to_arrow()
    finally:
        adapter.stop()
    assert lancedb_full_text_search(pushed).to_arrow().equals(full_text)
    assert not full_text.equals(lancedb_full_text_search(table).to_arrow())


@on_each_store
def test_lancedb_in_process_pushdown_finds_what_it_finds_locally(
    ns: IcebergLanceNamespace, db: list[str], reference: Side
) -> None:
    """lancedb's in-process pushdown reads ``query_table``'s answer as bytes: ours is the Arrow IPC
    bytes themselves (carrying the ``data`` of a QueryTableResponse); the reference's model is not
    bytes, so lancedb cannot read it (a deliberate difference, see the docs)."""
    lance.write_dataset(rows(0, ROWS), namespace_client=ns, table_id=[*db, "t"])
    local = LanceNamespaceDBConnection(ns).open_table("t", namespace_path=db)
    pushed = LanceNamespaceDBConnection(ns, namespace_client_pushdown_operations=["QueryTable"]).open_table(
        "t", namespace_path=db
    )
    for name, search in LANCEDB_SEARCHES.items():
        expected = search(local).to_arrow()
        assert expected.num_rows > 0, name
        assert search(pushed).to_arrow().equals(expected), name
    lance.write_dataset(rows(0, 20), namespace_client=reference.namespace, table_id=reference.table_id)
    theirs = LanceNamespaceDBConnection(reference.namespace, namespace_client_pushdown_operations=["QueryTable"])
    with pytest.raises(TypeError, match="bytes-like"):
        theirs.open_table(reference.table_id[-1], namespace_path=reference.table_id[:-1]).search().limit(3).to_arrow()


@on_each_store
def test_duckdb_attaches_a_namespace_and_scans_and_searches_what_pylance_finds(
    ours: Side, server: RunningServer, duckdb_with_lance: Any, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in store.credentials_environment().items():  # a client of the server brings its own
        monkeypatch.setenv(name, value)
    lance.write_dataset(rows(0, ROWS), namespace_client=ours.namespace, table_id=ours.table_id)
    ours.namespace.create_table_index(CreateTableIndexRequest(id=ours.table_id, column="text", index_type="INVERTED"))
    duck = duckdb_with_lance
    namespace = "$".join(ours.table_id[:-1])
    duck.execute(f"ATTACH '{namespace}' AS n (TYPE LANCE, ENDPOINT '{server.uri}')")
    dataset = lance.dataset(namespace_client=ours.namespace, table_id=ours.table_id)

    assert duck.execute("SELECT table_name FROM information_schema.tables WHERE table_catalog = 'n'").fetchall() == [
        ("t",)
    ]
    scanned = duck.execute("SELECT id, text FROM n.main.t WHERE id % 7 = 0 ORDER BY id").fetchall()
    expected = dataset.to_table(columns=["id", "text"], filter="id % 7 = 0")
    assert scanned == list(zip(*expected.to_pydict().values(), strict=True))

    query = "[" + ",".join(map(str, VECTORS[3].tolist())) + "]::FLOAT[8]"
    found = duck.execute(
        f"SELECT id, _distance FROM lance_vector_search('n.main.t', 'vec', {query}, k := 5) ORDER BY _distance"
    ).fetchall()
    nearest = dataset.to_table(columns=["id"], nearest={"column": "vec", "q": VECTORS[3], "k": 5})
    assert [row[0] for row in found] == nearest.column("id").to_pylist()
    assert [row[1] for row in found] == pytest.approx(nearest.column("_distance").to_pylist(), abs=1e-5)

    scored = duck.execute(
        "SELECT id, _score FROM lance_fts('n.main.t', 'text', 'mango', k := 6) ORDER BY _score DESC, id"
    ).fetchall()
    searched = dataset.to_table(columns=["id"], full_text_query="mango", limit=6).to_pylist()
    assert scored == sorted(((row["id"], row["_score"]) for row in searched), key=lambda row: (-row[1], row[0]))


def test_query_vectors_of_numpy_scalars_or_bools_are_searched_in_process() -> None:
    """A request built in process may hold numpy scalars (a float subclass or not), bools or
    Decimals in its vector: they are checked value by value, as before the plain-number fast path."""
    from lance_namespace import QueryTableRequest

    from lance_iceberg_ns.data.reads import query_vector

    request = QueryTableRequest(id=["wh", "db", "t"], vector={"single_vector": [0.5, 0.25]}, k=1)
    vector: list[Any] = request.vector.single_vector  # type: ignore[union-attr,assignment]
    for values in (
        [np.float32(0.25), np.float32(0.5)],
        [np.float64(0.25), 1],
        [True, 0.5],
        [np.uint64(2**64 - 1), 0],
        [decimal.Decimal("0.25"), decimal.Decimal(3)],
    ):
        vector[:] = values  # edited in place, past the model's validation
        assert query_vector(request).to_pylist() == [float(value) for value in values]  # type: ignore[union-attr]
    for values in ([np.float32("nan")], [np.float64(1e39)], [np.float64("-inf"), 1.0], [decimal.Decimal("NaN")]):
        vector[:] = values
        with pytest.raises(InvalidInputError, match="finite 32-bit floats"):
            query_vector(request)


@on_each_store
def test_query_vectors_given_as_numpy_arrays_in_process_are_searched_or_refused_by_type(
    indexed: tuple[Side, Side],
) -> None:
    """A request built in process past validation (``model_construct``) may hold numpy arrays where
    the model has lists: searched as the lists are, and a bad one refused with InvalidInputError,
    never numpy's "truth value of an array is ambiguous"."""
    from lance_namespace_urllib3_client.models import QueryTableRequestVector

    ours, _ = indexed
    fields = {"k": 3, "vector_column": "vec", "columns": {"column_names": ["id"]}}

    def constructed(**vector: Any) -> pa.Table:
        validated = QueryTableRequest(id=ours.table_id, vector={}, **fields)
        request = validated.model_copy(update={"vector": QueryTableRequestVector.model_construct(**vector)})
        return pa.ipc.open_file(ours.namespace.query_table(request).data).read_all()

    one, two = VECTORS[3], VECTORS[[3, 200]]
    assert constructed(single_vector=one).equals(ours.query(vector={"single_vector": one.tolist()}, **fields))
    assert constructed(multi_vector=two).equals(ours.query(vector={"multi_vector": two.tolist()}, **fields))
    for vector, refused in (
        ({"single_vector": one, "multi_vector": two}, "not both"),
        ({"single_vector": np.full(DIM, np.nan)}, "must be a number between"),  # as the same list is
        ({"multi_vector": np.vstack([one, np.full(DIM, np.inf)])}, "must be a number between"),
    ):
        with pytest.raises(InvalidInputError, match=refused):
            constructed(**vector)
