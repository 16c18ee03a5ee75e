"""The write half of the data plane: create, insert, merge-insert, update, delete, tags, branches
and schema evolution, in process and through the REST server, checked against the reference
(pylance's DirectoryNamespace, and RestAdapter("dir") serving it)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import lance
import lance.namespace
import lance_namespace as ln
import lancedb
import pyarrow as pa
import pytest
from lance_namespace.errors import (
    ConcurrentModificationError,
    InvalidInputError,
    LanceNamespaceError,
    TableAlreadyExistsError,
    TableBranchNotFoundError,
    TableNotFoundError,
    TableSchemaValidationError,
    TableTagNotFoundError,
    TableVersionNotFoundError,
    UnsupportedOperationError,
)
from lance_namespace_urllib3_client.models import AddColumnsEntry, AlterColumnsEntry

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.server import RunningServer
from lance_iceberg_ns.storage import files
from lance_iceberg_ns.versions.manifests import version_of_manifest
from lance_iceberg_ns.versions.snapshots import VERSION_KEY

from ..helpers import all_succeed, create_plain_iceberg_table, ipc
from ..stores import Store

pytestmark = pytest.mark.usefixtures("store")  # every test on a local disk and on S3

ROWS = pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]})


def rows(
    namespace: ln.LanceNamespace, table_id: list[str], storage_options: dict[str, str] | None = None
) -> list[tuple[Any, ...]]:
    """The table's rows, sorted; a client of the server brings its own ``storage_options`` (no secret is vended)."""
    table = lance.dataset(namespace_client=namespace, table_id=table_id, storage_options=storage_options).to_table()
    return sorted(zip(*(table[name].to_pylist() for name in table.column_names), strict=True))


def outcome(step: Callable[[], Any]) -> Any:
    """What a step answers, as comparable data: its counts and version, or its error code."""
    try:
        answer = step()
    except LanceNamespaceError as exc:
        return ("error", exc.code)
    if isinstance(answer, int):  # count_table_rows in process; its response through a client
        return answer
    if answer is None:
        return None
    fields = answer.to_dict()
    if set(fields) == {"count"}:
        return fields["count"]
    for noise in ("location", "properties", "transaction_id", "storage_options", "context"):
        fields.pop(noise, None)
    return fields


