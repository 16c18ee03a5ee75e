"""The bridge on a real Azure Blob server (Azurite): a create is one conditional put, a replace a
put on the e-tag it read, a table lives its whole life in a container, and a location declared by
several tables at once has exactly one owner, as on S3 and on a local disk; a managed table on an
``abfss://`` root has its manifest lists written there by pyiceberg with the same ``storage.*``
options, and one on ``az://``, which pyiceberg does not open, is refused at its declare."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import lance
import obstore
import pyarrow as pa
import pytest
from lance_namespace import (
    CreateNamespaceRequest,
    CreateTableRequest,
    DeclareTableRequest,
    DescribeTableRequest,
    DropTableRequest,
    ListTablesRequest,
)
from lance_namespace.errors import UnsupportedOperationError
from pyiceberg.io.pyarrow import PyArrowFileIO

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.config.settings import Settings
from lance_iceberg_ns.config.storage_keys import file_io_properties
from lance_iceberg_ns.storage import files
from lance_iceberg_ns.versions.refusals import refuse_unwritable_manifest_lists

from ..azurite import ACCOUNT_KEY, CONTAINER, Azurite
from ..helpers import declares_at_one_location, ipc, together

ROUNDS = 20
DECLARE_ROUNDS = 5  # each round is eight catalog round trips: a few show the race well enough
RACERS = 8
MARKER = ".lance-iceberg-ns-owner.json"


def _keys_under(azurite: Azurite, location: str) -> list[str]:
    """Every blob under ``location``, listed by a client of its own (not the bridge's)."""
    prefix = location.split("://", 1)[1].removeprefix(f"{CONTAINER}/").rstrip("/") + "/"
    return sorted(item["path"] for batch in obstore.list(azurite.store(), prefix=prefix) for item in batch)


def _relative_keys(azurite: Azurite, location: str) -> list[str]:
    prefix = location.split("://", 1)[1].removeprefix(f"{CONTAINER}/").rstrip("/")
    return [key[len(prefix) + 1 :] for key in _keys_under(azurite, location)]


def test_pylance_and_obstore_reach_azure_with_the_same_options(azurite: Azurite) -> None:
    options = azurite.storage_options()
    location = f"{azurite.fresh_root()}/t.lance"
    lance.write_dataset(pa.table({"id": [1, 2, 3]}), location, storage_options=options)
    prefix = location.removeprefix(f"az://{CONTAINER}/")
    (manifest,) = [key for key in _keys_under(azurite, location) if key.startswith(f"{prefix}/_versions/")]
    assert files.read_file(location, manifest.removeprefix(f"{prefix}/"), options)  # Lance's bytes, read by obstore
    assert lance.dataset(location, storage_options=options).to_table().column("id").to_pylist() == [1, 2, 3]


def test_a_create_on_azure_has_exactly_one_winner_and_keeps_its_bytes(azurite: Azurite) -> None:
    options = azurite.storage_options()
    for _ in range(ROUNDS):
        location = f"{azurite.fresh_root()}/t.lance"

        def create(i: int, location: str = location) -> bool:
            return files.create_file(location, MARKER, f"racer {i}".encode(), options) is not None

        won = together(RACERS, create)
        assert sorted(map(str, won)) == ["False"] * (RACERS - 1) + ["True"], won
        assert files.read_file(location, MARKER, options) == f"racer {won.index(True)}".encode()


def test_a_replace_on_azure_writes_only_over_the_file_it_read(azurite: Azurite) -> None:
    options = azurite.storage_options()
    location = f"{azurite.fresh_root()}/t.lance"
    assert files.read_file(location, MARKER, options) is None
    assert files.replace_file(location, MARKER, b"over nothing", options) is False
    assert files.read_file(location, MARKER, options) is None  # nothing made where nothing was
    assert files.create_file(location, MARKER, b"first", options)
    assert files.create_file(location, MARKER, b"again", options) is None
    assert files.replace_file(location, MARKER, b"second", options)
    assert files.read_file(location, MARKER, options) == b"second"
    files.delete_file(location, MARKER, options)
    files.delete_file(location, MARKER, options)  # a file already gone is no error
    assert files.read_file(location, MARKER, options) is None
    assert files.replace_file(location, MARKER, b"after the delete", options) is False
    assert files.read_file(location, MARKER, options) is None
    assert _keys_under(azurite, location) == []


def test_racing_replaces_on_azure_each_write_whole_bytes(azurite: Azurite) -> None:
    options = azurite.storage_options()
    location = f"{azurite.fresh_root()}/t.lance"
    assert files.create_file(location, MARKER, b"first", options)
    written = together(RACERS, lambda i: files.replace_file(location, MARKER, f"racer {i}".encode() * 1000, options))
    assert all(result in (True, False) for result in written), written
    final = files.read_file(location, MARKER, options)
    assert final in {f"racer {i}".encode() * 1000 for i, result in enumerate(written) if result}


def _azure_namespace(endpoint: str, azurite: Azurite, **properties: str) -> IcebergLanceNamespace:
    properties = {"endpoint": endpoint, "root": azurite.fresh_root(), **properties}
    properties |= {f"storage.{key}": value for key, value in azurite.storage_options().items()}
    return IcebergLanceNamespace(**properties)


def test_a_table_lives_and_is_purged_on_azure(endpoint: str, azurite: Azurite, warehouse: str) -> None:
    rows = pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]})
    with _azure_namespace(endpoint, azurite) as ns:
        assert ns.settings.soft_delete  # the default: a drop keeps the data until the purge
        db = [warehouse, f"db_{uuid.uuid4().hex[:8]}"]
        ns.create_namespace(CreateNamespaceRequest(id=db))
        table_id = [*db, "t"]
        created = ns.create_table(CreateTableRequest(id=table_id), ipc(rows))
        location = ns.describe_table(DescribeTableRequest(id=table_id)).location
        assert location is not None and location == created.location
        assert location.startswith(str(ns.settings.root) + "/")
        assert f"{location.removeprefix(f'az://{CONTAINER}/')}/{MARKER}" in _keys_under(azurite, location)

        dataset = lance.dataset(location, storage_options=azurite.storage_options())
        assert dataset.to_table() == rows
        assert lance.dataset(namespace_client=ns, table_id=table_id).count_rows() == 3

        ns.drop_table(DropTableRequest(id=table_id))
        assert lance.dataset(location, storage_options=azurite.storage_options()).count_rows() == 3
        assert ns.purge_table(table_id) == 1
        assert ns.table_status(table_id).state == "not_found"
    assert _keys_under(azurite, location) == []


