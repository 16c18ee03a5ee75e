"""Companion tables carry gc.enabled=false and write.format.default=lance, so that Iceberg engines
on the same catalog neither delete nor write Lance's files: new ones from the start, old ones from
their next bridge write or ``tables protect``. pyiceberg and DuckDB's Iceberg extension here; Spark
in tests/spark/test_spark_iceberg.py."""

from __future__ import annotations

import json
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
from lance_iceberg_ns.catalog.companions import ENGINE_PROTECTION
from lance_iceberg_ns.catalog.warehouses import BridgeRestCatalog

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


def _properties(endpoint: str, table_id: list[str]) -> dict[str, str]:
    """A table's properties as another client of the catalog reads them."""
    return dict(other_client(endpoint, table_id[0]).load_table(tuple(table_id[1:])).properties)


def _unprotect(endpoint: str, table_id: list[str]) -> None:
    """Make a companion look like one made before the protection existed."""
    table = other_client(endpoint, table_id[0]).load_table(tuple(table_id[1:]))
    with table.transaction() as transaction:
        transaction.remove_properties(*ENGINE_PROTECTION)
    assert not set(ENGINE_PROTECTION) & set(_properties(endpoint, table_id))


def _protected(properties: dict[str, str]) -> bool:
    return all(properties.get(key) == value for key, value in ENGINE_PROTECTION.items())


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
    ns.describe_table(DescribeTableRequest(id=table_id))  # a read changes nothing
    assert not _protected(_properties(endpoint, table_id))
    ns.insert_into_table({"id": table_id}, ipc(pa.table({"v": [2]})))
    assert _protected(_properties(endpoint, table_id))
    assert ns.count_table_rows({"id": table_id}).count == 2


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

    one_namespace = as_json(warehouse, db[1])  # db and beneath, not "other"
    assert sorted(one_namespace["protected"]) == sorted(".".join(tables[n]) for n in ("top", "nested", "declared"))
    assert one_namespace["already_protected_count"] == 1  # the soft-deleted one, in the trash
    assert not _protected(_properties(endpoint, tables["elsewhere"]))
    human = protect(warehouse).stdout
    assert "protected 1 Lance table(s); 4 already were" in human and ".".join(tables["elsewhere"]) in human
    again = as_json(warehouse)
    assert (again["protected_count"], again["already_protected_count"]) == (0, 5)
    for table_id in tables.values():
        assert _protected(_properties(endpoint, table_id))
    assert _properties(endpoint, [*db, "plain"]) == plain_before  # never touched


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