def script(namespace: ln.LanceNamespace, t: list[str], storage_options: dict[str, str] | None = None) -> dict[str, Any]:
    """One sequence of every write operation; its answers (only what both implementations support
    the same way: deliberate differences are tested apart). ``storage_options`` read the rows."""
    steps: dict[str, Callable[[], Any]] = {
        "create": lambda: namespace.create_table(ln.CreateTableRequest(id=t), ipc(ROWS)),
        "create again": lambda: namespace.create_table(ln.CreateTableRequest(id=t), ipc(ROWS)),
        "create exist_ok": lambda: namespace.create_table(ln.CreateTableRequest(id=t, mode="exist_ok"), ipc(ROWS)),
        "create Overwrite": lambda: namespace.create_table(ln.CreateTableRequest(id=t, mode="Overwrite"), ipc(ROWS)),
        "create bad mode": lambda: namespace.create_table(ln.CreateTableRequest(id=t, mode="bogus"), ipc(ROWS)),
        "create no body": lambda: namespace.create_table(ln.CreateTableRequest(id=[*t[:-1], "e"]), b""),
        "insert": lambda: namespace.insert_into_table(ln.InsertIntoTableRequest(id=t), ipc(ROWS)),
        "insert overwrite": lambda: namespace.insert_into_table(
            ln.InsertIntoTableRequest(id=t, mode="overwrite"), ipc(ROWS)
        ),
        "insert bad mode": lambda: namespace.insert_into_table(ln.InsertIntoTableRequest(id=t, mode="x"), ipc(ROWS)),
        "insert missing table": lambda: namespace.insert_into_table(
            ln.InsertIntoTableRequest(id=[*t[:-1], "nope"]), ipc(ROWS)
        ),
        "merge no clause": lambda: namespace.merge_insert_into_table(
            ln.MergeInsertIntoTableRequest(id=t, on=["id"]), ipc(ROWS)
        ),
        "merge upsert": lambda: namespace.merge_insert_into_table(
            ln.MergeInsertIntoTableRequest(
                id=t, on=["id"], when_matched_update_all=True, when_not_matched_insert_all=True
            ),
            ipc(pa.table({"id": [3, 4], "v": ["C", "D"]})),
        ),
        "merge delete by source": lambda: namespace.merge_insert_into_table(
            ln.MergeInsertIntoTableRequest(
                id=t, on=["id"], when_matched_update_all=True, when_not_matched_by_source_delete=True
            ),
            ipc(pa.table({"id": [1, 2, 3], "v": ["x", "y", "z"]})),
        ),
        "merge filtered": lambda: namespace.merge_insert_into_table(
            ln.MergeInsertIntoTableRequest(
                id=t,
                on=["id"],
                when_matched_update_all=True,
                when_matched_update_all_filt="target.v = 'x'",
                when_not_matched_insert_all=True,
                timeout="30s",
                use_index=False,
            ),
            ipc(pa.table({"id": [1, 2, 9], "v": ["X", "Y", "Z"]})),
        ),
        "merge bad key": lambda: namespace.merge_insert_into_table(
            ln.MergeInsertIntoTableRequest(id=t, on=["nope"], when_matched_update_all=True), ipc(ROWS)
        ),
        "count": lambda: namespace.count_table_rows(ln.CountTableRowsRequest(id=t)),
        "update": lambda: namespace.update_table(
            ln.UpdateTableRequest(id=t, predicate="id > 1", updates=[["v", "'u'"]])
        ),
        "update every row": lambda: namespace.update_table(
            ln.UpdateTableRequest(id=t, updates=[["v", "concat(v, '!')"]])
        ),
        "update bad column": lambda: namespace.update_table(ln.UpdateTableRequest(id=t, updates=[["nope", "1"]])),
        "update bad predicate": lambda: namespace.update_table(
            ln.UpdateTableRequest(id=t, predicate="id >>> 1", updates=[["v", "'u'"]])
        ),
        "delete": lambda: namespace.delete_from_table(ln.DeleteFromTableRequest(id=t, predicate="id = 1")),
        "delete nothing": lambda: namespace.delete_from_table(ln.DeleteFromTableRequest(id=t, predicate="id = 100")),
        "delete bad predicate": lambda: namespace.delete_from_table(
            ln.DeleteFromTableRequest(id=t, predicate="nope = 1")
        ),
        "count after": lambda: namespace.count_table_rows(ln.CountTableRowsRequest(id=t)),
        "tag": lambda: namespace.create_table_tag(ln.CreateTableTagRequest(id=t, tag="v1", version=1)),
        "tag taken": lambda: namespace.create_table_tag(ln.CreateTableTagRequest(id=t, tag="v1", version=2)),
        "tag missing version": lambda: namespace.create_table_tag(
            ln.CreateTableTagRequest(id=t, tag="v9", version=999)
        ),
        "tag version 0": lambda: namespace.create_table_tag(ln.CreateTableTagRequest(id=t, tag="v0", version=0)),
        "tag bad name": lambda: namespace.create_table_tag(ln.CreateTableTagRequest(id=t, tag="a b", version=1)),
        "tag b": lambda: namespace.create_table_tag(ln.CreateTableTagRequest(id=t, tag="b", version=2)),
        "tags": lambda: namespace.list_table_tags(ln.ListTableTagsRequest(id=t)),
        "tag version": lambda: namespace.get_table_tag_version(ln.GetTableTagVersionRequest(id=t, tag="v1")),
        "tag version missing": lambda: namespace.get_table_tag_version(ln.GetTableTagVersionRequest(id=t, tag="zz")),
        "tag move": lambda: namespace.update_table_tag(ln.UpdateTableTagRequest(id=t, tag="v1", version=3)),
        "tag move missing": lambda: namespace.update_table_tag(ln.UpdateTableTagRequest(id=t, tag="zz", version=3)),
        "tag move bad version": lambda: namespace.update_table_tag(
            ln.UpdateTableTagRequest(id=t, tag="v1", version=999)
        ),
        "tag moved": lambda: namespace.get_table_tag_version(ln.GetTableTagVersionRequest(id=t, tag="v1")),
        "tag delete": lambda: namespace.delete_table_tag(ln.DeleteTableTagRequest(id=t, tag="v1")),
        "tag delete missing": lambda: namespace.delete_table_tag(ln.DeleteTableTagRequest(id=t, tag="v1")),
        "add column": lambda: namespace.alter_table_add_columns(
            ln.AlterTableAddColumnsRequest(id=t, new_columns=[AddColumnsEntry(name="w", expression="id * 2")])
        ),
        "rename column": lambda: namespace.alter_table_alter_columns(
            ln.AlterTableAlterColumnsRequest(id=t, alterations=[AlterColumnsEntry(path="w", rename="w2")])
        ),
        "nullable column": lambda: namespace.alter_table_alter_columns(
            ln.AlterTableAlterColumnsRequest(id=t, alterations=[AlterColumnsEntry(path="v", nullable=True)])
        ),
        "drop column": lambda: namespace.alter_table_drop_columns(
            ln.AlterTableDropColumnsRequest(id=t, columns=["w2"])
        ),
        "schema metadata": lambda: namespace.update_table_schema_metadata(
            ln.UpdateTableSchemaMetadataRequest(id=t, metadata={"a": "b"})
        ),
        "schema metadata merged": lambda: namespace.update_table_schema_metadata(
            ln.UpdateTableSchemaMetadataRequest(id=t, metadata={"c": "d"})
        ),
        "field metadata": lambda: namespace.update_field_metadata(ln.UpdateFieldMetadataRequest(id=t, updates=[])),
        "versions": lambda: len(namespace.list_table_versions(ln.ListTableVersionsRequest(id=t)).versions),
    }
    answers = {name: outcome(step) for name, step in steps.items()}
    for tag in answers["tags"]["tags"].values():
        tag.pop("manifestSize")  # bytes of a manifest: not behaviour
    answers["rows"] = rows(namespace, t, storage_options)
    return answers


@pytest.fixture
def reference(tmp_path: Path) -> ln.LanceNamespace:
    namespace = lance.namespace.DirectoryNamespace(root=str(tmp_path / "reference"))
    namespace.create_namespace(ln.CreateNamespaceRequest(id=["db"]))
    return namespace


@pytest.fixture
def reference_rest(tmp_path: Path) -> Iterator[lance.namespace.RestNamespace]:
    with lance.namespace.RestAdapter("dir", {"root": str(tmp_path / "reference_rest")}, port=0) as adapter:
        client = lance.namespace.RestNamespace(uri=f"http://127.0.0.1:{adapter.port}")
        client.create_namespace(ln.CreateNamespaceRequest(id=["db"]))
        yield client


def test_every_write_answers_as_the_directory_namespace_does(
    ns: IcebergLanceNamespace, db: list[str], reference: ln.LanceNamespace
) -> None:
    ours = script(ns, [*db, "t"])
    theirs = script(reference, ["db", "t"])
    assert ours == theirs
    assert ours["merge delete by source"] == {
        "num_updated_rows": 3,
        "num_inserted_rows": 0,
        "num_deleted_rows": 1,
        "version": 6,
    }
    assert ours["create again"] == ("error", 5) and ours["tag taken"] == ("error", 9)
    assert ours["tag version missing"] == ("error", 8) and ours["tag missing version"] == ("error", 11)


