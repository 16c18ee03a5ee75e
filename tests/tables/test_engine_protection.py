"""Companion tables carry gc.enabled=false and write.format.default=lance, so that Iceberg engines
on the same catalog neither delete nor write Lance's files: new ones from the start; old ones, and
ones whose protection an engine's client turned off, from their next bridge read or write or
``tables protect`` (and ``tables protect --check`` finds them meanwhile). pyiceberg and DuckDB's
Iceberg extension here; Spark in tests/spark/test_spark_iceberg.py."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from lance_namespace import CreateNamespaceRequest, DeclareTableRequest, DescribeTableRequest, DropTableRequest
from lance_namespace.errors import InvalidInputError
from pyiceberg import exceptions as iceberg

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.catalog.companions import ENGINE_PROTECTION, Companions
from lance_iceberg_ns.catalog.warehouses import BridgeRestCatalog

from ..conftest import RequestCounter
from ..helpers import (
    CliResult,
    CommandLine,
    catalog_state,
    create_plain_iceberg_table,
    files_under,
    ipc,
    other_client,
    write_values,
)

COMPANIONS_LOG = "lance_iceberg_ns.catalog.companions"


def _properties(endpoint: str, table_id: list[str]) -> dict[str, str]:
    """A table's properties as another client of the catalog reads them."""
    return dict(other_client(endpoint, table_id[0]).load_table(tuple(table_id[1:])).properties)


def _alter(
    endpoint: str, table_id: list[str], setting: dict[str, str] | None = None, removing: tuple[str, ...] = ()
) -> None:
    """What ``ALTER TABLE ... SET`` (or ``UNSET``) ``TBLPROPERTIES`` does, through pyiceberg's own
    client: no bridge involved."""
    table = other_client(endpoint, table_id[0]).load_table(tuple(table_id[1:]))
    with table.transaction() as transaction:
        if setting:
            transaction.set_properties(setting)
        if removing:
            transaction.remove_properties(*removing)


def _unprotect(endpoint: str, table_id: list[str]) -> None:
    """Make a companion look like one made before the protection existed."""
    _alter(endpoint, table_id, removing=tuple(ENGINE_PROTECTION))
    assert not set(ENGINE_PROTECTION) & set(_properties(endpoint, table_id))


def _protected(properties: dict[str, str]) -> bool:
    return all(properties.get(key) == value for key, value in ENGINE_PROTECTION.items())


def _metadata_location(endpoint: str, table_id: list[str]) -> str:
    """Where the catalog keeps the table's current metadata: it moves with every commit."""
    return str(other_client(endpoint, table_id[0]).load_table(tuple(table_id[1:])).metadata_location)


def _lance_files(location: Path) -> dict[str, str]:
    """The Lance table's files, byte for byte: all but the catalog's own, in ``metadata/``."""
    return {name: digest for name, digest in files_under(location).items() if not name.startswith("metadata/")}


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == COMPANIONS_LOG]


def test_every_new_companion_is_protected_and_shows_it(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, tmp_path: Path
) -> None:
    declared = ns.declare_table(DeclareTableRequest(id=[*db, "declared"], properties={"owner": "a"}))
    assert _protected(declared.properties or {}) and declared.properties["owner"] == "a"
    write_values(ns, [*db, "written"], [1, 2, 3])
    registered_at = str(tmp_path / "registered.lance")
    lance.write_dataset(pa.table({"v": [1]}), registered_at)
    ns.allowing(str(tmp_path)).register_table({"id": [*db, "registered"], "location": registered_at})
    managed = IcebergLanceNamespace(**{**ns.properties, "table_version_management": "true"})
    write_values(managed, [*db, "managed"], [1])
    for name in ("declared", "written", "registered", "managed"):
        assert _protected(_properties(endpoint, [*db, name])), name
    described = ns.describe_table(DescribeTableRequest(id=[*db, "written"]))
    assert _protected(described.properties or {})


