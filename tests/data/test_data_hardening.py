"""What a careless or hostile client of the data plane met: every mistake a 4xx that changes
nothing, tables declared but never written, another process's commits to a managed table, and an
entry made in the catalog at another table's location."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
import requests
from lance_namespace.errors import InvalidInputError, PermissionDeniedError, TableNotFoundError
from lance_namespace_urllib3_client.models import AddColumnsEntry
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.server import RunningServer

from ..helpers import ipc, other_client, write_values

VECTORS = pa.FixedSizeListArray.from_arrays(pa.array([float(i % 7) for i in range(40)], pa.float32()), 4)
TABLE = pa.table({"id": list(range(10)), "vector": VECTORS, "text": [f"row {i}" for i in range(10)]})


def answer(ns: IcebergLanceNamespace, query: dict[str, Any]) -> pa.Table:
    return pa.ipc.open_file(ns.query_table(query).data).read_all()


@pytest.fixture
def table_id(ns: IcebergLanceNamespace, db: list[str]) -> list[str]:
    table_id = [*db, "t"]
    ns.create_table({"id": table_id}, ipc(TABLE))
    return table_id


def test_queries_out_of_bounds_or_without_a_usable_vector_are_refused(
    ns: IcebergLanceNamespace, table_id: list[str]
) -> None:
    scan = answer(ns, {"id": table_id, "k": 0, "vector": {}})
    assert answer(ns, {"id": table_id, "k": 0, "vector": {"multi_vector": [[]]}}).equals(scan)  # no vector: a scan
    refused = [
        {"k": 3, "vector": {"multi_vector": [[1.0, 2.0, 3.0, 4.0], []]}},
        {"k": 3, "vector": {"single_vector": [math.nan, 1.0, 2.0, 3.0]}},
        {"k": 3, "vector": {"single_vector": [math.inf, 1.0, 2.0, 3.0]}},
        {"k": 3, "vector": {"single_vector": [1e39, 1.0, 2.0, 3.0]}},  # infinity once in float32
        {"k": 3, "vector": {"multi_vector": [[1.0, 2.0, 3.0, 4.0], [-1e39, 1.0, 2.0, 3.0]]}},
        {"k": 2**31, "vector": {}},
        {"k": 1, "offset": 2**40, "vector": {}},
        {"k": 2**31 - 1, "vector": {"single_vector": [1.0, 2.0, 3.0, 4.0]}},  # would reserve 16 GiB and abort
        {"k": 999_999, "offset": 2, "vector": {"single_vector": [1.0, 2.0, 3.0, 4.0]}},
    ]
    for query in refused:
        with pytest.raises(InvalidInputError):
            ns.query_table({"id": table_id, **query})
    assert (
        answer(ns, {"id": table_id, "k": 1_000_000, "vector": {"single_vector": [1.0, 2.0, 3.0, 4.0]}}).num_rows == 10
    )


def test_expressions_that_fail_on_the_rows_and_bad_schemas_are_4xx_and_change_nothing(
    ns: IcebergLanceNamespace, db: list[str], table_id: list[str]
) -> None:
    version = ns.describe_table({"id": table_id}).version
    failing = [
        lambda: ns.count_table_rows({"id": table_id, "predicate": "cast(text as bigint) = 1"}),
        lambda: ns.delete_from_table({"id": table_id, "predicate": "cast(text as bigint) = 1"}),
        lambda: ns.update_table({"id": table_id, "updates": [["id", "id / 0"]]}),
        lambda: ns.alter_table_add_columns(
            {"id": table_id, "new_columns": [AddColumnsEntry(name="", expression="id")]}
        ),
        lambda: ns.alter_table_add_columns(
            {
                "id": table_id,
                "new_columns": [AddColumnsEntry(name="z", expression="id"), AddColumnsEntry(name="z", expression="2")],
            }
        ),
        lambda: ns.insert_into_table({"id": table_id, "mode": "overwrite"}, ipc(_twin_columns())),
    ]
    for expression in (  # expressions DataFusion does not run there: they were 500s
        "arrow_cast(id, 'FixedSizeList(4, Int8)')",
        "arrow_cast(text, 'Struct(a Int8)')",
        "sum(id)",
        "array_agg(id)",
        "unnest(make_array(1, 2))",
    ):
        failing += [
            lambda e=expression: ns.alter_table_add_columns(
                {"id": table_id, "new_columns": [AddColumnsEntry(name="z", expression=e)]}
            ),
            lambda e=expression: ns.delete_from_table({"id": table_id, "predicate": f"{e} is null and id < 0"}),
            lambda e=expression: ns.count_table_rows({"id": table_id, "predicate": f"{e} is null"}),
        ]
    failing.append(  # a window, which a filter takes
        lambda: ns.alter_table_add_columns(
            {"id": table_id, "new_columns": [AddColumnsEntry(name="z", expression="row_number() over ()")]}
        )
    )
    for step in failing:
        with pytest.raises(InvalidInputError):
            step()
    assert ns.describe_table({"id": table_id}).version == version
    assert "z" not in lance.dataset(namespace_client=ns, table_id=table_id).schema.names
    for data in (_twin_columns(), pa.table({})):
        with pytest.raises(InvalidInputError):
            ns.create_table({"id": [*db, "other"]}, ipc(data))
        with pytest.raises(TableNotFoundError):
            ns.describe_table({"id": [*db, "other"]})


@pytest.mark.parametrize(
    "name",
    ["_rowid", "_rowaddr", "_row_created_at_version", "", "a.b", "n" * 4097],
    ids=["_rowid", "_rowaddr", "_row_created_at_version", "empty", "dotted", "over 4 KiB"],
)
def test_a_column_is_never_renamed_or_added_to_a_name_lance_takes_or_cannot_read(
    ns: IcebergLanceNamespace, table_id: list[str], name: str
) -> None:
    """Renamed ``_rowid``, a column made every query of the table a panic in pylance (500); renamed
    ``""``, a table no query could read. Refused as bad input, and the table is as it was."""
    version = ns.describe_table({"id": table_id}).version
    with pytest.raises(InvalidInputError, match="cannot name a column"):
        ns.alter_table_alter_columns({"id": table_id, "alterations": [{"path": "text", "rename": name}]})
    with pytest.raises(InvalidInputError, match="cannot name a column"):
        ns.alter_table_add_columns({"id": table_id, "new_columns": [AddColumnsEntry(name=name, expression="id")]})
    assert ns.describe_table({"id": table_id}).version == version
    assert answer(ns, {"id": table_id, "k": 3, "vector": {}}).column_names == ["id", "vector", "text"]


def test_text_that_is_no_json_in_a_json_column_is_refused_as_bad_input(
    ns: IcebergLanceNamespace, db: list[str]
) -> None:
    """A column that says it holds JSON (Arrow's ``arrow.json`` extension) and holds other text was
    a 500 on create, insert and merge; it is bad input, and nothing is made or written."""
    field = pa.field("doc", pa.string(), metadata={"ARROW:extension:name": "arrow.json"})
    good, bad = (pa.table({"doc": pa.array([text])}, schema=pa.schema([field])) for text in ('{"a": 1}', "not json"))
    with pytest.raises(InvalidInputError, match="Invalid argument error"):
        ns.create_table({"id": [*db, "made"]}, ipc(bad))
    with pytest.raises(TableNotFoundError):
        ns.describe_table({"id": [*db, "made"]})
    ns.create_table({"id": [*db, "docs"]}, ipc(good))
    with pytest.raises(InvalidInputError, match="Invalid argument error"):
        ns.insert_into_table({"id": [*db, "docs"]}, ipc(bad))
    assert ns.count_table_rows({"id": [*db, "docs"]}).count == 1


def _twin_columns() -> pa.Table:
    return pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])


def test_a_declared_table_has_nothing_to_read_until_its_first_write(
    ns: IcebergLanceNamespace, db: list[str], server: RunningServer
) -> None:
    declared = [*db, "declared"]
    ns.declare_table({"id": declared})
    for read in (
        lambda: ns.count_table_rows({"id": declared}),
        lambda: ns.query_table({"id": declared, "k": 5, "vector": {}}),
        lambda: ns.get_table_stats({"id": declared}),
        lambda: ns.list_table_indices({"id": declared}),
        lambda: ns.delete_from_table({"id": declared, "predicate": "true"}),
    ):
        with pytest.raises(TableNotFoundError, match="declared but has no data yet"):
            read()
    http = requests.post(f"{server.uri}/v1/table/{'$'.join(declared)}/count_rows", json={}, timeout=30)
    assert (http.status_code, http.json()["code"]) == (404, 4)
    # a merge-insert finds every row unmatched: they are the first version, as the reference writes them
    merged = ns.merge_insert_into_table({"id": declared, "on": ["id"], "when_not_matched_insert_all": True}, ipc(TABLE))
    assert (merged.num_inserted_rows, merged.version) == (10, 1)
    assert ns.count_table_rows({"id": declared}).count == 10


def test_reads_of_a_managed_table_see_another_process_commit_at_once(
    endpoint: str, lance_root: Path, db: list[str]
) -> None:
    """A commit made here answers pylance's next describe for a moment (``commit_cache_seconds``);
    a read must still see what another process committed since."""
    settings = {"endpoint": endpoint, "root": str(lance_root), "table_version_management": "true"}
    table_id = [*db, "managed"]
    with IcebergLanceNamespace(**settings) as here, IcebergLanceNamespace(**settings) as there:
        write_values(here, table_id, [1, 2, 3])
        assert here.count_table_rows({"id": table_id}).count == 3
        write_values(there, table_id, [4, 5], mode="append")
        assert here.count_table_rows({"id": table_id}).count == 5
        assert answer(here, {"id": table_id, "k": 0, "vector": {}}).num_rows == 5


def test_an_entry_made_at_another_table_location_reads_nothing_of_it(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, warehouse: str
) -> None:
    victim = [*db, "victim"]
    location = write_values(ns, victim, [1, 2, 3])
    other_client(endpoint, warehouse).create_table(
        (db[1], "rogue"),
        schema=Schema(NestedField(1, "id", LongType(), required=False)),
        location=location,
        properties={"table_type": "lance"},
    )
    rogue = [*db, "rogue"]
    for read in (
        lambda: ns.count_table_rows({"id": rogue}),
        lambda: ns.query_table({"id": rogue, "k": 5, "vector": {}}),
        lambda: ns.get_table_stats({"id": rogue}),
    ):
        with pytest.raises(PermissionDeniedError, match="belongs to another table"):
            read()
    assert ns.count_table_rows({"id": victim}).count == 3
