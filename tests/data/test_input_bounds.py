"""Bounds on what a client's input may make pylance build, checked before pylance sees it and
before anything is written: the bytes that view and dictionary columns reference once expanded,
the columns of a table and of a request, and the length of a literal in an expression. Each is
hit in process and through the REST server, changes nothing, and lets input just within it pass."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import lance_namespace as ln
import numpy as np
import pyarrow as pa
import pytest
import requests
from lance_namespace.errors import InvalidInputError, TableNotFoundError
from lance_namespace_urllib3_client.models import AddColumnsEntry, AlterColumnsEntry

from lance_iceberg_ns import IcebergLanceNamespace, limits
from lance_iceberg_ns.data import ipc
from lance_iceberg_ns.data.schema import column_count
from lance_iceberg_ns.server import RunningServer

from ..helpers import ipc as ipc_stream
from ..stores import Store

on_both_stores = pytest.mark.usefixtures("store")  # a test that writes: on a local disk and on S3

ROWS = pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]})
MIB = 1024 * 1024
ARROW_STREAM = {"content-type": "application/vnd.apache.arrow.stream"}
INVALID_INPUT = 13
NO_VECTOR: dict[str, Any] = {"k": 1, "vector": {}}  # a query of the rows themselves


def shared_views(rows: int, size: int, kind: pa.DataType | None = None) -> pa.Array:
    """A string_view (or binary_view) column of ``rows`` views all pointing to one shared value
    of ``size`` bytes: its body holds that value once."""
    views = np.zeros((rows, 4), dtype=np.int32)
    views[:, 0] = size  # length, then the value's first 4 bytes, its buffer and its offset there
    views[:, 1] = int.from_bytes(b"yyyy", "little", signed=True)
    buffers = [None, pa.py_buffer(views.tobytes()), pa.py_buffer(b"y" * size)]
    return pa.Array.from_buffers(kind or pa.string_view(), rows, buffers)


def one_value_dictionary(rows: int, size: int) -> pa.Array:
    """A dictionary column whose ``rows`` rows all name its one value of ``size`` bytes."""
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)), pa.array(["y" * size]))


EXPANDING: dict[str, Callable[[int, int], pa.Array]] = {
    "string_view": shared_views,
    "binary_view": lambda rows, size: shared_views(rows, size, pa.binary_view()),
    "dictionary": one_value_dictionary,
    "list_of_views": lambda rows, size: pa.ListArray.from_arrays(  # one view in each list
        pa.array(range(rows + 1), pa.int32()), shared_views(rows, size)
    ),
    "struct_of_dictionary": lambda rows, size: pa.StructArray.from_arrays([one_value_dictionary(rows, size)], ["d"]),
}


def version(ns: IcebergLanceNamespace, table_id: list[str]) -> int:
    described = ns.describe_table(ln.DescribeTableRequest(id=table_id, load_detailed_metadata=True))
    assert described.version is not None
    return int(described.version)


def query(ns: IcebergLanceNamespace, fields: dict[str, Any]) -> pa.Table:
    """The rows a query answers."""
    answer = ns.query_table(ln.QueryTableRequest.model_validate(fields))
    return pa.ipc.open_file(pa.py_buffer(answer)).read_all()


def assert_not_created(ns: IcebergLanceNamespace, table_id: list[str]) -> None:
    with pytest.raises(TableNotFoundError):
        ns.table_exists(ln.TableExistsRequest(id=table_id))


@pytest.fixture
def table(ns: IcebergLanceNamespace, db: list[str]) -> list[str]:
    """A table of three rows, ``id`` and ``v``."""
    table_id = [*db, "t"]
    ns.create_table(ln.CreateTableRequest(id=table_id), ipc_stream(ROWS))
    return table_id


# --- the bytes view and dictionary columns reference ---------------------------------------------


@pytest.mark.parametrize("kind", EXPANDING)
def test_rows_whose_views_or_dictionary_values_expand_past_the_data_bound_are_refused_naming_the_column(
    ns: IcebergLanceNamespace, db: list[str], table: list[str], store: Store, kind: str
) -> None:
    """1,000 rows naming one shared megabyte: a body of about 1 MB that references 1 GB."""
    bomb = pa.table({"id": pa.array(range(1_000)), "v": EXPANDING[kind](1_000, MIB)})
    body = ipc_stream(bomb)
    assert len(body) < 2 * MIB and ipc.materialised_size(bomb["v"].chunk(0)) > 1_000 * MIB // 2
    before, written = store.contents(store.root), version(ns, table)
    attempts = [
        lambda: ns.create_table(ln.CreateTableRequest(id=[*db, "bomb"]), body),
        lambda: ns.insert_into_table(ln.InsertIntoTableRequest(id=table), body),
        lambda: ns.merge_insert_into_table(
            ln.MergeInsertIntoTableRequest(id=table, on=["id"], when_not_matched_insert_all=True), body
        ),
    ]
    for attempt in attempts:
        with pytest.raises(limits.DataTooLargeError, match="column 'v'"):
            attempt()
    assert_not_created(ns, [*db, "bomb"])
    assert version(ns, table) == written and store.contents(store.root) == before


@on_both_stores
@pytest.mark.parametrize("kind", EXPANDING)
def test_rows_expanding_to_exactly_the_data_bound_are_written(
    ns: IcebergLanceNamespace, db: list[str], kind: str
) -> None:
    column = EXPANDING[kind](4, MIB)
    rows = pa.table({"v": column})
    expanded = ipc.materialised_size(column)
    assert 4 * MIB <= expanded < 4 * MIB + 1024  # each row counts the megabyte it names
    with limits.data_bytes_allowed(expanded - 1), pytest.raises(limits.DataTooLargeError):
        ns.create_table(ln.CreateTableRequest(id=[*db, "t"]), ipc_stream(rows))
    assert_not_created(ns, [*db, "t"])
    with limits.data_bytes_allowed(expanded):
        ns.create_table(ln.CreateTableRequest(id=[*db, "t"]), ipc_stream(rows))
    assert query(ns, {"id": [*db, "t"], **NO_VECTOR, "k": 10})["v"].to_pylist() == column.to_pylist()


def test_the_expanded_size_counts_plain_columns_as_their_buffers_and_shared_values_once_per_row() -> None:
    plain = pa.array(["abc", None, "de"] * 100)
    assert ipc.materialised_size(plain) == plain.nbytes
    inline = pa.array(["short", None, "x" * 12], pa.string_view())  # values of 12 bytes lie in their views
    assert ipc.materialised_size(inline) == 3 * 16
    assert ipc.materialised_size(shared_views(10, 100)) == 10 * (16 + 100)
    dictionary = pa.array(["aa", "b", "aa", None]).dictionary_encode()
    assert ipc.materialised_size(dictionary) == (2 + 4) * 2 + (1 + 4)  # the null row names no value
    nested = pa.DictionaryArray.from_arrays(
        pa.array([0, 0, 1, 0], pa.int8()), pa.array([["x" * 20, "y"], None], pa.list_(pa.string_view()))
    )
    assert ipc.materialised_size(nested) == 3 * ((16 + 20) + 16 + 4) + 4  # per row: its list's views, offset


def test_a_view_bomb_is_refused_before_its_shared_values_are_validated_over_and_over() -> None:
    """Validating a string_view checks the UTF-8 of every view's bytes: these 1,000,000 views of
    one shared 8 MB value would take hours; the bound refuses them first."""
    bomb = ipc_stream(pa.table({"v": shared_views(1_000_000, 8 * MIB)}))
    started = time.monotonic()
    with pytest.raises(limits.DataTooLargeError, match="column 'v'"):
        ipc.read_arrow_stream(bomb, "insert")
    assert time.monotonic() - started < 30


def test_dictionary_indices_out_of_range_are_invalid_input_not_an_index_error() -> None:
    indices = pa.array([0, 7, -3], pa.int8())
    rows = pa.table({"d": pa.DictionaryArray.from_arrays(indices, pa.array(["a"]), safe=False)})
    with pytest.raises(InvalidInputError, match="out of range"):
        ipc.read_arrow_stream(ipc_stream(rows), "insert")


# --- columns of a table and of a request -----------------------------------------------------------


def wide(columns: int) -> pa.Table:
    """One row of ``columns`` int32 columns."""
    return pa.table({f"c{index}": pa.array([index], pa.int32()) for index in range(columns)})


def wide_struct(fields: int) -> pa.Table:
    """One column: a struct of ``fields`` fields (the column and its fields count)."""
    inner = wide(fields)
    return pa.table(
        {"s": pa.StructArray.from_arrays([column.chunk(0) for column in inner.columns], inner.column_names)}
    )


def test_column_count_counts_nested_fields() -> None:
    schema = pa.schema(
        [
            ("a", pa.int32()),
            ("s", pa.struct([("x", pa.int8()), ("l", pa.list_(pa.string()))])),
            ("d", pa.dictionary(pa.int8(), pa.string())),
        ]
    )
    assert column_count(schema) == 6  # a, s, s.x, s.l, s.l.item, d


@pytest.mark.parametrize("shape", ["columns", "nested-fields"])
def test_rows_with_more_columns_than_the_bound_are_refused_before_anything_is_written(
    ns: IcebergLanceNamespace, db: list[str], table: list[str], store: Store, shape: str
) -> None:
    rows = wide(limits.MAX_COLUMNS + 1) if shape == "columns" else wide_struct(limits.MAX_COLUMNS)
    before, written = store.contents(store.root), version(ns, table)
    with pytest.raises(InvalidInputError, match=f"at most {limits.MAX_COLUMNS} columns"):
        ns.create_table(ln.CreateTableRequest(id=[*db, "wide"]), ipc_stream(rows))
    with pytest.raises(InvalidInputError, match=f"at most {limits.MAX_COLUMNS} columns"):
        ns.insert_into_table(ln.InsertIntoTableRequest(id=table), ipc_stream(rows))
    assert_not_created(ns, [*db, "wide"])
    assert version(ns, table) == written and store.contents(store.root) == before


def test_a_column_lance_refuses_for_what_its_metadata_asks_is_refused_with_lances_reason(
    ns: IcebergLanceNamespace, db: list[str]
) -> None:
    """An unenforced primary key on a column that takes nulls: Lance's reason, not its type's."""
    key = {"lance-schema:unenforced-primary-key": "true"}
    for kind in (pa.string(), pa.int64()):
        rows = pa.table({"k": pa.array(["a"] if kind == pa.string() else [1], kind), "v": [1]})
        nullable = rows.cast(pa.schema([pa.field("k", kind, metadata=key), pa.field("v", pa.int64())]))
        with pytest.raises(
            InvalidInputError, match="column 'k' is refused by Lance: Primary key column .* nullable"
        ) as refusal:
            ns.create_table(ln.CreateTableRequest(id=[*db, "keyed"]), ipc_stream(nullable))
        assert "cannot store" not in str(refusal.value) and ".rs:" not in str(refusal.value)
        assert_not_created(ns, [*db, "keyed"])
    decimal = pa.table({"d": pa.array([None], pa.decimal32(5, 2))})
    with pytest.raises(InvalidInputError, match="column 'd' has a type Lance cannot store: decimal32"):
        ns.create_table(ln.CreateTableRequest(id=[*db, "decimal"]), ipc_stream(decimal))
    dotted = pa.table({"x.y": [1]})
    with pytest.raises(InvalidInputError, match="column 'x.y' is refused by Lance: Top level field x.y cannot contain"):
        ns.create_table(ln.CreateTableRequest(id=[*db, "dotted"]), ipc_stream(dotted))
    unnamed = pa.table({"": [1], "v": [2]})  # written, then no query of the table could read it
    nested = pa.table({"s": pa.array([[{"": 1}]], pa.list_(pa.struct([pa.field("", pa.int64())])))})
    long = pa.table({"n" * (limits.MAX_LITERAL_BYTES + 1): [1]})  # 4 MiB was taken: no filter could name it
    for rows, why in (
        (unnamed, "column '' cannot be read by name: it is empty"),
        (nested, "column 's', field '', cannot be read by name: it is empty"),
        (long, f"cannot be read by name: it is over {limits.MAX_LITERAL_BYTES} bytes"),
    ):
        with pytest.raises(InvalidInputError, match=why):
            ns.create_table(ln.CreateTableRequest(id=[*db, "unnamed"]), ipc_stream(rows))
        assert_not_created(ns, [*db, "unnamed"])
    mapped = pa.table({"m": pa.array([[("a", 1)]], pa.map_(pa.string(), pa.int64()))})  # every describe failed
    with pytest.raises(InvalidInputError, match="column 'm' has a type the Lance namespace's JSON schema cannot"):
        ns.create_table(ln.CreateTableRequest(id=[*db, "mapped"]), ipc_stream(mapped))
    assert_not_created(ns, [*db, "mapped"])
    keyed = pa.schema([pa.field("k", pa.string(), nullable=False, metadata=key), pa.field("v", pa.int64())])
    ns.create_table(ln.CreateTableRequest(id=[*db, "keyed"]), ipc_stream(pa.table({"k": ["a"], "v": [1]}, keyed)))


@pytest.mark.parametrize("where", ["schema", "nested-field"])
def test_rows_whose_schema_metadata_passes_the_bound_are_refused_before_anything_is_written(
    ns: IcebergLanceNamespace, db: list[str], table: list[str], where: str
) -> None:
    """Every describe answers a table's schema whole: its metadata is bounded like any other input."""
    heavy = {b"k": b"x" * limits.MAX_SCHEMA_METADATA_BYTES}
    inner = pa.field("inner", pa.int64(), metadata=heavy if where == "nested-field" else None)
    rows = pa.table({"s": pa.array([{"inner": 1}], pa.struct([inner]))})
    if where == "schema":
        rows = rows.replace_schema_metadata(heavy)
    written = version(ns, table)
    with pytest.raises(InvalidInputError, match="schema metadata may take at most"):
        ns.create_table(ln.CreateTableRequest(id=[*db, "heavy"]), ipc_stream(rows))
    assert_not_created(ns, [*db, "heavy"])
    light = pa.table({"id": [1]}).replace_schema_metadata({b"k": b"x" * 1000})  # well within it
    ns.create_table(ln.CreateTableRequest(id=[*db, "light"]), ipc_stream(light))
    assert version(ns, table) == written