@pytest.mark.parametrize(
    "requested",
    [{"gc.enabled": "true"}, {" GC.Enabled ": "TRUE"}, {"write.format.default": "parquet"}, {"gc.enabled": ""}],
)
def test_a_request_that_turns_the_protection_off_is_refused_and_changes_nothing(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, lance_root: Path, requested: dict[str, str]
) -> None:
    before = catalog_state(endpoint, db[0]), files_under(lance_root)
    with pytest.raises(InvalidInputError, match="Iceberg engines"):
        ns.declare_table(DeclareTableRequest(id=[*db, "t"], properties=requested))
    with pytest.raises(InvalidInputError, match="Iceberg engines"):
        ns.create_table({"id": [*db, "t"], "properties": requested}, ipc(pa.table({"v": [1]})))
    assert (catalog_state(endpoint, db[0]), files_under(lance_root)) == before


def test_a_request_that_asks_for_the_protection_gets_it_once(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str
) -> None:
    ns.declare_table(
        DeclareTableRequest(id=[*db, "t"], properties={"gc.enabled": "FALSE", "write.format.default": "Lance"})
    )
    properties = _properties(endpoint, [*db, "t"])
    assert _protected(properties) and "FALSE" not in properties.values()


def test_pyiceberg_cannot_append_to_a_companion(ns: IcebergLanceNamespace, db: list[str], endpoint: str) -> None:
    location = Path(write_values(ns, [*db, "t"], [1, 2, 3]))
    before = files_under(location)
    table = other_client(endpoint, db[0]).load_table((db[1], "t"))
    with pytest.raises(ValueError, match="'lance' is not a valid FileFormat"):
        table.append(pa.table({"dummy": pa.array(["x"], pa.string())}))
    assert files_under(location) == before
    assert lance.dataset(str(location)).to_table()["v"].to_pylist() == [1, 2, 3]


def test_an_old_companion_is_protected_by_its_next_bridge_write(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str
) -> None:
    table_id = [*db, "old"]
    write_values(ns, table_id, [1])
    _unprotect(endpoint, table_id)
    ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [2]})))
    assert _protected(_properties(endpoint, table_id))
    assert ns.count_table_rows({"id": table_id}).count == 2


def _read_count(ns: IcebergLanceNamespace, table_id: list[str]) -> int:
    return ns.count_table_rows({"id": table_id}).count


def _read_through_pylance(ns: IcebergLanceNamespace, table_id: list[str]) -> int:
    return lance.dataset(namespace_client=ns, table_id=table_id).count_rows()  # describe_table, then the files


def _read_described(ns: IcebergLanceNamespace, table_id: list[str]) -> int:
    properties = ns.describe_table(DescribeTableRequest(id=table_id)).properties or {}
    assert _protected(properties)  # the answer shows the protection as the catalog now holds it
    return 3


@pytest.mark.parametrize("read", [_read_count, _read_through_pylance, _read_described])
def test_protection_another_client_turned_off_is_restored_by_the_next_bridge_read_with_a_warning(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, caplog: pytest.LogCaptureFixture, read: Any
) -> None:
    table_id = [*db, "t"]
    location = Path(write_values(ns, table_id, [1, 2, 3]))
    before = _lance_files(location)
    _alter(endpoint, table_id, {"gc.enabled": "true"}, removing=("write.format.default",))
    caplog.set_level(logging.WARNING, logger=COMPANIONS_LOG)
    assert read(ns, table_id) == 3
    assert _protected(_properties(endpoint, table_id))
    (warning,) = _warnings(caplog)
    name = ".".join(table_id)
    assert f"Lance table {name} had its protection from Iceberg engines turned off" in warning
    assert "gc.enabled changed, write.format.default removed" in warning
    caplog.clear()
    assert read(ns, table_id) == 3 and not _warnings(caplog)  # restored once
    assert _lance_files(location) == before


def test_a_read_of_a_protected_table_asks_the_catalog_nothing_more_and_a_restore_costs_one_commit(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, request_counter: RequestCounter
) -> None:
    table_id = [*db, "t"]
    write_values(ns, table_id, [1, 2, 3])
    assert _read_count(ns, table_id) == 3
    request_counter.reset()
    assert _read_count(ns, table_id) == 3
    protected_read = list(request_counter.requests)
    assert [method for method, _ in protected_read] == ["GET"]  # the loadTable answer alone
    _alter(endpoint, table_id, {"gc.enabled": "TRUE"})
    request_counter.reset()
    assert _read_count(ns, table_id) == 3
    commits = [url for method, url in request_counter.requests if method == "POST"]
    assert len(commits) == 1 and commits[0].split("?")[0].endswith(f"/tables/{table_id[-1]}")
    assert len(request_counter.requests) == len(protected_read) + 1
    request_counter.reset()
    assert _read_count(ns, table_id) == 3
    assert request_counter.requests == protected_read


