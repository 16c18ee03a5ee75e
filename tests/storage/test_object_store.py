"""The bridge's own files on a real S3 server (SeaweedFS): a create is one conditional put, a
replace a put on the e-tag it read, and a location declared by several tables at once has exactly
one owner, as on a local disk."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import obstore
import pytest
from lance_namespace import DeclareTableRequest
from lance_namespace.errors import InvalidInputError, PermissionDeniedError

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.storage import files

from ..helpers import declares_at_one_location, together
from ..seaweed import SeaweedFS

ROUNDS = 20
RACERS = 8


def test_a_create_on_s3_has_exactly_one_winner_and_keeps_its_bytes(seaweedfs: SeaweedFS) -> None:
    options = seaweedfs.storage_options()
    for _ in range(ROUNDS):
        location = f"{seaweedfs.fresh_root()}/t.lance"

        def create(i: int, location: str = location) -> bool:
            return files.create_file(location, "marker.json", f"racer {i}".encode(), options) is not None

        won = together(RACERS, create)
        assert sorted(map(str, won)) == ["False"] * (RACERS - 1) + ["True"], won
        assert files.read_file(location, "marker.json", options) == f"racer {won.index(True)}".encode()


def test_a_replace_on_s3_writes_only_over_the_file_it_read(seaweedfs: SeaweedFS) -> None:
    options = seaweedfs.storage_options()
    location = f"{seaweedfs.fresh_root()}/t.lance"
    assert files.read_file(location, "marker.json", options) is None
    assert files.replace_file(location, "marker.json", b"over nothing", options) is False
    assert files.read_file(location, "marker.json", options) is None  # nothing made where nothing was
    assert files.create_file(location, "marker.json", b"first", options)
    assert files.replace_file(location, "marker.json", b"second", options)
    assert files.read_file(location, "marker.json", options) == b"second"
    files.delete_file(location, "marker.json", options)
    assert files.replace_file(location, "marker.json", b"after the delete", options) is False
    assert files.read_file(location, "marker.json", options) is None


def test_racing_replaces_on_s3_each_write_whole_bytes(seaweedfs: SeaweedFS) -> None:
    options = seaweedfs.storage_options()
    location = f"{seaweedfs.fresh_root()}/t.lance"
    assert files.create_file(location, "marker.json", b"first", options)
    written = together(
        RACERS, lambda i: files.replace_file(location, "marker.json", f"racer {i}".encode() * 1000, options)
    )
    assert all(result in (True, False) for result in written), written
    final = files.read_file(location, "marker.json", options)
    assert final in {f"racer {i}".encode() * 1000 for i, result in enumerate(written) if result}


@pytest.fixture
def s3_ns(endpoint: str, seaweedfs: SeaweedFS) -> Iterator[IcebergLanceNamespace]:
    properties = {"endpoint": endpoint, "root": seaweedfs.fresh_root(), "allowed_locations": seaweedfs.fresh_root()}
    properties |= {f"storage.{key}": value for key, value in seaweedfs.storage_options().items()}
    namespace = IcebergLanceNamespace(**properties)
    yield namespace
    namespace.close()


def test_tables_declared_at_one_s3_location_at_once_have_exactly_one_owner(
    s3_ns: IcebergLanceNamespace, db: list[str], seaweedfs: SeaweedFS
) -> None:
    (shared,) = s3_ns.settings.allowed_locations
    for round_number in range(ROUNDS):
        location = f"{shared}/shared-{round_number}.lance"
        declares_at_one_location(s3_ns, db, location, RACERS, lambda at: _keys_under(seaweedfs, at, relative=True))


def test_a_move_onto_a_name_taken_meanwhile_on_s3_is_refused_and_keeps_the_takers_bytes(
    seaweedfs: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race of a managed commit with a writer by location, held open on purpose: the writer's
    manifest lands between the bridge's read of its staged manifest and its put. The put is
    conditional, so the writer's manifest stays and the move is refused."""
    options = seaweedfs.storage_options()
    location = f"{seaweedfs.fresh_root()}/t.lance"
    assert files.create_file(location, "_versions/3.manifest-staged", b"the bridge's version 3", options)
    read = obstore.get

    def read_then_the_writer_lands(store: Any, path: str, *args: Any, **kwargs: Any) -> Any:
        answer = read(store, path, *args, **kwargs)
        obstore.put(store, path.replace("3.manifest-staged", "3.manifest"), b"the writer's version 3")
        return answer

    monkeypatch.setattr(files.obstore, "get", read_then_the_writer_lands)
    assert files.move_unless_taken(location, "_versions/3.manifest-staged", "_versions/3.manifest", options) is False
    monkeypatch.undo()
    assert files.read_file(location, "_versions/3.manifest", options) == b"the writer's version 3"
    assert files.read_file(location, "_versions/3.manifest-staged", options) == b"the bridge's version 3"