@on_both_stores
def test_a_table_of_exactly_the_bound_is_created_read_whole_and_cannot_grow_past_it(
    ns: IcebergLanceNamespace, db: list[str]
) -> None:
    table_id = [*db, "wide"]
    rows = wide(limits.MAX_COLUMNS)
    ns.create_table(ln.CreateTableRequest(id=table_id), ipc_stream(rows))
    every = query(ns, {"id": table_id, **NO_VECTOR, "columns": {"column_names": rows.column_names}})
    assert every.num_columns == limits.MAX_COLUMNS
    one_more = ln.AlterTableAddColumnsRequest(id=table_id, new_columns=[AddColumnsEntry(name="x", expression="c0")])
    written = version(ns, table_id)
    with pytest.raises(InvalidInputError, match=f"at most {limits.MAX_COLUMNS} columns"):
        ns.alter_table_add_columns(one_more)
    assert version(ns, table_id) == written
    ns.alter_table_drop_columns(ln.AlterTableDropColumnsRequest(id=table_id, columns=["c1"]))
    ns.alter_table_add_columns(one_more)  # back to exactly the bound
    described = ns.describe_table(ln.DescribeTableRequest(id=table_id, load_detailed_metadata=True))
    assert described.var_schema is not None and len(described.var_schema.fields) == limits.MAX_COLUMNS


