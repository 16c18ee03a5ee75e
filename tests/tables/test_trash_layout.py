"""Where soft-deleted tables live: one trash namespace per warehouse, with names the strictest
catalogs accept; the trash that earlier versions kept inside each namespace, still read and moved
into it; and drops and deregisters side by side, which never fail because of each other."""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import lance
import lance.namespace
import pyarrow as pa
import pytest
from lance_namespace import (
    CreateNamespaceRequest,
    DeregisterTableRequest,
    DropNamespaceRequest,
    DropTableRequest,
    ListTablesRequest,
)
from lance_namespace.errors import NamespaceNotEmptyError
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import BadRequestError, NamespaceAlreadyExistsError

from lance_iceberg_ns import IcebergLanceNamespace, companion_table_schema
from lance_iceberg_ns.catalog.warehouses import BridgeRestCatalog
from lance_iceberg_ns.identifiers import LEGACY_TRASH_NAMESPACE, TRASH_NAMESPACE, aside_name
from lance_iceberg_ns.storage import ownership
from lance_iceberg_ns.tables.tombstones import Tombstone, TrashName

from ..helpers import CommandLine, other_client, together
from ..helpers import write_values as _write
from ..stores import Store

# S3 Tables (and SeaweedFS's table buckets): 1 to 255 lowercase letters, digits and underscores,
# starting and ending with a letter or digit; a namespace's name does not start with "aws".
STRICT_NAME = re.compile(r"[a-z0-9](?:[a-z0-9_]{0,253}[a-z0-9])?")


def _strict(name: str, namespace: bool = False) -> bool:
    return STRICT_NAME.fullmatch(name) is not None and not (namespace and name.startswith("aws"))


# --- names ---------------------------------------------------------------------------------------


