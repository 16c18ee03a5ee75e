"""Table operations against the real Iceberg REST server (seed 001 semantics and error codes)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lance
import lance.namespace
import pyarrow as pa
import pytest
from lance_namespace import (
    CreateTableRequest,
    DeclareTableRequest,
    DeregisterTableRequest,
    DescribeTableRequest,
    DropTableRequest,
    InsertIntoTableRequest,
    ListTablesRequest,
    RegisterTableRequest,
    RenameTableRequest,
    TableExistsRequest,
)
from lance_namespace.errors import (
    InvalidInputError,
    NamespaceNotFoundError,
    PermissionDeniedError,
    TableAlreadyExistsError,
    TableNotFoundError,
    TableVersionNotFoundError,
)

from lance_iceberg_ns import IcebergLanceNamespace

from ..helpers import create_plain_iceberg_table, ipc, other_client
from ..stores import Store

pytestmark = pytest.mark.usefixtures("store")  # every test on a local disk and on S3


def _tables(ns: IcebergLanceNamespace, db: list[str]) -> list[str]:
    return ns.list_tables(ListTablesRequest(id=db)).tables


def test_declare_table_uses_the_default_location_under_root(
    ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    response = ns.declare_table(DeclareTableRequest(id=[*db, "events"]))
    assert response.location is not None
    assert response.location.startswith(store.at(*db, "events-"))
    assert response.location.endswith(".lance")
    assert response.properties["table_type"] == "lance"
    assert response.managed_versioning is False
    assert _tables(ns, db) == ["events"]


def test_declare_table_stores_request_properties_and_table_type_always_wins(
    ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    location = store.at("elsewhere", "t.lance")
    ns.declare_table(
        DeclareTableRequest(id=[*db, "t"], location=location, properties={"owner": "bo", "table_type": "iceberg"})
    )
    described = ns.describe_table(DescribeTableRequest(id=[*db, "t"]))
    assert described.location == location
    assert described.properties["owner"] == "bo"
    assert described.properties["table_type"] == "lance"


def test_companion_table_has_the_dummy_schema(ns: IcebergLanceNamespace, db: list[str], endpoint: str) -> None:
    ns.declare_table(DeclareTableRequest(id=[*db, "t"]))
    table = other_client(endpoint, db[0]).load_table((*db[1:], "t"))
    fields = table.schema().fields
    assert [(f.name, str(f.field_type), f.required) for f in fields] == [("dummy", "string", False)]


def test_declare_existing_table_raises_table_already_exists(ns: IcebergLanceNamespace, db: list[str]) -> None:
    ns.declare_table(DeclareTableRequest(id=[*db, "t"]))
    with pytest.raises(TableAlreadyExistsError) as caught:
        ns.declare_table(DeclareTableRequest(id=[*db, "t"]))
    assert caught.value.code == 5


def test_declare_in_missing_namespace_raises_namespace_not_found(ns: IcebergLanceNamespace, db: list[str]) -> None:
    with pytest.raises(NamespaceNotFoundError) as caught:
        ns.declare_table(DeclareTableRequest(id=[db[0], "nope", "t"]))
    assert caught.value.code == 1


def test_describe_missing_table_raises_table_not_found(ns: IcebergLanceNamespace, db: list[str]) -> None:
    with pytest.raises(TableNotFoundError) as caught:
        ns.describe_table(DescribeTableRequest(id=[*db, "absent"]))
    assert caught.value.code == 4
    with pytest.raises(TableNotFoundError):
        ns.table_exists(TableExistsRequest(id=[*db, "absent"]))


def test_plain_iceberg_table_is_invalid_input_and_not_listed(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, tmp_path: Path
) -> None:
    create_plain_iceberg_table(endpoint, db[0], (*db[1:], "orders"), str(tmp_path / "orders"))
    with pytest.raises(InvalidInputError) as caught:
        ns.describe_table(DescribeTableRequest(id=[*db, "orders"]))
    assert caught.value.code == 13
    with pytest.raises(InvalidInputError):
        ns.drop_table(DropTableRequest(id=[*db, "orders"]))
    assert _tables(ns, db) == []
    assert other_client(endpoint, db[0]).table_exists((*db[1:], "orders"))


def test_describe_returns_storage_options_from_storage_properties(endpoint: str, store: Store, db: list[str]) -> None:
    properties = {**store.properties, "storage.client_max_retries": "2"}
    with IcebergLanceNamespace(endpoint=endpoint, root=store.root, **properties) as ns:
        declared = ns.declare_table(DeclareTableRequest(id=[*db, "t"]))
        described = ns.describe_table(DescribeTableRequest(id=[*db, "t"]))
    expected = {**store.storage_options, "client_max_retries": "2"}
    assert declared.storage_options == described.storage_options == expected


def test_describe_with_detailed_metadata_reads_version_and_schema(ns: IcebergLanceNamespace, db: list[str]) -> None:
    table_id = [*db, "t"]
    lance.write_dataset(pa.table({"id": [1, 2], "name": ["a", "b"]}), namespace_client=ns, table_id=table_id)
    lance.write_dataset(pa.table({"id": [3], "name": ["c"]}), namespace_client=ns, table_id=table_id, mode="append")
    latest = ns.describe_table(DescribeTableRequest(id=table_id, load_detailed_metadata=True))
    assert latest.version == 2
    assert [f.name for f in latest.var_schema.fields] == ["id", "name"]
    assert latest.table == "t" and latest.namespace == db
    first = ns.describe_table(DescribeTableRequest(id=table_id, load_detailed_metadata=True, version=1))
    assert first.version == 1
    with pytest.raises(TableVersionNotFoundError) as caught:
        ns.describe_table(DescribeTableRequest(id=table_id, load_detailed_metadata=True, version=99))
    assert caught.value.code == 11
    with pytest.raises(TableVersionNotFoundError):
        ns.table_exists(TableExistsRequest(id=table_id, version=99))
    ns.table_exists(TableExistsRequest(id=table_id, version=2))


def test_check_declared_and_table_uri(ns: IcebergLanceNamespace, db: list[str], store: Store) -> None:
    declared = ns.declare_table(DeclareTableRequest(id=[*db, "t"]))
    response = ns.describe_table(DescribeTableRequest(id=[*db, "t"], check_declared=True, with_table_uri=True))
    assert response.is_only_declared is True
    assert response.table_uri == store.uri(declared.location)
    store.write_lance(declared.location)
    assert ns.describe_table(DescribeTableRequest(id=[*db, "t"], check_declared=True)).is_only_declared is False


def test_list_tables_include_declared_false_skips_tables_without_data(
    ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    ns.declare_table(DeclareTableRequest(id=[*db, "declared_only"]))
    with_data = ns.declare_table(DeclareTableRequest(id=[*db, "with_data"]))
    store.write_lance(with_data.location)
    assert _tables(ns, db) == ["declared_only", "with_data"]
    assert ns.list_tables(ListTablesRequest(id=db, include_declared=False)).tables == ["with_data"]


def test_list_tables_in_missing_namespace_raises_namespace_not_found(ns: IcebergLanceNamespace, db: list[str]) -> None:
    with pytest.raises(NamespaceNotFoundError):
        ns.list_tables(ListTablesRequest(id=[db[0], "absent"]))


def test_a_table_in_a_missing_namespace_leaves_no_file(ns: IcebergLanceNamespace, db: list[str], store: Store) -> None:
    """The catalog writes the new table's metadata before it finds the namespace missing."""
    with pytest.raises(NamespaceNotFoundError):
        ns.declare_table(DeclareTableRequest(id=[db[0], "absent", "t"]))
    with pytest.raises(NamespaceNotFoundError):
        ns.create_table({"id": [db[0], "absent", "t"]}, ipc(pa.table({"v": [1]})))
    given = store.at("given", "t.lance")  # a location of the caller's, there already and empty
    store.make_directory(given)
    with pytest.raises(NamespaceNotFoundError):
        ns.declare_table(DeclareTableRequest(id=[db[0], "absent", "t"], location=given))
    assert store.keys() == []
    assert ns.declare_table(DeclareTableRequest(id=[*db, "t"], location=given)).location == given