def test_an_old_managed_companion_is_protected_by_its_next_version(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str
) -> None:
    managed = IcebergLanceNamespace(**{**ns.properties, "table_version_management": "true"})
    table_id = [*db, "old"]
    write_values(managed, table_id, [1])
    _unprotect(endpoint, table_id)
    managed = IcebergLanceNamespace(**managed.properties)  # knows nothing of the table yet, as after an upgrade
    write_values(managed, table_id, [2], mode="append")  # pylance commits the version through the bridge
    assert _protected(_properties(endpoint, table_id))
    assert [v.version for v in managed.list_table_versions({"id": table_id}).versions] == [1, 2]
    assert lance.dataset(namespace_client=managed, table_id=table_id).count_rows() == 2


def test_a_managed_table_whose_management_an_engine_removed_gets_it_back_and_loses_no_write(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An engine unsets ``table_version_management`` on a table whose catalog records its Lance
    versions. Writes through the bridge then went to disk by Lance's own commits, and once the
    property was back, the catalog's readers saw none of them (21 rows of 56). The bridge puts
    the property back before its next operation, with the protection, and every write stays a
    version the catalog records."""
    managed = IcebergLanceNamespace(**{**ns.properties, "table_version_management": "true"})
    table_id = [*db, "flipped"]
    write_values(managed, table_id, [1])
    _alter(endpoint, table_id, removing=("table_version_management",))
    caplog.set_level(logging.WARNING, logger=COMPANIONS_LOG)
    for value in (2, 3):
        managed.insert_into_table({"id": table_id}, ipc(pa.table({"v": [value]})))
    assert _properties(endpoint, table_id)["table_version_management"] == "true"
    assert any("table_version_management removed" in warning for warning in _warnings(caplog))
    assert [v.version for v in managed.list_table_versions({"id": table_id}).versions] == [1, 2, 3]
    _alter(endpoint, table_id, removing=("table_version_management",))
    other = IcebergLanceNamespace(**ns.properties)  # any bridge, whatever its own setting
    assert other.count_table_rows({"id": table_id}).count == 3
    assert _properties(endpoint, table_id)["table_version_management"] == "true"


def test_a_managed_table_stays_managed_when_its_management_cannot_be_put_back(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bridge whose principal may not change table properties cannot put the management back:
    the table, whose catalog records Lance versions, is managed all the same, and its writes are
    versions the catalog records."""
    managed = IcebergLanceNamespace(**{**ns.properties, "table_version_management": "true"})
    table_id = [*db, "kept"]
    write_values(managed, table_id, [1])
    _alter(endpoint, table_id, removing=("table_version_management",))

    def forbidden(*_: object, **__: object) -> None:
        raise iceberg.ForbiddenError("not allowed to change table properties")

    monkeypatch.setattr(Companions, "_commit_protection", forbidden)
    other = IcebergLanceNamespace(**ns.properties)
    assert other.describe_table({"id": table_id}).managed_versioning is True
    other.insert_into_table({"id": table_id}, ipc(pa.table({"v": [2]})))
    assert [v.version for v in other.list_table_versions({"id": table_id}).versions] == [1, 2]
    assert "table_version_management" not in _properties(endpoint, table_id)
    assert other.count_table_rows({"id": table_id}).count == 2


def test_a_catalog_that_refuses_the_protection_does_not_stop_a_write(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    table_id = [*db, "old"]
    write_values(ns, table_id, [1])
    _unprotect(endpoint, table_id)

    def forbidden(*_: object, **__: object) -> None:
        raise iceberg.ForbiddenError("not allowed to change table properties")

    monkeypatch.setattr(BridgeRestCatalog, "commit_changes", forbidden)
    ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [2]})))
    assert ns.count_table_rows({"id": table_id}).count == 2
    assert not _protected(_properties(endpoint, table_id))