def test_a_managed_finalize_on_s3_moves_into_a_free_name_and_refuses_a_taken_one(seaweedfs: SeaweedFS) -> None:
    from lance_namespace import TableVersion

    from lance_iceberg_ns.versions import manifests
    from lance_iceberg_ns.versions.refusals import FinalNameTaken

    options = seaweedfs.storage_options()
    location = f"{seaweedfs.fresh_root()}/t.lance"
    staged = f"1.manifest-{uuid.uuid4()}"
    assert files.create_file(location, f"_versions/{staged}", b"version 1", options)
    done = manifests.finalize(location, options, TableVersion(version=1, manifest_path=f"_versions/{staged}"))
    assert done.manifest_path == "_versions/1.manifest"
    assert files.read_file(location, "_versions/1.manifest", options) == b"version 1"
    assert files.read_file(location, f"_versions/{staged}", options) is None

    staged = f"2.manifest-{uuid.uuid4()}"
    assert files.create_file(location, f"_versions/{staged}", b"the bridge's version 2", options)
    assert files.create_file(location, "_versions/2.manifest", b"a writer's version 2", options)
    with pytest.raises(FinalNameTaken):
        manifests.finalize(location, options, TableVersion(version=2, manifest_path=f"_versions/{staged}"))
    assert files.read_file(location, "_versions/2.manifest", options) == b"a writer's version 2"


def test_a_managed_table_configured_with_storage_options_only_works_on_s3(
    endpoint: str, seaweedfs: SeaweedFS, db: list[str]
) -> None:
    """pyiceberg writes a managed table's manifest lists itself: it reaches the store with the same
    ``storage.*`` options as Lance, with no ``iceberg.s3.*`` repeated."""
    import lance
    import pyarrow as pa

    properties = {"endpoint": endpoint, "root": seaweedfs.fresh_root(), "table_version_management": "true"}
    properties |= {f"storage.{key}": value for key, value in seaweedfs.storage_options().items()}
    with IcebergLanceNamespace(**properties) as ns:
        table_id = [*db, "managed"]
        lance.write_dataset(pa.table({"id": [1, 2, 3]}), namespace_client=ns, table_id=table_id)
        lance.write_dataset(pa.table({"id": [4]}), namespace_client=ns, table_id=table_id, mode="append")
        assert lance.dataset(namespace_client=ns, table_id=table_id).count_rows() == 4
        versions = ns.list_table_versions({"id": table_id}).versions
        assert [version.version for version in versions] == [1, 2]
        location = ns.describe_table({"id": table_id}).location
        assert location is not None and location.startswith(properties["root"])


def test_the_store_takes_lance_option_names_and_leaves_out_what_it_does_not_know() -> None:
    """Lance's storage options configure the store as they configure Lance: client options apart,
    an alias given beside its name taken once, an option of another store or of Lance alone left
    out (as Lance leaves it out), never an error."""
    options = {
        "aws_region": "eu-1",
        "region": "eu-1",
        "aws_endpoint": "http://127.0.0.1:9",
        "allow_http": "true",
        "expires_at_millis": "1",
        "google_bucket": "elsewhere",
        "aws_no_such_option": "1",
    }
    store, key = files.object_store("s3://bucket/some%20table/t.lance", options)
    assert key == "some table/t.lance"  # keys as Lance decodes the URI
    assert store.config == {"bucket": "bucket", "endpoint": "http://127.0.0.1:9", "region": "eu-1"}
    assert store.client_options == {"allow_http": "true"}


def test_a_declare_asking_for_vended_credentials_never_hands_on_the_bridges_static_secrets(
    endpoint: str, seaweedfs: SeaweedFS, db: list[str]
) -> None:
    """The catalog vends nothing here: the answer holds the static options callers may see, and
    none of the bridge's secrets, though pyiceberg's FileIO carries them for the bridge's own
    writes."""
    properties = {"endpoint": endpoint, "root": seaweedfs.fresh_root(), "share_static_credentials": "false"}
    properties |= {f"storage.{key}": value for key, value in seaweedfs.storage_options().items()}
    with IcebergLanceNamespace(**properties) as ns:
        for asked in (True, False):
            declared = ns.declare_table(DeclareTableRequest(id=[*db, f"t_{asked}"], vend_credentials=asked))
            answered = declared.storage_options or {}
            assert "aws_secret_access_key" not in answered and "aws_access_key_id" not in answered, answered
            assert "SECRET" not in repr(answered)
            described = ns.describe_table({"id": [*db, f"t_{asked}"], "vend_credentials": asked})
            assert "aws_secret_access_key" not in (described.storage_options or {})


def _keys_under(seaweedfs: SeaweedFS, location: str, relative: bool = False) -> list[str]:
    """Every object under ``location`` (relative to it, or to the bucket), listed by a client of its own."""
    store = seaweedfs.store()
    prefix = location.removeprefix(f"s3://{store.config['bucket']}/")  # type: ignore[index]
    keys = [item["path"] for batch in obstore.list(store, prefix=prefix + "/") for item in batch]
    return sorted(key[len(prefix) + 1 :] if relative else key for key in keys)