@pytest.fixture
def ns_dropping_at_once(endpoint: str, store: Store) -> Iterator[IcebergLanceNamespace]:
    """The bridge with soft_delete=false: drop_table deletes the data at once."""
    with store.namespace(endpoint, soft_delete="false") as namespace:
        yield namespace


def test_drop_table_at_once_removes_catalog_entry_and_lance_data(
    ns_dropping_at_once: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    ns = ns_dropping_at_once
    table_id = [*db, "t"]
    dataset = lance.write_dataset(pa.table({"id": [1]}), namespace_client=ns, table_id=table_id)
    location = dataset.uri
    response = ns.drop_table(DropTableRequest(id=table_id))
    assert response.location == location
    assert not store.exists(location)
    assert _tables(ns, db) == []
    with pytest.raises(TableNotFoundError):
        ns.describe_table(DescribeTableRequest(id=table_id))
    assert ns.table_status(table_id).state == "not_found"


def test_drop_declared_only_table_at_once_leaves_no_files(
    ns_dropping_at_once: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    declared = ns_dropping_at_once.declare_table(DeclareTableRequest(id=[*db, "t"]))
    ns_dropping_at_once.drop_table(DropTableRequest(id=[*db, "t"]))
    assert not store.exists(declared.location)


def test_resolve_table_answers_where_the_table_is_and_which_entry_it_is(
    ns: IcebergLanceNamespace, db: list[str]
) -> None:
    declared = ns.declare_table(DeclareTableRequest(id=[*db, "t"]))
    proved = ns.resolve_table([*db, "t"], proved=True)
    assert (proved.location, proved.managed) == (declared.location, False)
    assert proved.entry.name == (db[0], *db[1:], "t") and proved.entry.table_uuid
    assert ns.resolve_table([*db, "t"]).place == proved.place
    with pytest.raises(TableNotFoundError):
        ns.resolve_table([*db, "absent"])


def test_a_read_resolves_an_unchanged_catalog_answer_once_and_a_changed_one_again(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every read asks the catalog (a 304 when nothing changed): the table it resolves to is kept
    with that answer, and worked out again only when the answer changes (an engine turned the
    table managed, here)."""
    from lance_iceberg_ns.tables.lifecycle import Tables

    ns.create_table(CreateTableRequest(id=[*db, "t"]), ipc(pa.table({"v": [1]})))
    first = ns._tables.resolve([*db, "t"])
    worked_out: list[bool] = []
    resolved = Tables.resolved
    monkeypatch.setattr(Tables, "resolved", lambda *a, **k: worked_out.append(True) or resolved(*a, **k))
    assert ns._tables.resolve([*db, "t"]) is first and not worked_out
    companion = other_client(endpoint, db[0]).load_table((db[1], "t"))
    with companion.transaction() as changing:
        changing.set_properties(table_version_management="true")
    again = ns._tables.resolve([*db, "t"])
    assert worked_out and again.managed and not first.managed
    assert ns._tables.resolve([*db, "t"]) is again and len(worked_out) == 1


def test_remove_declared_table_takes_back_only_that_entry_and_only_while_nothing_was_written(
    ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    written = ns.declare_table(DeclareTableRequest(id=[*db, "written"]))
    store.write_lance(written.location)
    assert ns.remove_declared_table([*db, "written"], ns.resolve_table([*db, "written"]).place) is False
    assert ns.describe_table(DescribeTableRequest(id=[*db, "written"], check_declared=True)).is_only_declared is False
    first = ns.declare_table(DeclareTableRequest(id=[*db, "t"]))
    first_place = ns.resolve_table([*db, "t"]).place
    ns.deregister_table(DeregisterTableRequest(id=[*db, "t"]))
    second = ns.declare_table(DeclareTableRequest(id=[*db, "t"]))  # another client took the name meanwhile
    assert ns.remove_declared_table([*db, "t"], first_place) is False
    assert ns.describe_table(DescribeTableRequest(id=[*db, "t"])).location == second.location
    assert ns.remove_declared_table([*db, "t"], ns.resolve_table([*db, "t"]).place) is True
    with pytest.raises(TableNotFoundError):
        ns.describe_table(DescribeTableRequest(id=[*db, "t"]))
    assert not store.exists(second.location) and first.location != second.location


def test_drop_missing_table_raises_table_not_found(ns: IcebergLanceNamespace, db: list[str]) -> None:
    with pytest.raises(TableNotFoundError):
        ns.drop_table(DropTableRequest(id=[*db, "absent"]))


def test_deregister_keeps_the_data_and_register_brings_it_back(
    ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    table_id = [*db, "t"]
    lance.write_dataset(pa.table({"id": [1, 2, 3]}), namespace_client=ns, table_id=table_id)
    gone = ns.deregister_table(DeregisterTableRequest(id=table_id))
    assert store.dataset(gone.location).count_rows() == 3
    assert _tables(ns, db) == []
    with pytest.raises(TableNotFoundError):
        ns.deregister_table(DeregisterTableRequest(id=table_id))
    registered = ns.register_table(
        RegisterTableRequest(id=[*db, "back"], location=gone.location, properties={"k": "v"})
    )
    assert registered.location == gone.location
    assert lance.dataset(namespace_client=ns, table_id=[*db, "back"]).count_rows() == 3
    assert ns.describe_table(DescribeTableRequest(id=[*db, "back"])).properties["k"] == "v"


def test_register_location_without_dataset_raises_invalid_input_and_creates_nothing(
    ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    with pytest.raises(InvalidInputError):
        ns.register_table(RegisterTableRequest(id=[*db, "t"], location=store.at("ext", "nothing-here.lance")))
    assert _tables(ns, db) == []


def test_register_existing_name_raises_table_already_exists_unless_overwrite(
    ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    first, second = store.at("ext", "first.lance"), store.at("ext", "second.lance")
    store.write_lance(first, rows=1)
    store.write_lance(second, rows=2)
    ns.register_table(RegisterTableRequest(id=[*db, "t"], location=first))
    with pytest.raises(TableAlreadyExistsError):
        ns.register_table(RegisterTableRequest(id=[*db, "t"], location=second))
    ns.register_table(RegisterTableRequest(id=[*db, "t"], location=second, mode="Overwrite"))
    assert ns.describe_table(DescribeTableRequest(id=[*db, "t"])).location == second
    assert store.dataset(first).count_rows() == 1  # the replaced registration's data is untouched


def test_register_relative_location_names_a_dataset_in_the_namespace_directory(
    ns: IcebergLanceNamespace, db: list[str], store: Store
) -> None:
    lance.write_dataset(pa.table({"id": [1, 2, 3]}), namespace_client=ns, table_id=[*db, "physical"])
    gone = ns.deregister_table(DeregisterTableRequest(id=[*db, "physical"]))
    relative = gone.location.rsplit("/", 1)[1]  # what pylance's own REST tests register again
    registered = ns.register_table(RegisterTableRequest(id=[*db, "registered"], location=relative))
    assert registered.location == relative  # answered as asked, as Lance's directory namespace does
    assert ns.describe_table(DescribeTableRequest(id=[*db, "registered"])).location == gone.location
    assert lance.dataset(namespace_client=ns, table_id=[*db, "registered"]).count_rows() == 3
    store.write_lance(store.at(*db, "sub", "nested.lance"), rows=2)
    ns.register_table(RegisterTableRequest(id=[*db, "nested"], location="./sub/nested.lance"))
    assert ns.describe_table(DescribeTableRequest(id=[*db, "nested"])).location == store.at(*db, "sub", "nested.lance")


def test_register_relative_location_follows_the_ownership_rules_of_an_absolute_one(
    ns: IcebergLanceNamespace, db: list[str]
) -> None:
    lance.write_dataset(pa.table({"id": [1]}), namespace_client=ns, table_id=[*db, "owned"])
    relative = ns.describe_table(DescribeTableRequest(id=[*db, "owned"])).location.rsplit("/", 1)[1]
    with pytest.raises(PermissionDeniedError):  # another entry owns it
        ns.register_table(RegisterTableRequest(id=[*db, "twin"], location=relative))
    with pytest.raises(InvalidInputError):  # no dataset there
        ns.register_table(RegisterTableRequest(id=[*db, "twin"], location="nothing-here.lance"))
    with pytest.raises(PermissionDeniedError):  # under the root, a table directory ends in .lance
        ns.register_table(RegisterTableRequest(id=[*db, "twin"], location="plain-directory"))
    assert _tables(ns, db) == ["owned"]


@pytest.mark.parametrize(
    "relative", ["../outside.lance", "sub/../../outside.lance", "sub//t.lance", "t.lance/", "%2e%2e/outside.lance"]
)
def test_register_relative_location_that_escapes_or_has_empty_parts_raises_invalid_input(
    ns: IcebergLanceNamespace, db: list[str], store: Store, relative: str
) -> None:
    store.write_lance(store.at(db[0], "outside.lance"))  # what an escape from the namespace's directory would reach
    store.write_lance(store.at(*db, "sub", "t.lance"))
    with pytest.raises(InvalidInputError):
        ns.register_table(RegisterTableRequest(id=[*db, "t"], location=relative))
    assert _tables(ns, db) == []


def test_pylance_rest_client_registers_a_relative_location(
    ns: IcebergLanceNamespace, rest: lance.namespace.RestNamespace, db: list[str], store: Store
) -> None:
    declared = ns.declare_table(DeclareTableRequest(id=[*db, "physical"]))
    store.write_lance(declared.location, rows=2)
    gone = rest.deregister_table(DeregisterTableRequest(id=[*db, "physical"]))
    relative = gone.location.rsplit("/", 1)[1]
    registered = rest.register_table(RegisterTableRequest(id=[*db, "registered"], location=relative))
    assert registered.location == relative
    rest.table_exists(TableExistsRequest(id=[*db, "registered"]))
    assert rest.describe_table(DescribeTableRequest(id=[*db, "registered"])).location == declared.location
    with pytest.raises(InvalidInputError, match="Path traversal is not allowed"):  # the reference's words
        rest.register_table(RegisterTableRequest(id=[*db, "escaped"], location="../registered.lance"))
    for outside, words in (("/tmp/elsewhere.lance", "Absolute paths"), ("s3://bucket/t.lance", "Absolute URIs")):
        with pytest.raises(PermissionDeniedError, match=f"{words} are not allowed outside the storage root"):
            rest.register_table(RegisterTableRequest(id=[*db, "outside"], location=outside))
    assert _tables(ns, db) == ["registered"]


def test_rename_table_within_the_warehouse(ns: IcebergLanceNamespace, db: list[str]) -> None:
    table_id = [*db, "old"]
    lance.write_dataset(pa.table({"id": [1]}), namespace_client=ns, table_id=table_id)
    other_db = [db[0], "archive"]
    ns.create_namespace({"id": other_db})
    ns.rename_table(RenameTableRequest(id=table_id, new_table_name="new", new_namespace_id=other_db))
    assert _tables(ns, db) == []
    assert _tables(ns, other_db) == ["new"]
    assert lance.dataset(namespace_client=ns, table_id=[*other_db, "new"]).count_rows() == 1


def test_rename_errors(ns: IcebergLanceNamespace, db: list[str]) -> None:
    ns.declare_table(DeclareTableRequest(id=[*db, "a"]))
    ns.declare_table(DeclareTableRequest(id=[*db, "b"]))
    with pytest.raises(TableAlreadyExistsError):
        ns.rename_table(RenameTableRequest(id=[*db, "a"], new_table_name="b"))
    with pytest.raises(TableNotFoundError):
        ns.rename_table(RenameTableRequest(id=[*db, "absent"], new_table_name="c"))
    with pytest.raises(InvalidInputError):
        ns.rename_table(RenameTableRequest(id=[*db, "a"], new_table_name="c", new_namespace_id=["other_wh", "x"]))
    with pytest.raises(NamespaceNotFoundError):
        ns.rename_table(RenameTableRequest(id=[*db, "a"], new_table_name="c", new_namespace_id=[db[0], "absent"]))
    assert _tables(ns, db) == ["a", "b"]


@pytest.mark.parametrize(
    "bad_id",
    [
        ["wh", "t"],
        ["wh"],
        [],
        ["wh", "", "t"],
        ["wh", "db", ".."],
        ["wh", "..", "t"],
        ["wh", "db", "a/b"],
        ["wh", "db", "a\\b"],
        ["wh", "db", "tab\x1fle"],
        ["wh", "db", "new\nline"],
        ["wh", "db", " padded "],
        "wh.db.t",
    ],
)
def test_bad_table_identifiers_raise_invalid_input_and_create_nothing(
    ns: IcebergLanceNamespace, db: list[str], store: Store, bad_id: list[str]
) -> None:
    if isinstance(bad_id, list) and bad_id[:1] == ["wh"]:
        bad_id = [db[0], *bad_id[1:]]
    with pytest.raises(InvalidInputError) as caught:
        ns.declare_table({"id": bad_id})
    assert caught.value.code == 13
    with pytest.raises(InvalidInputError):
        ns.register_table({"id": bad_id, "location": store.root})
    assert _tables(ns, db) == []
    assert store.keys() == []


def test_table_operations_accept_plain_dicts(ns: IcebergLanceNamespace, db: list[str]) -> None:
    ns.declare_table({"id": [*db, "t"], "properties": {"a": "b"}})
    described = ns.describe_table({"id": [*db, "t"], "vend_credentials": True})
    assert described.properties["a"] == "b"
    ns.table_exists({"id": [*db, "t"]})
    with pytest.raises(InvalidInputError):
        ns.describe_table({"id": [*db, "t"], "version": "not-a-number"})


def test_drop_restored_table_drops_only_a_table_not_written_since_it_was_brought_back(
    ns: IcebergLanceNamespace, db: list[str]
) -> None:
    from lance_namespace import CountTableRowsRequest, CreateTableRequest, InsertIntoTableRequest

    table = [*db, "reborn"]
    ns.create_table(CreateTableRequest(id=table), ipc(pa.table({"id": range(10)})))
    place = ns.resolve_table(table).place
    restored_after = time.time()  # as a create that brought it back from the trash then saw it
    ns.insert_into_table(InsertIntoTableRequest(id=table), ipc(pa.table({"id": range(5)})))  # another client's
    assert ns.drop_restored_table(table, place, restored_after) is False
    assert ns.count_table_rows(CountTableRowsRequest(id=table)).count == 15
    assert ns.drop_restored_table(table, place, time.time()) is True
    with pytest.raises(TableNotFoundError):
        ns.describe_table(DescribeTableRequest(id=table))


def test_a_create_tells_the_mark_of_its_entry_before_it_declares_and_the_place_after(
    ns: IcebergLanceNamespace, db: list[str]
) -> None:
    """A create's worker may end between declaring the table and telling where it is: the first
    note, sent before anything is made, names the mark its entry bears, which alone is enough to
    take that very entry back."""
    from lance_namespace import CreateTableRequest

    from lance_iceberg_ns.tables.lifecycle import told_of_declared

    table, notes = [*db, "told"], []
    telling = told_of_declared.set(lambda *note: notes.append(note))
    try:
        ns.create_table(CreateTableRequest(id=table), ipc(pa.table({"id": range(3)})))
    finally:
        told_of_declared.reset(telling)
    (first_table, no_place, _, create_id), (_, place, restored_after, _) = notes
    assert list(first_table) == table and no_place is None and create_id
    assert place == ns.resolve_table(table).place and place[1].claim == create_id and restored_after is None

    declared = [*db, "marked"]
    ns.declare_table(DeclareTableRequest(id=declared))
    mark = ns.resolve_table(declared).entry.claim
    assert ns.remove_declared_table(declared, None, "another create's mark") is False
    assert ns.remove_declared_table(declared, None, mark) is True
    with pytest.raises(TableNotFoundError):
        ns.describe_table(DescribeTableRequest(id=declared))


def test_a_create_exist_ok_that_another_create_beats_to_the_name_is_answered_with_the_table(
    ns: IcebergLanceNamespace, db: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both found no table; the other declared it first: exist_ok is answered with that table, not
    409 (a plain create still is)."""
    tables = type(ns._tables)
    make_room = tables._make_room
    winners: dict[str, str] = {}

    def another_create_declares_first(self: Any, table: Any, *args: Any) -> bool:
        if self is ns._tables:  # the other's create goes through undisturbed
            with IcebergLanceNamespace(**ns.properties) as other:
                created = other.create_table(CreateTableRequest(id=table.parts), ipc(pa.table({"v": [1]})))
            winners[table.parts[-1]] = created.location
        return make_room(self, table, *args)

    monkeypatch.setattr(tables, "_make_room", another_create_declares_first)
    answer = ns.create_table(CreateTableRequest(id=[*db, "raced"], mode="exist_ok"), ipc(pa.table({"v": [2]})))
    assert answer.location == winners["raced"]
    with pytest.raises(TableAlreadyExistsError):
        ns.create_table(CreateTableRequest(id=[*db, "raced_too"]), ipc(pa.table({"v": [2]})))
    monkeypatch.undo()
    for name in ("raced", "raced_too"):
        assert lance.dataset(namespace_client=ns, table_id=[*db, name]).to_table()["v"].to_pylist() == [1]


@pytest.mark.parametrize("managed", [False, True], ids=["plain", "managed"])
def test_rows_inserted_into_a_table_a_create_declared_stay_when_its_write_follows(
    endpoint: str, store: Store, db: list[str], monkeypatch: pytest.MonkeyPatch, managed: bool
) -> None:
    """A create declares its table, then writes: a client that inserts into the declared table in
    between is answered, and its rows stay (the create's write was an overwrite, which replaced
    them); the create's rows are added to them."""
    table_id = [*db, "raced"]
    acknowledged: list[int] = []
    with (
        store.namespace(endpoint, table_version_management=str(managed).lower()) as creator,
        store.namespace(endpoint, table_version_management=str(managed).lower()) as other,
    ):
        write = creator._tables.datasets.write

        def insert_first(*args: object) -> object:
            answer = other.insert_into_table(InsertIntoTableRequest(id=table_id), ipc(pa.table({"v": [1]})))
            acknowledged.append(answer.version)
            return write(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(creator._tables.datasets, "write", insert_first)
        created = creator.create_table(CreateTableRequest(id=table_id), ipc(pa.table({"v": [2]})))
        monkeypatch.undo()
        assert acknowledged == [1] and created.version == 2
        rows = lance.dataset(namespace_client=other, table_id=table_id).to_table()["v"].to_pylist()
        assert sorted(rows) == [1, 2]