def test_every_write_answers_as_the_reference_server_does(
    rest: lance.namespace.RestNamespace, db: list[str], store: Store, reference_rest: lance.namespace.RestNamespace
) -> None:
    ours = script(rest, [*db, "t"], store.storage_options)
    theirs = script(reference_rest, ["db", "t"])
    assert ours == theirs


def test_deliberate_differences_from_the_reference(
    ns: IcebergLanceNamespace, db: list[str], reference: ln.LanceNamespace
) -> None:
    """Where we answer otherwise, on purpose: a bad timeout, a bad add-columns expression and a
    cast the reference cannot take; tags are paginated; a create over a dropped name revives it."""
    ours_id, theirs_id = [*db, "t"], ["db", "t"]
    for namespace, t in ((ns, ours_id), (reference, theirs_id)):
        namespace.create_table(ln.CreateTableRequest(id=t), ipc(ROWS))
        for tag, version in (("a", 1), ("b", 1)):
            namespace.create_table_tag(ln.CreateTableTagRequest(id=t, tag=tag, version=version))

    def bad_timeout(namespace: ln.LanceNamespace, t: list[str]) -> Any:
        request = ln.MergeInsertIntoTableRequest(id=t, on=["id"], when_matched_update_all=True, timeout="soon")
        return outcome(lambda: namespace.merge_insert_into_table(request, ipc(ROWS)))

    def bad_expression(namespace: ln.LanceNamespace, t: list[str]) -> Any:
        request = ln.AlterTableAddColumnsRequest(id=t, new_columns=[AddColumnsEntry(name="w", expression="nope*2")])
        return outcome(lambda: namespace.alter_table_add_columns(request))

    def cast(namespace: ln.LanceNamespace, t: list[str]) -> Any:
        entry = AlterColumnsEntry(path="id", data_type={"type": "int32"})
        return outcome(
            lambda: namespace.alter_table_alter_columns(ln.AlterTableAlterColumnsRequest(id=t, alterations=[entry]))
        )

    def first_tag_page(namespace: ln.LanceNamespace, t: list[str]) -> Any:
        return outcome(lambda: namespace.list_table_tags(ln.ListTableTagsRequest(id=t, limit=1)))

    assert bad_timeout(ns, ours_id) == ("error", 13)  # the reference ignores it and commits
    assert bad_timeout(reference, theirs_id)["version"] == 2
    assert bad_expression(ns, ours_id) == ("error", 13)  # the reference: internal error
    assert bad_expression(reference, theirs_id) == ("error", 18)
    assert cast(ns, ours_id) == {"version": 2}  # the reference takes only a JSON string, which the model refuses
    assert lance.dataset(namespace_client=ns, table_id=ours_id).schema.field("id").type == pa.int32()
    with pytest.raises(ValueError):
        reference.alter_table_alter_columns(
            ln.AlterTableAlterColumnsRequest(
                id=theirs_id, alterations=[AlterColumnsEntry(path="id", data_type={"type": "int32"})]
            )
        )
    missing_expression = ln.AlterTableAddColumnsRequest(id=ours_id, new_columns=[AddColumnsEntry(name="w0")])
    assert outcome(lambda: ns.alter_table_add_columns(missing_expression)) == ("error", 13)
    with pytest.raises(ValueError):  # the reference: a plain ValueError, no error code
        reference.alter_table_add_columns(missing_expression.model_copy(update={"id": theirs_id}))
    assert first_tag_page(ns, ours_id)["page_token"] == "a"  # the reference answers every tag
    assert len(first_tag_page(reference, theirs_id)["tags"]) == 2


def test_create_over_a_soft_deleted_table_revives_it_and_overwrites_as_a_new_version(
    ns: IcebergLanceNamespace, db: list[str]
) -> None:
    table_id = [*db, "t"]
    first = ns.create_table(ln.CreateTableRequest(id=table_id), ipc(ROWS))
    ns.insert_into_table(ln.InsertIntoTableRequest(id=table_id), ipc(ROWS))
    ns.drop_table(ln.DropTableRequest(id=table_id))
    with pytest.raises(TableNotFoundError):  # soft-deleted: gone for data operations
        ns.insert_into_table(ln.InsertIntoTableRequest(id=table_id), ipc(ROWS))
    again = ns.create_table(ln.CreateTableRequest(id=table_id), ipc(pa.table({"id": [7], "v": ["new"]})))
    assert again.location == first.location and again.version == 3  # one lineage, a new version
    assert rows(ns, table_id) == [(7, "new")]
    assert ns.table_status(table_id).state == "exists" and ns.list_purgable_tables(db) == []
    old = lance.dataset(namespace_client=ns, table_id=table_id, version=2).count_rows()
    assert old == 6  # the history before the drop is kept
    with pytest.raises(TableAlreadyExistsError):  # now live: mode create changes nothing
        ns.create_table(ln.CreateTableRequest(id=table_id), ipc(ROWS))
    assert rows(ns, table_id) == [(7, "new")]