def test_a_purge_on_s3_deletes_the_tables_own_objects_and_leaves_nothing_behind(
    s3_ns: IcebergLanceNamespace, db: list[str], seaweedfs: SeaweedFS
) -> None:
    import lance
    import pyarrow as pa

    table_id = [*db, "purged"]
    lance.write_dataset(pa.table({"id": [1, 2, 3]}), namespace_client=s3_ns, table_id=table_id)
    location = s3_ns.describe_table({"id": table_id}).location
    assert location is not None and _keys_under(seaweedfs, location)
    store, key = files.object_store(location, seaweedfs.storage_options())
    obstore.put(store, f"{key}/notes/theirs.txt", b"not the dataset's")  # someone else's file stays
    s3_ns.drop_table({"id": table_id})
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    assert s3_ns.purge_tables(namespace_id=db, deleted_before=later) == [table_id]
    prefix = key.removeprefix(f"{store.config['bucket']}/")  # type: ignore[index]
    assert _keys_under(seaweedfs, location) == [f"{prefix}/notes/theirs.txt"]


def test_looking_for_markers_on_s3_lists_directories_not_the_objects_of_datasets(
    s3_ns: IcebergLanceNamespace, db: list[str], seaweedfs: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unregistered listing (and a claim's look below a location) costs one listing per
    directory of the tree of namespaces and tables, however many files the datasets hold."""
    import lance
    import pyarrow as pa

    for name, appends in (("small", 1), ("large", 12)):
        table_id = [*db, name]
        for number in range(appends):
            mode = "append" if number else "create"
            lance.write_dataset(pa.table({"id": [1]}), namespace_client=s3_ns, table_id=table_id, mode=mode)
    listings: list[str] = []
    real = files.obstore.list_with_delimiter

    def counted(store: Any, prefix: str | None = None, **kwargs: Any) -> Any:
        listings.append(prefix or "")
        return real(store, prefix=prefix, **kwargs)

    monkeypatch.setattr(files.obstore, "list_with_delimiter", counted)
    monkeypatch.setattr(files.obstore, "list", lambda *a, **k: pytest.fail("a listing of a whole tree"))
    assert s3_ns.unregistered_locations(db[0]) == []
    assert not [prefix for prefix in listings if "/data" in prefix or "/_versions" in prefix], listings
    assert len(listings) <= 6, listings  # the root, the warehouse, the namespace, its two tables


def test_an_import_into_s3_publishes_the_table_only_once_every_file_is_copied(
    s3_ns: IcebergLanceNamespace, db: list[str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lance
    import pyarrow as pa
    from lance_namespace.errors import TableNotFoundError

    from lance_iceberg_ns.jobs import directory_import

    source = tmp_path / "directory"
    lance.write_dataset(pa.table({"v": [1, 2]}), str(source / "t.lance"))
    lance.write_dataset(pa.table({"v": [3]}), str(source / "t.lance"), mode="append")
    seen: list[str] = []
    real = files.write_file

    def write_while_looking(location: str, path: str, *args: Any) -> None:
        with pytest.raises(TableNotFoundError):  # not published while a file is still to come
            s3_ns.describe_table({"id": [*db, "t"]})
        seen.append(path)
        real(location, path, *args)

    monkeypatch.setattr(files, "write_file", write_while_looking)
    summary = directory_import.import_directory(s3_ns, str(source), db)
    monkeypatch.undo()
    assert [table.outcome for table in summary.tables] == ["copied"]
    first_manifest = next(i for i, path in enumerate(seen) if path.startswith("_versions/"))
    assert all(path.startswith("_versions/") for path in seen[first_manifest:]), seen  # the manifests last
    dataset = lance.dataset(namespace_client=s3_ns, table_id=[*db, "t"])
    assert sorted(dataset.to_table().column("v").to_pylist()) == [1, 2, 3]


def test_a_store_refusing_the_bridges_configuration_is_a_typed_error_that_leaves_nothing(
    endpoint: str, db: list[str], seaweedfs: SeaweedFS
) -> None:
    root = seaweedfs.fresh_root()
    given = {f"storage.{key}": value for key, value in seaweedfs.storage_options().items()}
    wrong_key = {**given, "storage.aws_secret_access_key": "not-the-SECRET"}
    with IcebergLanceNamespace(endpoint=endpoint, root=root, **wrong_key) as ns:
        with pytest.raises(PermissionDeniedError) as raised:
            ns.declare_table(DeclareTableRequest(id=[*db, "t"]))
        assert "SECRET" not in str(raised.value) and "Debug" not in str(raised.value)
        assert len(str(raised.value)) < 600, str(raised.value)
        assert ns.list_tables({"id": db, "include_declared": True}).tables == []
    # an http:// endpoint the store would refuse without allow_http: said when the configuration is read
    no_http = {key: value for key, value in given.items() if key != "storage.allow_http"}
    with pytest.raises(InvalidInputError, match=r"storage\.\w+ is a plain http:// URL.*storage\.allow_http=true"):
        IcebergLanceNamespace(endpoint=endpoint, root=root, **no_http)
    assert _keys_under(seaweedfs, root) == []