@pytest.fixture
def trash_names(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """Every identifier the bridge creates a namespace at, or renames a table to, in the trash."""
    given: list[tuple[str, ...]] = []
    create_namespace, rename_table = BridgeRestCatalog.create_namespace, BridgeRestCatalog.rename_table

    def recording_create(catalog: BridgeRestCatalog, namespace: Any, *args: Any, **kwargs: Any) -> Any:
        given.append(tuple(namespace))
        return create_namespace(catalog, namespace, *args, **kwargs)

    def recording_rename(catalog: BridgeRestCatalog, source: Any, target: Any) -> Any:
        given.append(tuple(target))
        return rename_table(catalog, source, target)

    monkeypatch.setattr(BridgeRestCatalog, "create_namespace", recording_create)
    monkeypatch.setattr(BridgeRestCatalog, "rename_table", recording_rename)
    return given


UNRULY_NAMES = ["Orders", "ünï cödé", "with.dot", "_lead", "x" * 240, "aws_like", "2024"]


def test_every_name_the_bridge_gives_the_trash_is_one_the_strictest_catalogs_accept(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, lance_root: Any, trash_names: list[tuple[str, ...]]
) -> None:
    for name in UNRULY_NAMES:
        table_id = [*db, name]
        _write(ns, table_id, [1])
        ns.drop_table(DropTableRequest(id=table_id))
        ns.undrop_table(table_id)
        ns.drop_table(DropTableRequest(id=table_id))
    ns.declare_table({"id": [*db, "Deregistered"]})
    ns.deregister_table(DeregisterTableRequest(id=[*db, "Deregistered"]))
    with IcebergLanceNamespace(endpoint=endpoint, root=str(lance_root), soft_delete="false") as hard:
        hard.declare_table({"id": [*db, "Hard.Dropped"]})
        hard.drop_table(DropTableRequest(id=[*db, "Hard.Dropped"]))
    in_trash = [identifier for identifier in trash_names if identifier[0] == TRASH_NAMESPACE]
    assert (TRASH_NAMESPACE,) in in_trash and _strict(TRASH_NAMESPACE, namespace=True)
    tables = [identifier for identifier in in_trash if len(identifier) == 2]
    assert len(tables) == 2 * len(UNRULY_NAMES) + 2
    assert [name for _, name in tables if not _strict(name)] == []
    # nothing is made inside a namespace
    assert [i for i in trash_names if TRASH_NAMESPACE in i[1:] or LEGACY_TRASH_NAMESPACE in i] == []
    purgable = ns.list_purgable_tables(db)
    assert sorted(p.id[-1] for p in purgable) == sorted(UNRULY_NAMES) and not any(p.foreign for p in purgable)


def test_a_tombstone_name_says_when_and_whose_and_nothing_else_is_one() -> None:
    tombstone = Tombstone(("sales", "Orders 2024"), 1_700_000_000_000, "0123456789ab")
    assert tombstone.name.startswith("orders_2024_1700000000000_0123456789ab_")
    assert tombstone.identifier == (TRASH_NAMESPACE, tombstone.name)
    parsed = TrashName.parse(tombstone.name)
    assert parsed is not None and parsed.tombstone(("sales", "Orders 2024")) == tombstone
    assert parsed.tombstone(("sales", "orders_2024")) is None  # the digest tells the two apart
    for other in (aside_name("deregistered"), "orders~1700000000000~0123456789ab", "Orders_1_x_" + "0" * 20):
        assert TrashName.parse(other) is None, other
    legacy = Tombstone.in_legacy_trash(("sales",), "Orders 2024~1700000000000~0123456789ab")
    assert legacy is not None and legacy.identifier == ("sales", LEGACY_TRASH_NAMESPACE, legacy.name)
    assert legacy.moved().identifier == tombstone.identifier


def test_an_s3_tables_catalog_takes_the_trash_and_refuses_the_old_one(seaweedfs: Any) -> None:
    """SeaweedFS's table buckets follow the S3 Tables rules (its Iceberg catalog serves each bucket
    as a warehouse)."""
    boto3 = pytest.importorskip("boto3")
    from tests import seaweed

    bucket = f"trash-{uuid.uuid4().hex[:8]}"
    keys = {"aws_access_key_id": seaweed.ACCESS_KEY, "aws_secret_access_key": seaweed.SECRET_KEY}
    boto3.client("s3tables", endpoint_url=seaweedfs.endpoint, region_name=seaweed.REGION, **keys).create_table_bucket(
        name=bucket
    )
    iceberg_endpoint = f"http://127.0.0.1:{seaweedfs.port + 4}"  # weed mini's -s3.port.iceberg
    credential = f"{seaweed.ACCESS_KEY}:{seaweed.SECRET_KEY}"
    token_endpoint = f"{iceberg_endpoint}/v1/oauth/tokens"
    catalog = RestCatalog(
        "table-bucket",
        uri=iceberg_endpoint,
        warehouse=bucket,
        credential=credential,
        **{"oauth2-server-uri": token_endpoint},
    )
    with pytest.raises(BadRequestError, match="letter or digit"):
        catalog.create_namespace((LEGACY_TRASH_NAMESPACE,))
    catalog.create_namespace(("sales",))
    catalog.create_namespace((TRASH_NAMESPACE,))
    catalog.create_table(("sales", "orders"), schema=companion_table_schema())
    tombstone = Tombstone.new(("sales", "orders"))
    catalog.rename_table(("sales", "orders"), tombstone.identifier)
    catalog.create_table((TRASH_NAMESPACE, aside_name("deregistered")), schema=companion_table_schema())
    assert len(catalog.list_tables((TRASH_NAMESPACE,))) == 2
    catalog.drop_namespace(("sales",))  # its dropped table is not inside it


def test_lancedb_drops_every_table_then_the_namespace_through_serve(
    server: Any, warehouse: str, ns: IcebergLanceNamespace
) -> None:
    """What lancedb's own namespace tests do, and got NamespaceNotEmpty for while the trash was the
    namespace's child."""
    lancedb = pytest.importorskip("lancedb")
    connection = lancedb.connect_namespace("rest", {"uri": server.uri})
    path = [warehouse, "db"]
    connection.create_namespace(path)
    for name in ("a", "b", "c"):
        connection.create_table(name, pa.table({"id": [1, 2]}), namespace_path=path)
    connection.drop_table("a", namespace_path=path)
    connection.drop_all_tables(namespace_path=path)
    connection.drop_namespace(path)
    assert list(connection.list_namespaces([warehouse]).namespaces) == []
    assert sorted(p.id[-1] for p in ns.list_purgable_tables(path)) == ["a", "b", "c"]  # soft-deleted all the same


def test_purging_the_last_table_of_a_dropped_namespace_says_so_and_succeeds(
    ns: IcebergLanceNamespace, db: list[str], cli: CommandLine
) -> None:
    _write(ns, [*db, "t"], [1])
    ns.drop_table(DropTableRequest(id=[*db, "t"]))
    ns.drop_namespace(DropNamespaceRequest(id=db))
    target = ".".join([*db, "t"])
    done = cli("tables", "purge", target)
    assert (done.returncode, done.stdout.splitlines()[0]) == (0, f"purged {target} (1 soft-deleted version(s))")
    assert ns.table_status([*db, "t"]).state == "not_found"


# --- the trash of earlier versions ---------------------------------------------------------------


def _soft_delete_as_before(ns: IcebergLanceNamespace, endpoint: str, store: Store, table_id: list[str]) -> str:
    """Soft-delete a table as versions before the warehouse's trash did: renamed into its
    namespace's ``__lance_trash__`` as ``<table>~<ms>~<nonce>``, its marker naming it there. The
    tombstone's name."""
    warehouse, *path, name = table_id
    tombstone = Tombstone((*path, name), int(time.time() * 1000), uuid.uuid4().hex[:12], legacy=True)
    location = ns.describe_table({"id": table_id}).location
    catalog = other_client(endpoint, warehouse)
    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(tombstone.identifier[:-1])
    catalog.rename_table((*path, name), tombstone.identifier)
    held = ownership.read_owner(location, store.storage_options)
    assert held is not None
    ownership.rewrite(location, held, replace(held, entry=(warehouse, *tombstone.identifier)), store.storage_options)
    return tombstone.name


def _old_trash(endpoint: str, db: list[str]) -> list[str] | None:
    catalog = other_client(endpoint, db[0])
    if (*db[1:], LEGACY_TRASH_NAMESPACE) not in catalog.list_namespaces(tuple(db[1:])):
        return None
    return [identifier[-1] for identifier in catalog.list_tables((*db[1:], LEGACY_TRASH_NAMESPACE))]


def test_tombstones_of_earlier_versions_are_listed_restored_and_purged_where_they_are(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store
) -> None:
    locations = {name: _write(ns, [*db, name], [1, 2]) for name in ("kept", "purged")}
    old = {name: _soft_delete_as_before(ns, endpoint, store, [*db, name]) for name in locations}
    assert ns.list_namespaces({"id": db}).namespaces == []  # the old trash is hidden too
    listed = ns.list_purgable_tables(db)
    assert sorted((p.id[-1], p.tombstone, p.foreign) for p in listed) == sorted((n, old[n], None) for n in old)
    assert ns.table_status([*db, "kept"]).state == "soft_deleted"
    assert ns.purge_table([*db, "purged"]) == 1 and not store.exists(locations["purged"])
    ns.undrop_table([*db, "kept"])
    assert lance.dataset(namespace_client=ns, table_id=[*db, "kept"]).count_rows() == 2
    assert _old_trash(endpoint, db) == []


def test_the_next_drop_in_a_namespace_moves_its_old_trash_into_the_warehouses(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store
) -> None:
    location = _write(ns, [*db, "old"], [1, 2, 3])
    _soft_delete_as_before(ns, endpoint, store, [*db, "old"])
    _write(ns, [*db, "new"], [1])
    ns.drop_table(DropTableRequest(id=[*db, "new"]))
    assert _old_trash(endpoint, db) is None  # emptied and dropped
    trash = other_client(endpoint, db[0]).list_tables((TRASH_NAMESPACE,))
    assert len(trash) == 2 and all(TrashName.parse(identifier[-1]) for identifier in trash)
    assert {p.id[-1]: p.foreign for p in ns.list_purgable_tables(db)} == {"old": None, "new": None}
    ns.undrop_table([*db, "old"])  # the marker followed it: still the bridge's own
    assert lance.dataset(namespace_client=ns, table_id=[*db, "old"]).count_rows() == 3
    assert store.dataset(location).count_rows() == 3


def test_a_listing_of_every_table_shows_no_tombstone_of_either_trash(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store
) -> None:
    for name in ("old", "new", "live"):
        _write(ns, [*db, name], [1])
    ns.drop_table(DropTableRequest(id=[*db, "new"]))
    _soft_delete_as_before(ns, endpoint, store, [*db, "old"])  # after the drop: still in the old trash
    listed = ns.list_all_tables(ListTablesRequest(id=db[:1])).tables
    assert listed == ["$".join([*db, "live"])]


def test_drop_namespace_empties_an_old_trash_first_and_a_foreign_entry_there_keeps_it(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store
) -> None:
    _write(ns, [*db, "t"], [1])
    _soft_delete_as_before(ns, endpoint, store, [*db, "t"])
    other_client(endpoint, db[0]).create_table(
        (*db[1:], LEGACY_TRASH_NAMESPACE, "planted"), schema=companion_table_schema()
    )
    with pytest.raises(NamespaceNotEmptyError, match=LEGACY_TRASH_NAMESPACE):
        ns.drop_namespace(DropNamespaceRequest(id=db))
    assert _old_trash(endpoint, db) == ["planted"]  # the tombstone moved, the foreign entry stayed
    assert [p.id[-1] for p in ns.list_purgable_tables(db) if p.foreign is None] == ["t"]
    other_client(endpoint, db[0]).drop_table((*db[1:], LEGACY_TRASH_NAMESPACE, "planted"))
    ns.drop_namespace(DropNamespaceRequest(id=db))
    assert ns.table_status([*db, "t"]).state == "soft_deleted"


def test_the_routine_purge_moves_old_trashes_and_purges_what_is_due(
    ns: IcebergLanceNamespace, db: list[str], endpoint: str, store: Store, cli: CommandLine
) -> None:
    nested = [*db, "nested"]
    ns.create_namespace(CreateNamespaceRequest(id=nested))
    for table_id in ([*db, "a"], [*nested, "b"]):
        _write(ns, table_id, [1])
        _soft_delete_as_before(ns, endpoint, store, table_id)
    answer = cli.json("tables", "purge", db[0], "--older-than", "1h")
    assert (answer["purged"], len(answer["kept"]), answer["skipped"]) == ([], 2, [])
    assert _old_trash(endpoint, db) is None and _old_trash(endpoint, nested) is None
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    assert sorted(ns.purge_tables(namespace_id=db, deleted_before=later)) == [[*db, "a"], [*nested, "b"]]


# --- races -----------------------------------------------------------------------------------------

DROPPERS = 20


def _fresh_namespace(ns: IcebergLanceNamespace) -> list[str]:
    """A namespace in a warehouse of its own: its trash does not exist yet, so the drops race to make it."""
    db = [f"wh_{uuid.uuid4().hex[:10]}", "db"]
    ns.create_namespace(CreateNamespaceRequest(id=db))
    return db


def _drop_and_deregister_together(ns: IcebergLanceNamespace, client: Any) -> list[str]:
    """``DROPPERS`` tables of a fresh namespace, half dropped and half deregistered by ``client`` at
    once; every failure, and what is left that should not be."""
    db = _fresh_namespace(ns)
    tables = [[*db, f"t{i}"] for i in range(DROPPERS)]
    for table_id in tables:
        ns.declare_table({"id": table_id})

    def drop_or_deregister(index: int) -> object:
        if index % 2:
            return client.deregister_table(DeregisterTableRequest(id=tables[index]))
        return client.drop_table(DropTableRequest(id=tables[index]))

    failures = [repr(outcome) for outcome in together(DROPPERS, drop_or_deregister) if isinstance(outcome, Exception)]
    left = ns.list_tables({"id": db, "include_declared": True}).tables
    purgable = sorted(int(p.id[-1][1:]) for p in ns.list_purgable_tables(db))
    if purgable != list(range(0, DROPPERS, 2)):
        failures.append(f"soft-deleted: {purgable}")
    failures += [f"left: {name}" for name in left]
    try:  # emptied, it drops: the trash is not in it
        ns.drop_namespace(DropNamespaceRequest(id=db))
    except Exception as exc:  # noqa: BLE001 - the outcome to check
        failures.append(repr(exc))
    return failures


def test_drops_and_deregisters_side_by_side_never_fail_each_other(ns: IcebergLanceNamespace) -> None:
    failures = [failure for _ in range(5) for failure in _drop_and_deregister_together(ns, ns)]
    assert failures == []


def test_drops_and_deregisters_side_by_side_through_serve_never_fail_each_other(
    ns: IcebergLanceNamespace, rest: lance.namespace.RestNamespace
) -> None:
    failures = [failure for _ in range(3) for failure in _drop_and_deregister_together(ns, rest)]
    assert failures == []