@pytest.fixture
def azure_ns(endpoint: str, azurite: Azurite) -> Iterator[IcebergLanceNamespace]:
    namespace = _azure_namespace(endpoint, azurite, allowed_locations=azurite.fresh_root())
    yield namespace
    namespace.close()


def test_tables_declared_at_one_azure_location_at_once_have_exactly_one_owner(
    azure_ns: IcebergLanceNamespace, db: list[str], azurite: Azurite
) -> None:
    (shared,) = azure_ns.settings.allowed_locations
    for round_number in range(DECLARE_ROUNDS):
        location = f"{shared}/shared-{round_number}.lance"
        prefix = location.removeprefix(f"az://{CONTAINER}/")
        declares_at_one_location(
            azure_ns,
            db,
            location,
            RACERS,
            lambda at, prefix=prefix: [k[len(prefix) + 1 :] for k in _keys_under(azurite, at)],
        )


def test_a_managed_table_configured_with_storage_options_only_works_on_azure(
    endpoint: str, azurite: Azurite, db: list[str]
) -> None:
    """pyiceberg writes a managed table's manifest lists itself: on an ``abfss://`` root it reaches
    Azurite with the same ``storage.*`` options as Lance, with no ``iceberg.adls.*`` repeated."""
    root = azurite.fresh_root("abfss")
    properties = {"endpoint": endpoint, "root": root, "table_version_management": "true"}
    properties |= {f"storage.{key}": value for key, value in azurite.storage_options().items()}
    with IcebergLanceNamespace(**properties) as ns:
        table_id = [*db, "managed"]
        lance.write_dataset(pa.table({"id": [1, 2, 3]}), namespace_client=ns, table_id=table_id)
        lance.write_dataset(pa.table({"id": [4]}), namespace_client=ns, table_id=table_id, mode="append")
        assert lance.dataset(namespace_client=ns, table_id=table_id).to_table().column("id").to_pylist() == [1, 2, 3, 4]
        versions = ns.list_table_versions({"id": table_id}).versions
        assert [version.version for version in versions] == [1, 2]
        location = ns.describe_table({"id": table_id}).location
        assert location is not None and location.startswith(root + "/")
    prefix = location.split("://", 1)[1].removeprefix(f"{CONTAINER}/")
    manifest_lists = [key for key in _keys_under(azurite, location) if key.startswith(f"{prefix}/metadata/snap-")]
    assert len(manifest_lists) == 2, manifest_lists  # one per version, written by pyiceberg to Azurite