def test_a_new_table_is_declared_at_a_new_location_and_writes_land_only_there(
    ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    created = ns.create_table(ln.CreateTableRequest(id=[*db, "t"], properties={"owner": "me"}), ipc(ROWS))
    assert created.properties["owner"] == "me" and created.version == 1
    before = store.contents(store.root)
    ns.insert_into_table(ln.InsertIntoTableRequest(id=[*db, "t"]), ipc(ROWS))
    ns.update_table(ln.UpdateTableRequest(id=[*db, "t"], updates=[["v", "'u'"]]))
    ns.create_table_tag(ln.CreateTableTagRequest(id=[*db, "t"], tag="x", version=1))
    ns.alter_table_add_columns(
        ln.AlterTableAddColumnsRequest(id=[*db, "t"], new_columns=[AddColumnsEntry(name="w", expression="id")])
    )
    changed = {name for name, digest in store.contents(store.root).items() if before.get(name) != digest}
    assert created.location.startswith(store.at())
    location = created.location[len(store.at()) :].strip("/")
    assert changed and all(name.startswith(f"{location}/") for name in changed)


def test_a_table_s_first_version_is_written_without_lance_warning_of_it(
    endpoint: str, store: Store, db: list[str]
) -> None:
    """create_table, and the first insert into a declared table, used to make Lance log "no
    existing dataset at ..., it will be created" on every call."""
    import subprocess
    import sys

    script = f"""
import io
import lance_namespace as ln
import pyarrow as pa
from lance_iceberg_ns import IcebergLanceNamespace
rows = pa.table({{"id": [1, 2]}})
sink = io.BytesIO()
with pa.ipc.new_stream(sink, rows.schema) as writer:
    writer.write_table(rows)
with IcebergLanceNamespace(endpoint={endpoint!r}, root={store.root!r}, **{store.properties!r}) as ns:
    ns.create_table(ln.CreateTableRequest(id={[*db, "made"]!r}), sink.getvalue())
    ns.declare_table(ln.DeclareTableRequest(id={[*db, "declared"]!r}))
    ns.insert_into_table(ln.InsertIntoTableRequest(id={[*db, "declared"]!r}), sink.getvalue())
    print(ns.count_table_rows(ln.CountTableRowsRequest(id={[*db, "made"]!r})).count)
"""
    environment = {name: value for name, value in os.environ.items() if name != "LANCE_LOG"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=environment, timeout=300, check=True
    )
    assert done.stdout.split()[-1] == "2"
    assert " WARN " not in done.stderr, done.stderr


def test_batches_whose_dictionaries_cannot_be_joined_are_written_as_they_came(
    ns: IcebergLanceNamespace, db: list[str]
) -> None:
    # per request 8 batches of 5,000 words each, with int16 indices: one dictionary of all 40,000 cannot be
    words = [[f"{n}-{i}" for i in range(5_000)] for n in range(16)]
    batches = [
        pa.record_batch({"word": pa.DictionaryArray.from_arrays(pa.array(range(5_000), pa.int16()), pa.array(some))})
        for some in words
    ]
    ns.create_table(ln.CreateTableRequest(id=[*db, "words"]), ipc(pa.Table.from_batches(batches[:8])))
    ns.insert_into_table(ln.InsertIntoTableRequest(id=[*db, "words"]), ipc(pa.Table.from_batches(batches[8:])))
    # (pylance 14 cannot decode int16 dictionaries it wrote, joined or not: the rows are counted)
    assert ns.count_table_rows(ln.CountTableRowsRequest(id=[*db, "words"])).count == 80_000


def test_a_failed_create_leaves_no_table(ns: IcebergLanceNamespace, db: list[str]) -> None:
    with pytest.raises(InvalidInputError):
        ns.create_table(ln.CreateTableRequest(id=[*db, "t"]), b"not arrow")
    with pytest.raises(TableNotFoundError):
        ns.describe_table(ln.DescribeTableRequest(id=[*db, "t"]))


def test_writes_go_through_the_catalog(ns: IcebergLanceNamespace, db: list[str], endpoint: str, tmp_path: Path) -> None:
    create_plain_iceberg_table(endpoint, db[0], (db[1], "plain"), str(tmp_path / "plain"))  # the catalog's own
    with pytest.raises(InvalidInputError, match="not a Lance table"):
        ns.insert_into_table(ln.InsertIntoTableRequest(id=[*db, "plain"]), ipc(ROWS))
    ns.create_table(ln.CreateTableRequest(id=[*db, "t"]), ipc(ROWS))
    with pytest.raises(TableSchemaValidationError):
        ns.insert_into_table(ln.InsertIntoTableRequest(id=[*db, "t"]), ipc(pa.table({"zz": [1]})))
    with pytest.raises(UnsupportedOperationError):
        ns.insert_into_table(ln.InsertIntoTableRequest(id=[*db, "t"], branch="dev"), ipc(ROWS))
    with pytest.raises(UnsupportedOperationError):
        ns.alter_table_backfill_columns(ln.AlterTableBackfillColumnsRequest(id=[*db, "t"], column="v"))


def test_branches_on_a_table_with_lance_versions(ns: IcebergLanceNamespace, db: list[str]) -> None:
    table_id = [*db, "t"]
    ns.create_table(ln.CreateTableRequest(id=table_id), ipc(ROWS))
    ns.insert_into_table(ln.InsertIntoTableRequest(id=table_id), ipc(ROWS))
    ns.create_table_branch(ln.CreateTableBranchRequest(id=table_id, name="dev", from_version=1))
    with pytest.raises(LanceNamespaceError) as taken:
        ns.create_table_branch(ln.CreateTableBranchRequest(id=table_id, name="dev"))
    assert taken.value.code == 23
    listed = ns.list_table_branches(ln.ListTableBranchesRequest(id=table_id)).branches
    assert list(listed) == ["dev"] and listed["dev"].parent_version == 1
    ns.delete_table_branch(ln.DeleteTableBranchRequest(id=table_id, name="dev"))
    with pytest.raises(LanceNamespaceError) as missing:
        ns.delete_table_branch(ln.DeleteTableBranchRequest(id=table_id, name="dev"))
    assert missing.value.code == 22


@pytest.mark.parametrize(
    ("operation", "fields", "refused"),
    [
        ("create_table_tag", {"tag": "t" * 201, "version": 1}, InvalidInputError),
        ("create_table_tag", {"tag": "é" * 21, "version": 1}, InvalidInputError),  # 210 once Lance encodes it
        ("create_table_branch", {"name": "."}, InvalidInputError),
        ("create_table_branch", {"name": "dev/./x"}, InvalidInputError),
        ("create_table_branch", {"name": "b" * 201}, InvalidInputError),
        ("create_table_tag", {"tag": "ok", "version": 1, "branch": "b" * 300}, TableBranchNotFoundError),
        ("create_table_branch", {"name": "dev", "from_branch": "b" * 300}, TableBranchNotFoundError),
        ("delete_table_tag", {"tag": "t" * 300}, TableTagNotFoundError),
        ("get_table_tag_version", {"tag": "t" * 300}, TableTagNotFoundError),
        ("update_table_tag", {"tag": "t" * 300, "version": 1}, TableTagNotFoundError),
        ("delete_table_branch", {"name": "b" * 300}, TableBranchNotFoundError),
    ],
)
def test_a_tag_or_branch_name_no_file_can_carry_is_a_typed_error_and_makes_nothing(
    ns: IcebergLanceNamespace,
    db: list[str],
    store: Store,
    operation: str,
    fields: dict[str, Any],
    refused: type[Exception],
) -> None:
    """Lance keeps a ref in a file named after it: a name the file system refuses failed as an
    internal error, after the branch's folders were made. A ref that exists is found by any name."""
    table_id = [*db, "t"]
    location = ns.create_table(ln.CreateTableRequest(id=table_id), ipc(ROWS)).location
    assert location is not None
    before = store.entries(location)  # on a disk, folders too
    with pytest.raises(refused):
        getattr(ns, operation)({"id": table_id, **fields})
    assert store.entries(location) == before


def test_a_tag_made_past_the_limit_by_pylance_itself_is_read_moved_and_deleted(
    ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    table_id = [*db, "t"]
    location = ns.create_table(ln.CreateTableRequest(id=table_id), ipc(ROWS)).location
    ns.insert_into_table(ln.InsertIntoTableRequest(id=table_id), ipc(ROWS))
    longest = "t" * 200
    ns.create_table_tag({"id": table_id, "tag": longest, "version": 1})
    made_elsewhere = "t" * 205
    store.dataset(location).tags.create(made_elsewhere, 1)
    assert ns.get_table_tag_version({"id": table_id, "tag": made_elsewhere}).version == 1
    ns.update_table_tag({"id": table_id, "tag": made_elsewhere, "version": 2})
    assert ns.get_table_tag_version({"id": table_id, "tag": made_elsewhere}).version == 2
    ns.delete_table_tag({"id": table_id, "tag": made_elsewhere})
    assert list(ns.list_table_tags({"id": table_id}).tags) == [longest]


@pytest.fixture
def managed_ns(endpoint: str, store: Store) -> Iterator[IcebergLanceNamespace]:
    properties = {**store.properties, "table_version_management": "true"}
    with IcebergLanceNamespace(endpoint=endpoint, root=store.root, **properties) as ns:
        yield ns


def _catalog_versions(ns: IcebergLanceNamespace, table_id: list[str]) -> tuple[list[int], int]:
    """The versions the catalog records (the latest two, and any a ref holds), and how many snapshots it made."""
    table = ns.catalog(table_id[0]).load_table(tuple(table_id[1:]))
    recorded = sorted(int(s.summary.additional_properties[VERSION_KEY]) for s in table.metadata.snapshots if s.summary)
    return recorded, table.metadata.last_sequence_number


def _manifest_versions(location: str, store: Store) -> list[int]:
    names = [found.path for found in files.list_files(location, "_versions", store.storage_options)]
    return sorted(v for v in (version_of_manifest(name) for name in names) if v is not None)


def test_every_commit_of_a_managed_table_goes_through_the_catalog(
    managed_ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    table_id = [*db, "m"]
    created = managed_ns.create_table(ln.CreateTableRequest(id=table_id), ipc(ROWS))
    assert managed_ns.describe_table(ln.DescribeTableRequest(id=table_id)).managed_versioning
    managed_ns.insert_into_table(ln.InsertIntoTableRequest(id=table_id), ipc(pa.table({"id": [4], "v": ["d"]})))
    managed_ns.merge_insert_into_table(
        ln.MergeInsertIntoTableRequest(id=table_id, on=["id"], when_matched_update_all=True),
        ipc(pa.table({"id": [4], "v": ["D"]})),
    )
    managed_ns.update_table(ln.UpdateTableRequest(id=table_id, predicate="id = 1", updates=[["v", "'u'"]]))
    managed_ns.delete_from_table(ln.DeleteFromTableRequest(id=table_id, predicate="id = 2"))
    managed_ns.alter_table_add_columns(
        ln.AlterTableAddColumnsRequest(id=table_id, new_columns=[AddColumnsEntry(name="w", expression="id")])
    )
    managed_ns.alter_table_alter_columns(
        ln.AlterTableAlterColumnsRequest(id=table_id, alterations=[AlterColumnsEntry(path="w", rename="w2")])
    )
    managed_ns.alter_table_drop_columns(ln.AlterTableDropColumnsRequest(id=table_id, columns=["w2"]))
    last = managed_ns.update_table_schema_metadata(
        ln.UpdateTableSchemaMetadataRequest(id=table_id, metadata={"a": "b"})
    )
    assert last.metadata == {"a": "b"}
    assert rows(managed_ns, table_id) == [(1, "u"), (3, "c"), (4, "D")]  # a read finalizes the last manifest
    assert _catalog_versions(managed_ns, table_id) == ([8, 9], 9)  # each operation one catalog commit
    assert _manifest_versions(created.location, store) == list(range(1, 10))
    listed = managed_ns.list_table_versions(ln.ListTableVersionsRequest(id=table_id)).versions
    assert [v.version for v in listed] == list(range(1, 10))
    managed_ns.create_table_tag(ln.CreateTableTagRequest(id=table_id, tag="t", version=3))  # a name, not a commit
    assert _catalog_versions(managed_ns, table_id) == ([8, 9], 9)
    for name in ("dev", "main"):  # whatever the name
        with pytest.raises(UnsupportedOperationError, match="branches are not supported"):
            managed_ns.create_table_branch(ln.CreateTableBranchRequest(id=table_id, name=name))
        with pytest.raises(UnsupportedOperationError, match="branches are not supported"):
            managed_ns.delete_table_branch(ln.DeleteTableBranchRequest(id=table_id, name=name))
    assert rows(managed_ns, table_id) == [(1, "u"), (3, "c"), (4, "D")]


def test_four_threads_writing_a_managed_table_leave_dense_versions_and_every_row_once(
    managed_ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    table_id = [*db, "m"]
    managed_ns.create_table(ln.CreateTableRequest(id=table_id), ipc(pa.table({"id": [0], "v": ["seed"]})))

    def work(worker: int) -> None:
        for round_ in range(2):
            key = worker * 100 + round_ + 1
            managed_ns.insert_into_table(
                ln.InsertIntoTableRequest(id=table_id), ipc(pa.table({"id": [key], "v": ["i"]}))
            )
            managed_ns.merge_insert_into_table(
                ln.MergeInsertIntoTableRequest(
                    id=table_id, on=["id"], when_matched_update_all=True, when_not_matched_insert_all=True
                ),
                ipc(pa.table({"id": [key, key + 50], "v": ["m", "m"]})),
            )
            managed_ns.update_table(
                ln.UpdateTableRequest(id=table_id, predicate=f"id = {key + 50}", updates=[["v", "'u'"]])
            )
            managed_ns.delete_from_table(ln.DeleteFromTableRequest(id=table_id, predicate=f"id = {key}"))

    all_succeed(4, work)
    expected = [(0, "seed")] + sorted((w * 100 + r + 51, "u") for w in range(4) for r in range(2))
    assert rows(managed_ns, table_id) == expected  # every operation landed exactly once
    location = managed_ns.describe_table(ln.DescribeTableRequest(id=table_id)).location
    assert _catalog_versions(managed_ns, table_id) == ([32, 33], 33)  # 1 + 4 threads x 2 rounds x 4 ops: a commit each
    listed = managed_ns.list_table_versions(ln.ListTableVersionsRequest(id=table_id)).versions
    assert [v.version for v in listed] == list(range(1, 34)) == _manifest_versions(location, store)  # dense


def test_bad_input_through_the_server_is_4xx(rest: lance.namespace.RestNamespace, db: list[str]) -> None:
    table_id = [*db, "t"]
    rest.create_table(ln.CreateTableRequest(id=table_id), ipc(ROWS))
    failures = [
        lambda: rest.create_table(ln.CreateTableRequest(id=[*db, "g"]), b"not arrow"),
        lambda: rest.insert_into_table(ln.InsertIntoTableRequest(id=table_id), ipc(pa.table({"zz": [1]}))),
        lambda: rest.update_table(ln.UpdateTableRequest(id=table_id, predicate="id >>> 1", updates=[["v", "1"]])),
        lambda: rest.delete_from_table(ln.DeleteFromTableRequest(id=table_id, predicate="nope = 1")),
        lambda: rest.alter_table_drop_columns(ln.AlterTableDropColumnsRequest(id=table_id, columns=["nope"])),
        lambda: rest.alter_table_add_columns(
            ln.AlterTableAddColumnsRequest(id=table_id, new_columns=[AddColumnsEntry(name="w", expression="nope")])
        ),
    ]
    codes = [outcome(failure) for failure in failures]
    assert codes == [("error", 13), ("error", 20), ("error", 13), ("error", 13), ("error", 13), ("error", 13)]


@pytest.mark.parametrize("pushdown", [None, ["CreateTable"]])
def test_lancedb_writes_through_the_namespace_in_process_and_through_the_server(
    endpoint: str,
    store: Store,
    db: list[str],
    server: RunningServer,
    pushdown: list[str] | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a client of the server brings its own credentials: lancedb reads them from the environment
    # (its namespace connection does not write with the storage_options it is given)
    for name, value in store.credentials_environment().items():
        monkeypatch.setenv(name, value)
    data = pa.table({"id": [1, 2, 3]})
    properties = {"endpoint": endpoint, "root": store.root, **store.properties}
    connections = {
        "in process": lancedb.connect_namespace("iceberg", properties, namespace_client_pushdown_operations=pushdown),
        "server": lancedb.connect_namespace("rest", {"uri": server.uri}, namespace_client_pushdown_operations=pushdown),
    }
    for name, connection in connections.items():
        table_name = f"t_{name.replace(' ', '_')}"
        table = connection.create_table(table_name, data, namespace_path=db)
        table.add(pa.table({"id": [4]}))
        table.delete("id = 1")
        assert (table.count_rows(), table.version) == (3, 3)
        with IcebergLanceNamespace(**properties) as ns:
            assert rows(ns, [*db, table_name]) == [(2,), (3,), (4,)]


def test_reads_that_name_a_branch_read_that_branch_and_a_missing_branch_is_not_found(
    ns: IcebergLanceNamespace, db: list[str], rest: lance.namespace.RestNamespace
) -> None:
    table_id = [*db, "t"]
    ns.create_table(ln.CreateTableRequest(id=table_id), ipc(ROWS))
    ns.insert_into_table(ln.InsertIntoTableRequest(id=table_id), ipc(ROWS))
    ns.insert_into_table(ln.InsertIntoTableRequest(id=table_id), ipc(ROWS))
    ns.create_table_branch(ln.CreateTableBranchRequest(id=table_id, name="dev", from_version=1))
    assert ns.count_table_rows({"id": table_id}).count == 9
    assert ns.count_table_rows({"id": table_id, "branch": "main"}).count == 9
    assert ns.count_table_rows({"id": table_id, "branch": "dev"}).count == 3
    assert ns.count_table_rows({"id": table_id, "branch": "dev", "predicate": "id > 1"}).count == 2
    assert ns.get_table_stats({"id": table_id, "branch": "dev"}).num_rows == 3
    assert ns.get_table_stats({"id": table_id}).num_rows == 9
    query = {"id": table_id, "k": 100, "vector": {}, "columns": {"column_names": ["id"]}}
    answer = pa.ipc.open_file(ns.query_table({**query, "branch": "dev"}).data).read_all()
    assert sorted(answer["id"].to_pylist()) == [1, 2, 3]
    for read in (
        lambda: ns.count_table_rows({"id": table_id, "branch": "nope"}),
        lambda: ns.get_table_stats({"id": table_id, "branch": "nope"}),
        lambda: ns.query_table({**query, "branch": "nope"}),
        lambda: ns.list_table_indices({"id": table_id, "branch": "nope"}),
    ):
        with pytest.raises(TableBranchNotFoundError):
            read()
    with pytest.raises(TableVersionNotFoundError):
        ns.count_table_rows({"id": table_id, "branch": "dev", "version": 99})
    assert rest.count_table_rows(ln.CountTableRowsRequest(id=table_id, branch="dev")).count == 3
    with pytest.raises(TableBranchNotFoundError):
        rest.count_table_rows(ln.CountTableRowsRequest(id=table_id, branch="nope"))


def test_index_changes_that_name_a_branch_are_refused_and_leave_main_alone(
    ns: IcebergLanceNamespace, db: list[str]
) -> None:
    table_id = [*db, "t"]
    ns.create_table(ln.CreateTableRequest(id=table_id), ipc(ROWS))
    ns.create_table_branch(ln.CreateTableBranchRequest(id=table_id, name="dev"))
    index = {"id": table_id, "column": "id", "index_type": "BTREE", "name": "id_idx"}
    for create in (ns.create_table_index, ns.create_table_scalar_index):
        with pytest.raises(UnsupportedOperationError):
            create({**index, "branch": "dev"})
    assert ns.list_table_indices({"id": table_id}).indexes == []
    ns.create_table_index(index)
    with pytest.raises(UnsupportedOperationError):
        ns.drop_table_index({"id": table_id, "index_name": "id_idx", "branch": "dev"})
    assert [found.index_name for found in ns.list_table_indices({"id": table_id}).indexes] == ["id_idx"]


@pytest.mark.parametrize(
    ("operation", "fields"),
    [
        ("create_table_tag", {"tag": "é", "version": 1}),
        ("create_table_tag", {"tag": "v1 final", "version": 1}),
        ("create_table_tag", {"tag": "", "version": 1}),
        ("create_table_tag", {"tag": "a..b", "version": 1}),
        ("create_table_tag", {"tag": ".a", "version": 1}),
        ("create_table_tag", {"tag": "a.lock", "version": 1}),
        ("create_table_tag", {"tag": "a/b", "version": 1}),
        ("create_table_branch", {"name": "é"}),
        ("create_table_branch", {"name": "dev//x"}),
        ("create_table_branch", {"name": "/dev"}),
        ("create_table_branch", {"name": "dev x"}),
        ("create_table_branch", {"name": "dev.lock"}),
    ],
)
def test_a_tag_or_branch_name_outside_lances_rules_is_refused_before_anything_is_written(
    ns: IcebergLanceNamespace, db: list[str], store: Store, operation: str, fields: dict[str, Any]
) -> None:
    """A tag named with a letter outside ASCII was written, and then every tag operation failed:
    Lance writes it under a file name it cannot read back."""
    table_id = [*db, "t"]
    location = ns.create_table(ln.CreateTableRequest(id=table_id), ipc(ROWS)).location
    assert location is not None
    before = store.entries(location)
    with pytest.raises(InvalidInputError):
        getattr(ns, operation)({"id": table_id, **fields})
    assert store.entries(location) == before
    ns.create_table_tag({"id": table_id, "tag": "v1.0-rc_1", "version": 1})
    assert list(ns.list_table_tags({"id": table_id}).tags) == ["v1.0-rc_1"]
    assert [v.version for v in ns.list_table_versions({"id": table_id}).versions] == [1]


def test_a_read_of_a_branch_of_a_managed_table_is_not_found(managed_ns: IcebergLanceNamespace, db: list[str]) -> None:
    table_id = [*db, "m"]
    managed_ns.create_table(ln.CreateTableRequest(id=table_id), ipc(ROWS))
    assert managed_ns.count_table_rows({"id": table_id, "branch": "main"}).count == 3
    with pytest.raises(TableBranchNotFoundError):
        managed_ns.count_table_rows({"id": table_id, "branch": "dev"})


@pytest.mark.parametrize("kept", [True, False], ids=["from the dataset kept open", "by its location"])
def test_an_insert_a_cleanup_by_location_leaves_out_of_the_tables_history_is_a_retry(
    ns: IcebergLanceNamespace, db: list[str], store: Store, monkeypatch: pytest.MonkeyPatch, kept: bool
) -> None:
    """Lance commits version N when no manifest of that number is there (lance-format/lance#3718).
    A writer by location commits versions 2 and 3 while an insert through the namespace, based on
    version 1, writes its rows; a cleanup then removes version 2 (3 is the latest), and the insert
    commits a version 2 that version 3 does not descend from: it was answered 200, and its rows
    were in no later version. The race is inside pylance's commit; here the insert's commit lands
    as it does in it (its version 2 made on a copy of version 1, then put in place). It is
    ConcurrentModification (retry), and the retry lands."""
    table_id = [*db, "cleaned"]
    ns.create_table(ln.CreateTableRequest(id=table_id), ipc(pa.table({"v": [1]})))
    location = ns.describe_table(ln.DescribeTableRequest(id=table_id)).location
    ns.count_table_rows(ln.CountTableRowsRequest(id=table_id))  # the dataset kept open, at version 1
    if not kept:  # the first write after a start: pylance opens the location itself
        ns._tables.datasets.forget(location)
    side = f"{location.rstrip('/')}-side"
    for key in store.keys(location):
        store.write(f"{side}/{key}", store.read(f"{location}/{key}") or b"")
    write = lance.write_dataset

    def committed_in_the_race(rows: Any, target: Any, **options: Any) -> Any:
        ours = write(rows, side, **options)  # the insert's version 2, on version 1
        for value in (2, 3):  # meanwhile, by location
            write(pa.table({"v": [value]}), location, mode="append", storage_options=store.storage_options)
        store.dataset(location).cleanup_old_versions(older_than=timedelta(0))
        for key in set(store.keys(side)) - set(store.keys(location)):  # its manifest and data file
            if key.startswith(("_versions/", "data/")) and not key.endswith(".json"):
                store.write(f"{location}/{key}", store.read(f"{side}/{key}") or b"")
        return store.dataset(location, version=ours.version)

    monkeypatch.setattr(lance, "write_dataset", committed_in_the_race)
    with pytest.raises(ConcurrentModificationError, match="not in the table: retry"):
        ns.insert_into_table(ln.InsertIntoTableRequest(id=table_id), ipc(pa.table({"v": [4]})))
    monkeypatch.undo()
    assert sorted(store.dataset(location).to_table()["v"].to_pylist()) == [1, 2, 3]
    ns.insert_into_table(ln.InsertIntoTableRequest(id=table_id), ipc(pa.table({"v": [4]})))
    assert sorted(store.dataset(location).to_table()["v"].to_pylist()) == [1, 2, 3, 4]


@pytest.mark.parametrize("removed_as", ["the write looks for the latest", "pylance commits"])
def test_an_insert_whose_version_a_cleanup_by_location_removes_meanwhile_is_a_retry(
    ns: IcebergLanceNamespace, db: list[str], store: Store, monkeypatch: pytest.MonkeyPatch, removed_as: str
) -> None:
    """A writer by location appends and removes old versions (``cleanup_old_versions``) while an
    insert through the namespace reads the version it builds on: the version it listed as the
    latest, or one pylance reads as it commits, is gone. The table is whole and the next insert
    lands; the answer was 409 "files of its dataset are missing" or 404 "version not found". The
    insert goes on from the new latest, or, once pylance is committing, is ConcurrentModification
    (retry)."""
    table_id = [*db, "swept"]
    ns.create_table(ln.CreateTableRequest(id=table_id), ipc(pa.table({"v": [1]})))
    location = ns.describe_table(ln.DescribeTableRequest(id=table_id)).location
    ns.count_table_rows(ln.CountTableRowsRequest(id=table_id))  # the dataset kept open, at version 1
    write, checkout, sweeps = lance.write_dataset, lance.LanceDataset.checkout_version, []
    write(pa.table({"v": [2]}), location, mode="append", storage_options=store.storage_options)

    def swept() -> None:  # once: version 3 by location, and every version before it removed
        if not sweeps:
            sweeps.append(True)
            write(pa.table({"v": [3]}), location, mode="append", storage_options=store.storage_options)
            store.dataset(location).cleanup_old_versions(older_than=timedelta(0))

    if removed_as == "the write looks for the latest":

        def listed_then_removed(dataset: Any, version: Any) -> Any:
            swept()  # between the listing of version 2 and its checkout
            return checkout(dataset, version)

        monkeypatch.setattr(lance.LanceDataset, "checkout_version", listed_then_removed)
        ns.insert_into_table(ln.InsertIntoTableRequest(id=table_id), ipc(pa.table({"v": [4]})))
    else:

        def read_then_removed(rows: Any, target: Any, **options: Any) -> Any:
            swept()
            gone = f"{location}/_versions/{18446744073709551615 - target.version}.manifest"
            raise OSError(f"LanceError(IO): Not found: {gone.split('://')[-1].lstrip('/')}, lance/src/io.rs:1:1")

        monkeypatch.setattr(lance, "write_dataset", read_then_removed)
        with pytest.raises(ConcurrentModificationError, match="removed meanwhile.*nothing was committed: retry"):
            ns.insert_into_table(ln.InsertIntoTableRequest(id=table_id), ipc(pa.table({"v": [4]})))
        monkeypatch.setattr(lance, "write_dataset", write)
        ns.insert_into_table(ln.InsertIntoTableRequest(id=table_id), ipc(pa.table({"v": [4]})))
    monkeypatch.undo()
    assert sweeps and sorted(store.dataset(location).to_table()["v"].to_pylist()) == [1, 2, 3, 4]
