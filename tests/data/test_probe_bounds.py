"""Bounds a probing client found missing: schema metadata that grows update after update, regular
expressions that compile past the regex engine's limit, and index names no route can address.
Each is refused as InvalidInput before anything is written, in process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance_namespace as ln
import pyarrow as pa
import pytest
from lance_namespace.errors import InvalidInputError

from lance_iceberg_ns import IcebergLanceNamespace, limits
from lance_iceberg_ns.data.schema import metadata_bytes

from ..helpers import ipc as ipc_stream

ROWS = pa.table({"id": [1, 2, 3], "s": ["a", "aa", "b"]})
KB = 1024
UPDATE = [["id", "0"]]
# Compiled, each passes the regex engine's 10 MiB: DataFusion answered an internal error for them
TOO_BIG_REGEXES = ("regexp_like(s, 'a{1000}{1000}')", "regexp_replace(s, 'a{100}{100}{100}', 'b') = 'x'")


@pytest.fixture
def table(ns: IcebergLanceNamespace, db: list[str]) -> list[str]:
    """A table of three rows, ``id`` and ``s``."""
    table_id = [*db, "t"]
    ns.create_table(ln.CreateTableRequest(id=table_id), ipc_stream(ROWS))
    return table_id


def described(ns: IcebergLanceNamespace, table_id: list[str]) -> tuple[int, dict[str, str]]:
    """The table's version and its schema's metadata."""
    answer = ns.describe_table(ln.DescribeTableRequest(id=table_id, load_detailed_metadata=True))
    assert answer.version is not None and answer.var_schema is not None
    return int(answer.version), dict(answer.var_schema.metadata or {})


def files_under(root: Path) -> dict[str, int]:
    return {str(path.relative_to(root)): path.stat().st_size for path in root.rglob("*") if path.is_file()}


# --- schema metadata -----------------------------------------------------------------------------


def keys(first: int, count: int, size: int = 8 * KB) -> dict[str, str]:
    """``count`` keys from ``k<first>`` on, each of a value of ``size`` bytes."""
    return {f"k{index:04}": "x" * size for index in range(first, first + count)}


def update_metadata(ns: IcebergLanceNamespace, table_id: list[str], metadata: dict[str, str]) -> dict[str, str]:
    request = ln.UpdateTableSchemaMetadataRequest(id=table_id, metadata=metadata)
    return dict(ns.update_table_schema_metadata(request).metadata or {})


def test_schema_metadata_cannot_grow_past_the_bound_through_updates(
    ns: IcebergLanceNamespace, table: list[str], lance_root: Path
) -> None:
    """Updates of 100 keys of 8 KB each: those that keep the whole within 1 MiB are written, the
    one that would pass it is refused and changes nothing."""
    update_metadata(ns, table, keys(0, 100))
    update_metadata(ns, table, keys(100, 27))  # 127 × (5 + 8,192) bytes in all
    version, metadata = described(ns, table)
    assert len(metadata) == 127
    assert sum(len(key) + len(value) for key, value in metadata.items()) <= limits.MAX_SCHEMA_METADATA_BYTES
    files = files_under(lance_root)
    with pytest.raises(InvalidInputError, match=f"at most {limits.MAX_SCHEMA_METADATA_BYTES} bytes"):
        update_metadata(ns, table, keys(127, 100))
    with pytest.raises(InvalidInputError, match=f"at most {limits.MAX_SCHEMA_METADATA_BYTES} bytes"):
        update_metadata(ns, table, keys(127, 1))  # one key more is past it too: 128 × 8,197 > 1 MiB
    assert described(ns, table) == (version, metadata)
    assert files_under(lance_root) == files


def test_a_key_replaced_counts_its_new_value_not_both(ns: IcebergLanceNamespace, table: list[str]) -> None:
    """The bound is on the metadata the table would have: a value replaced in place does not add up."""
    half = limits.MAX_SCHEMA_METADATA_BYTES // 2
    update_metadata(ns, table, {"big": "x" * half})
    after = update_metadata(ns, table, {"big": "y" * half})  # 2 × half in all, were both counted
    assert after == {"big": "y" * half}
    assert update_metadata(ns, table, {"other": "z" * (half - 100)})["other"] == "z" * (half - 100)
    with pytest.raises(InvalidInputError, match="would take"):
        update_metadata(ns, table, {"third": "w" * 200})


def test_metadata_bytes_counts_the_schemas_and_every_fields() -> None:
    inner = pa.field("inner", pa.int64(), metadata={b"ab": b"cde"})
    schema = pa.schema([pa.field("s", pa.struct([inner]), metadata={b"f": b"g"})], metadata={b"k": b"vv"})
    assert metadata_bytes(schema) == 3 + 5 + 2


# --- regular expressions the regex engine will not compile -------------------------------------------


@pytest.mark.parametrize("predicate", TOO_BIG_REGEXES)
def test_a_regex_compiled_past_the_engines_limit_is_invalid_input_wherever_a_filter_is_taken(
    ns: IcebergLanceNamespace, table: list[str], lance_root: Path, predicate: str
) -> None:
    version = described(ns, table)[0]
    files = files_under(lance_root)

    def merge(**clauses: Any) -> Any:
        request = ln.MergeInsertIntoTableRequest(id=table, on=["id"], **clauses)
        return ns.merge_insert_into_table(request, ipc_stream(pa.table({"id": [9], "s": ["z"]})))  # none matched

    refused: list[tuple[str, Callable[[], Any]]] = [
        ("count_table_rows", lambda: ns.count_table_rows(ln.CountTableRowsRequest(id=table, predicate=predicate))),
        ("delete_from_table", lambda: ns.delete_from_table(ln.DeleteFromTableRequest(id=table, predicate=predicate))),
        ("update_table", lambda: ns.update_table(ln.UpdateTableRequest(id=table, predicate=predicate, updates=UPDATE))),
        ("query_table", lambda: ns.query_table(ln.QueryTableRequest(id=table, k=10, vector={}, filter=predicate))),
        (
            "merge_insert_into_table",
            lambda: merge(when_not_matched_by_source_delete=True, when_not_matched_by_source_delete_filt=predicate),
        ),
    ]
    for operation, attempt in refused:
        with pytest.raises(InvalidInputError, match="(?i)regular expression did not compile|compiled regex") as error:
            attempt()
        assert str(error.value).startswith(operation) and "bug in DataFusion" not in str(error.value)
    assert described(ns, table)[0] == version
    assert files_under(lance_root) == files
    within = ln.CountTableRowsRequest(id=table, predicate="regexp_like(s, '^a+$')")
    assert ns.count_table_rows(within).count == 2


# --- index names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["../../x\n", "a/b", "a\\b", "tab\there", "..", ".", "x..y", "\x7f", "é" * 128],
)
def test_an_index_name_no_route_can_address_is_refused_before_anything_is_built(
    ns: IcebergLanceNamespace, table: list[str], name: str
) -> None:
    version = described(ns, table)[0]
    for create in (ns.create_table_scalar_index, ns.create_table_index):
        with pytest.raises(InvalidInputError, match="Index name"):
            create(ln.CreateTableIndexRequest(id=table, column="id", index_type="BTREE", name=name))
    assert ns.list_table_indices(ln.ListTableIndicesRequest(id=table)).indexes == []
    assert described(ns, table)[0] == version


def test_index_names_of_every_other_kind_are_built_described_and_dropped(
    ns: IcebergLanceNamespace, table: list[str]
) -> None:
    """The default name (the column's and ``_idx``), a name at the length bound, names with spaces,
    dots and letters outside ASCII: each is listed, described and dropped by its name."""
    names = [None, "x" * 255, "my index", "v1.2", "índice_ü"]
    for name in names:
        request = ln.CreateTableIndexRequest(id=table, column="id", index_type="BTREE", name=name)
        ns.create_table_scalar_index(request)
        shown = name or "id_idx"
        listed = ns.list_table_indices(ln.ListTableIndicesRequest(id=table)).indexes
        assert [index.index_name for index in listed] == [shown]
        stats = ns.describe_table_index_stats(ln.DescribeTableIndexStatsRequest(id=table, index_name=shown))
        assert stats.num_indexed_rows == 3
        ns.drop_table_index(ln.DropTableIndexRequest(id=table, index_name=shown))