def test_a_declare_on_azure_never_hands_on_the_bridges_account_key(
    endpoint: str, azurite: Azurite, db: list[str]
) -> None:
    """pyiceberg's FileIO carries the account key for the bridge's own writes; an answer, vended
    or not, carries none of it."""
    properties = {"share_static_credentials": "false", "table_version_management": "true"}
    with _azure_namespace(endpoint, azurite, root=azurite.fresh_root("abfss"), **properties) as ns:
        for asked in (True, False):
            table_id = [*db, f"t_{asked}"]
            declared = ns.declare_table(DeclareTableRequest(id=table_id, vend_credentials=asked))
            described = ns.describe_table({"id": table_id, "vend_credentials": asked})
            for answered in (declared.storage_options or {}, described.storage_options or {}):
                assert ACCOUNT_KEY not in repr(answered) and "SECRET" not in repr(answered), answered
                assert not {"azure_storage_account_key", "account_key", "adls.account-key"} & set(answered)


def test_azure_storage_options_configure_pyicebergs_file_io_as_they_configure_lance() -> None:
    """object_store's names and aliases become pyiceberg's ``adls.*``; an emulator's endpoint (the
    account in its path) and an account's own host become the authority pyarrow addresses."""
    emulator = {
        "account_name": "devstoreaccount1",
        "access_key": "a2V5",
        "azure_endpoint": "http://127.0.0.1:1/devstoreaccount1/",
    }
    assert file_io_properties(emulator) == {
        "adls.account-name": "devstoreaccount1",
        "adls.account-key": "a2V5",
        "adls.blob-storage-authority": "127.0.0.1:1",
        "adls.blob-storage-scheme": "http",
        "adls.dfs-storage-authority": "127.0.0.1:1",
        "adls.dfs-storage-scheme": "http",
        "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO",
    }
    own_host = {
        "azure_storage_account_name": "lake",
        "azure_storage_endpoint": "https://lake.blob.core.chinacloudapi.cn",
    }
    assert file_io_properties(own_host) == {
        "adls.account-name": "lake",
        "adls.blob-storage-authority": ".blob.core.chinacloudapi.cn",
        "adls.blob-storage-scheme": "https",
        "adls.dfs-storage-authority": ".dfs.core.chinacloudapi.cn",
        "adls.dfs-storage-scheme": "https",
        "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO",
    }