def test_a_reader_that_may_not_change_table_properties_reads_and_is_warned_once_a_while(
    ns: IcebergLanceNamespace,
    db: list[str],
    endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    table_id = [*db, "t"]
    write_values(ns, table_id, [1, 2, 3])
    _alter(endpoint, table_id, {"gc.enabled": "true"})
    refused = []

    def forbidden(*_: object, **__: object) -> None:
        refused.append(True)
        raise iceberg.ForbiddenError("not allowed to change table properties")

    monkeypatch.setattr(BridgeRestCatalog, "commit_changes", forbidden)
    caplog.set_level(logging.WARNING, logger=COMPANIONS_LOG)
    for _ in range(3):
        assert ns.count_table_rows({"id": table_id}).count == 3
    assert lance.dataset(namespace_client=ns, table_id=table_id).count_rows() == 3
    assert len(refused) == 1  # not asked again on every read
    (warning,) = _warnings(caplog)
    assert warning.startswith(f"Could not protect {'.'.join(table_id)} from Iceberg engines (gc.enabled changed)")
    assert "ForbiddenError" in warning and "tables protect" in warning
    assert _properties(endpoint, table_id)["gc.enabled"] == "true"


def test_protect_command_protects_every_lance_table_of_a_warehouse_once(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, tmp_path: Path, cli: CommandLine
) -> None:
    warehouse, sub = db[0], [*db, "sub"]
    ns.create_namespace(CreateNamespaceRequest(id=sub))
    other = [warehouse, "other"]
    ns.create_namespace(CreateNamespaceRequest(id=other))
    tables = {
        "top": [*db, "top"],
        "nested": [*sub, "nested"],
        "declared": [*db, "declared"],
        "elsewhere": [*other, "t"],
    }
    for name, table_id in tables.items():
        if name == "declared":
            ns.declare_table(DeclareTableRequest(id=table_id))
        else:
            write_values(ns, table_id, [1])
    write_values(ns, [*db, "dropped"], [1])
    ns.drop_table(DropTableRequest(id=[*db, "dropped"]))  # soft-deleted: into the trash, protected as it was
    create_plain_iceberg_table(endpoint, warehouse, (db[1], "plain"), str(tmp_path / "plain"))
    plain_before = _properties(endpoint, [*db, "plain"])
    for name in ("top", "nested", "declared", "elsewhere"):
        _unprotect(endpoint, tables[name])

    def protect(*arguments: str) -> CliResult:
        done = cli("tables", "protect", *arguments)
        assert done.returncode == 0, done.stderr
        return done

    def as_json(*arguments: str) -> Any:
        return json.loads(protect(*arguments, "--json").stdout)

    one_namespace = as_json(warehouse, db[1])  # db and beneath, not "other" nor the warehouse's trash
    assert sorted(one_namespace["protected"]) == sorted(".".join(tables[n]) for n in ("top", "nested", "declared"))
    assert one_namespace["was_missing"][".".join(tables["top"])] == list(ENGINE_PROTECTION)
    assert one_namespace["already_protected_count"] == 0
    assert not _protected(_properties(endpoint, tables["elsewhere"]))
    human = protect(warehouse).stdout  # the soft-deleted one, in the trash, protected as it was
    assert "protected 1 Lance table(s); 4 already were" in human and ".".join(tables["elsewhere"]) in human
    again = as_json(warehouse)
    assert (again["protected_count"], again["already_protected_count"]) == (0, 5)
    for table_id in tables.values():
        assert _protected(_properties(endpoint, table_id))
    assert _properties(endpoint, [*db, "plain"]) == plain_before  # never touched


def test_protect_check_lists_the_unprotected_lance_tables_changes_nothing_and_fails(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, tmp_path: Path, cli: CommandLine
) -> None:
    warehouse = db[0]
    tables = {name: [*db, name] for name in ("flipped", "old", "fine")}
    for table_id in tables.values():
        write_values(ns, table_id, [1])
    _alter(endpoint, tables["flipped"], {"gc.enabled": "true"})
    _alter(endpoint, tables["old"], removing=("write.format.default", "write.parquet.compression-codec"))
    create_plain_iceberg_table(endpoint, warehouse, (db[1], "plain"), str(tmp_path / "plain"))  # never listed
    ids = [*tables.values(), [*db, "plain"]]
    before = [_metadata_location(endpoint, table_id) for table_id in ids]

    found = cli.json("tables", "protect", "--check", warehouse, code=1)
    assert sorted(found["unprotected"], key=lambda entry: entry["table"]) == [
        {"table": ".".join(tables["flipped"]), "missing": ["gc.enabled"]},
        {"table": ".".join(tables["old"]), "missing": ["write.format.default", "write.parquet.compression-codec"]},
    ]
    assert (found["unprotected_count"], found["protected_count"]) == (2, 1)
    assert found["properties"] == ENGINE_PROTECTION
    human = cli("tables", "protect", "--check", warehouse, db[1])
    assert human.returncode == 1, human.stderr
    assert "2 Lance table(s) without their protection from Iceberg engines; 1 with it" in human.stdout
    assert ".".join(tables["flipped"]) in human.stdout and "gc.enabled" in human.stdout
    assert f"tables protect {warehouse} {db[1]}" in human.stderr
    assert [_metadata_location(endpoint, table_id) for table_id in ids] == before  # no commit anywhere

    assert cli("tables", "protect", warehouse).returncode == 0
    found = cli.json("tables", "protect", "--check", warehouse)  # exit 0
    assert (found["unprotected"], found["protected_count"]) == ([], 3)
    assert "all 3 Lance table(s) are protected" in cli("tables", "protect", "--check", warehouse).stdout


def test_protect_command_for_a_missing_namespace_is_not_found(cli: CommandLine, db: list[str]) -> None:
    done = cli("tables", "protect", db[0], "missing")
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith("error: NamespaceNotFound") and "Traceback" not in done.stderr


@pytest.fixture
def duckdb_with_iceberg() -> Iterator[Any]:
    """DuckDB with the Iceberg extension of the installed wheels (and the avro and httpfs extensions
    it needs loaded first), never downloading one."""
    duckdb = pytest.importorskip("duckdb")
    config = {"allow_unsigned_extensions": "true", "autoinstall_known_extensions": "false"}
    connection = duckdb.connect(config=config)
    for name in ("avro", "httpfs", "iceberg"):
        wheel = pytest.importorskip(f"duckdb_extension_{name}", reason="the dev extra pins DuckDB's extension wheels")
        found = sorted(Path(wheel.__file__).parent.glob(f"extensions/*/{name}.duckdb_extension"))
        connection.execute(f"LOAD '{found[-1]}'")
    yield connection
    connection.close()


def test_duckdb_cannot_write_to_a_companion(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, duckdb_with_iceberg: Any
) -> None:
    """DuckDB's Iceberg extension writes Parquet whatever write.format.default says, but checks the
    Parquet codec before it writes a file: INSERT and UPDATE are refused. DELETE finds no Iceberg
    data file to delete from, so it writes and commits nothing."""
    table_id = [*db, "t"]
    location = Path(write_values(ns, table_id, [1, 2, 3]))
    before = files_under(location), catalog_state(endpoint, db[0])
    duck = duckdb_with_iceberg
    duck.execute(f"ATTACH '{db[0]}' AS lake (TYPE ICEBERG, ENDPOINT '{endpoint}', AUTHORIZATION_TYPE 'none')")
    table = f"lake.{db[1]}.t"
    assert duck.execute(f"SELECT count(*) FROM {table}").fetchall() == [(0,)]
    refused = pytest.importorskip("duckdb").BinderException
    for statement in (f"INSERT INTO {table} VALUES ('x')", f"UPDATE {table} SET dummy = 'y'"):
        with pytest.raises(refused, match="Expected codec argument to be any of"):
            duck.execute(statement)
    assert duck.execute(f"DELETE FROM {table} WHERE dummy = 'x'").fetchall() == [(0,)]
    assert duck.execute(f"DELETE FROM {table}").fetchall() == [(0,)]
    assert (files_under(location), catalog_state(endpoint, db[0])) == before
    assert lance.dataset(str(location)).to_table()["v"].to_pylist() == [1, 2, 3]
    write_values(ns, table_id, [4], mode="append")  # the bridge writes as before
    assert ns.count_table_rows({"id": table_id}).count == 4