TOO_MANY = [f"c{index}" for index in range(limits.MAX_COLUMNS + 1)]


def requests_naming_too_many_columns(table_id: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
    """For each way a request names columns: (operation, request) naming one more than the bound."""
    return {
        "drop": ("alter_table_drop_columns", {"columns": TOO_MANY}),
        "projection": ("query_table", {**NO_VECTOR, "columns": {"column_names": TOO_MANY}}),
        "aliases": ("query_table", {**NO_VECTOR, "columns": {"column_aliases": {name: "id" for name in TOO_MANY}}}),
        "alterations": (
            "alter_table_alter_columns",
            {"alterations": [AlterColumnsEntry(path=name, nullable=True).to_dict() for name in TOO_MANY]},
        ),
        "new_columns": (
            "alter_table_add_columns",
            {"new_columns": [{"name": name, "expression": "id"} for name in TOO_MANY]},
        ),
        "updates": ("update_table", {"updates": [[name, "1"] for name in TOO_MANY]}),
        "full_text_columns": (
            "query_table",
            {**NO_VECTOR, "full_text_query": {"string_query": {"query": "a", "columns": TOO_MANY}}},
        ),
    }


@pytest.mark.parametrize("way", list(requests_naming_too_many_columns(["t"])))
def test_a_request_naming_more_columns_than_the_bound_is_refused_and_changes_nothing(
    ns: IcebergLanceNamespace, table: list[str], store: Store, way: str
) -> None:
    operation, fields = requests_naming_too_many_columns(table)[way]
    before, written = store.contents(store.root), version(ns, table)
    with pytest.raises(InvalidInputError, match=f"at most {limits.MAX_COLUMNS} columns"):
        getattr(ns, operation)({"id": table, **fields})
    assert version(ns, table) == written and store.contents(store.root) == before


@on_both_stores
def test_a_merge_on_more_columns_than_the_bound_is_refused(ns: IcebergLanceNamespace, table: list[str]) -> None:
    request = ln.MergeInsertIntoTableRequest(id=table, on=TOO_MANY, when_not_matched_insert_all=True)
    with pytest.raises(InvalidInputError, match=f"at most {limits.MAX_COLUMNS} columns"):
        ns.merge_insert_into_table(request, ipc_stream(ROWS))


# --- literals in expressions -----------------------------------------------------------------------

LONG = "x" * (limits.MAX_LITERAL_BYTES + 1)
LONGEST = "x" * limits.MAX_LITERAL_BYTES
LONG_IN_BYTES = "€" * (limits.MAX_LITERAL_BYTES // 3 + 1)  # fewer characters than the bound, more bytes


@pytest.mark.parametrize(
    ("operation", "fields"),
    [
        ("update_table", {"updates": [["v", f"coalesce(v, '{LONG}')"]]}),
        ("update_table", {"updates": [["v", f"coalesce(v, '{LONG_IN_BYTES}')"]]}),
        ("update_table", {"predicate": f"v = '{LONG}'", "updates": [["v", "'u'"]]}),
        ("query_table", {**NO_VECTOR, "columns": {"column_aliases": {"big": f"arrow_cast('{LONG}', 'LargeUtf8')"}}}),
        ("query_table", {**NO_VECTOR, "filter": f"id < {'9' * (limits.MAX_LITERAL_BYTES + 1)}"}),
        ("alter_table_add_columns", {"new_columns": [{"name": "w", "expression": f"concat(v, '{LONG}')"}]}),
        ("delete_from_table", {"predicate": f"v = '{LONG}'"}),
    ],
    ids=["update", "update-utf8", "update-predicate", "projection", "number", "add-column", "delete"],
)
def test_an_expression_holding_a_literal_past_the_bound_is_refused_without_echoing_it(
    ns: IcebergLanceNamespace, table: list[str], store: Store, operation: str, fields: dict[str, Any]
) -> None:
    before, written = store.contents(store.root), version(ns, table)
    with pytest.raises(InvalidInputError, match=f"at most {limits.MAX_LITERAL_BYTES} bytes") as refused:
        getattr(ns, operation)({"id": table, **fields})
    assert (
        "xxxxxxxx" not in str(refused.value) and "€€€" not in str(refused.value) and "999999" not in str(refused.value)
    )
    assert version(ns, table) == written and store.contents(store.root) == before


@on_both_stores
def test_a_literal_of_exactly_the_bound_is_written_and_projected(ns: IcebergLanceNamespace, table: list[str]) -> None:
    ns.update_table(
        ln.UpdateTableRequest(id=table, predicate="id = 1", updates=[["v", f"coalesce(NULL, '{LONGEST}')"]])
    )
    aliases = {"id": "id", "v": "v", "big": f"arrow_cast('{LONGEST}', 'LargeUtf8')"}
    answer = query(ns, {"id": table, **NO_VECTOR, "k": 3, "columns": {"column_aliases": aliases}}).sort_by("id")
    assert answer["v"].to_pylist() == [LONGEST, "b", "c"] and answer["big"].to_pylist() == [LONGEST] * 3


# --- through the REST server -----------------------------------------------------------------------


def post(server: RunningServer, table_id: list[str], action: str, body: Any = None, data: bytes | None = None) -> Any:
    url = f"{server.uri}/v1/table/{'$'.join(table_id)}/{action}"
    if data is not None:
        return requests.post(url, data=data, headers=ARROW_STREAM, timeout=120)
    return requests.post(url, json=body if body is not None else {}, timeout=120)


def assert_refused(answer: Any, status: int, *hidden: str) -> None:
    """The spec's error body: the message, InvalidInput's code, the type and the path."""
    assert answer.status_code == status, answer.text
    error = answer.json()
    assert error["code"] == INVALID_INPUT and error["error"] and error["instance"].startswith("/v1/table/")
    assert not any(text in answer.text for text in hidden)


def test_every_bound_through_the_server_is_a_4xx_with_the_error_body_and_changes_nothing(
    server: RunningServer, db: list[str], store: Store
) -> None:
    table_id = [*db, "t"]
    assert post(server, table_id, "create", data=ipc_stream(ROWS)).status_code == 200

    def written() -> tuple[int, dict[str, str]]:
        described = post(server, table_id, "describe", {"load_detailed_metadata": True}).json()
        return described["version"], store.contents(store.root)

    before = written()
    bomb = ipc_stream(pa.table({"v": shared_views(1_000, MIB)}))
    assert_refused(post(server, [*db, "bomb"], "create", data=bomb), 413)
    assert_refused(post(server, table_id, "insert", data=bomb), 413)
    assert_refused(post(server, [*db, "wide"], "create", data=ipc_stream(wide(limits.MAX_COLUMNS + 1))), 400)
    assert_refused(post(server, table_id, "drop_columns", {"columns": TOO_MANY}), 400)
    assert_refused(post(server, table_id, "query", {**NO_VECTOR, "columns": {"column_names": TOO_MANY}}), 400)
    long_update = {"updates": [["v", f"coalesce(v, '{LONG}')"]]}
    assert_refused(post(server, table_id, "update", long_update), 400, "xxxxxxxx")
    long_alias = {**NO_VECTOR, "columns": {"column_aliases": {"big": f"arrow_cast('{LONG}', 'LargeUtf8')"}}}
    assert_refused(post(server, table_id, "query", long_alias), 400, "xxxxxxxx")
    assert written() == before
    for refused in ("bomb", "wide"):
        assert post(server, [*db, refused], "exists").status_code == 404


@on_both_stores
def test_input_just_within_every_bound_is_answered_through_the_server(server: RunningServer, db: list[str]) -> None:
    views = pa.table({"v": shared_views(4, MIB)})  # 4 MiB once expanded: within the server's data cap
    assert post(server, [*db, "views"], "create", data=ipc_stream(views)).status_code == 200
    assert post(server, [*db, "wide"], "create", data=ipc_stream(wide(limits.MAX_COLUMNS))).status_code == 200
    table_id = [*db, "t"]
    assert post(server, table_id, "create", data=ipc_stream(ROWS)).status_code == 200
    updated = post(server, table_id, "update", {"predicate": "id = 1", "updates": [["v", f"'{LONGEST}'"]]})
    assert updated.status_code == 200, updated.text
    query = {**NO_VECTOR, "k": 3, "filter": f"v = '{LONGEST}'", "columns": {"column_names": ["id"]}}
    answer = post(server, table_id, "query", query)
    assert answer.status_code == 200 and pa.ipc.open_file(pa.py_buffer(answer.content)).read_all()[
        "id"
    ].to_pylist() == [1]