@pytest.mark.parametrize(
    "endpoint",
    [
        "https://proxy.example.com",  # neither form: pyarrow could not address it as object_store does
        "https://proxy.example.com/elsewhere",
        "https://lake.blob.core.windows.net/?sig=abc",
        "https://user:pass@lake.blob.core.windows.net",
        "ftp://lake.blob.core.windows.net",
        "http://[::1",
    ],
)
def test_an_azure_endpoint_pyarrow_cannot_address_the_same_way_is_left_to_iceberg_adls(endpoint: str) -> None:
    properties = file_io_properties({"azure_storage_account_name": "lake", "azure_storage_endpoint": endpoint})
    assert properties == {"adls.account-name": "lake", "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}


def test_a_service_principal_reaches_pyiceberg_whole_or_not_at_all() -> None:
    """pyiceberg refuses a client id without its secret and tenant; object_store takes a client id
    alone for a managed identity, which pyiceberg's FileIO finds by itself."""
    whole = {"azure_client_id": "app", "client_secret": "s", "azure_storage_authority_id": "tenant"}
    principal = {"adls.client-id": "app", "adls.client-secret": "s", "adls.tenant-id": "tenant"}
    assert file_io_properties(whole) == {**principal, "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}
    assert file_io_properties({"azure_client_id": "app"}) == {}
    sas = {"azure_storage_sas_key": "sv=2024&sig=abc"}
    assert file_io_properties(sas) == {
        "adls.sas-token": "sv=2024&sig=abc",
        "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO",
    }
    assert file_io_properties({"aws_region": "eu-1"}) == {"s3.region": "eu-1"}  # no Azure: pyiceberg chooses


def test_the_file_io_pyiceberg_loads_for_an_abfss_table_reaches_azure_with_the_storage_options(
    azurite: Azurite,
) -> None:
    """A catalog that keeps a table's metadata on ``abfss://`` has pyiceberg choose the table's
    FileIO by that scheme (fsspec's first, which needs adlfs): the derived properties choose
    pyarrow's, which writes where Lance and obstore read."""
    from pyiceberg.io import load_file_io

    location = f"{azurite.fresh_root('abfss')}/t.lance"
    io = load_file_io(file_io_properties(azurite.storage_options()), f"{location}/metadata/00001.metadata.json")
    assert isinstance(io, PyArrowFileIO)
    with io.new_output(f"{location}/metadata/snap-1.avro").create() as output:
        output.write(b"a manifest list")
    assert files.read_file(location, "metadata/snap-1.avro", azurite.storage_options()) == b"a manifest list"


def test_a_managed_table_on_an_az_root_is_refused_before_anything_is_written(
    endpoint: str, azurite: Azurite, db: list[str]
) -> None:
    """pyiceberg's FileIO does not open Lance's ``az://``: the declare says so, with a typed error,
    instead of a first commit that fails after Lance wrote its data."""
    root = azurite.fresh_root()
    with _azure_namespace(endpoint, azurite, root=root, table_version_management="true") as ns:
        with pytest.raises(UnsupportedOperationError, match="abfss://"):
            ns.declare_table(DeclareTableRequest(id=[*db, "declared"]))
        with pytest.raises(UnsupportedOperationError):
            ns.create_table(CreateTableRequest(id=[*db, "created"]), ipc(pa.table({"id": [1]})))
        assert not ns.list_tables(ListTablesRequest(id=db)).tables
        ns.declare_table(DeclareTableRequest(id=[*db, "unmanaged"], properties={"table_version_management": "false"}))
    written = _keys_under(azurite, root)
    assert len(written) == 1 and written[0].endswith(MARKER) and "/unmanaged" in written[0], written
    with pytest.raises(ValueError, match="Unrecognized filesystem type in URI: az"):  # why: pyiceberg's own answer
        PyArrowFileIO().new_output(f"{root}/t.lance/metadata/snap-1.avro")


@pytest.mark.parametrize(
    ("location", "refused"),
    [
        ("az://lake/t.lance", True),
        ("abfss://lake@account.dfs.core.windows.net/t.lance", True),
        ("abfss://lake/t.lance", False),
        ("s3://lake/t.lance", False),
        ("gs://lake/t.lance", False),
        ("/data/lake/t.lance", False),
    ],
)
def test_a_managed_table_is_refused_where_pyicebergs_file_io_cannot_write(location: str, refused: bool) -> None:
    settings = Settings.from_properties({"endpoint": "http://catalog"})
    if refused:
        with pytest.raises(UnsupportedOperationError, match=r"abfss://<container>/<path>"):
            refuse_unwritable_manifest_lists(location, settings)
    else:
        refuse_unwritable_manifest_lists(location, settings)
    own_file_io = Settings.from_properties({"endpoint": "http://catalog", "iceberg.py-io-impl": "my.FileIO"})
    refuse_unwritable_manifest_lists(location, own_file_io)  # a FileIO of one's own is trusted
