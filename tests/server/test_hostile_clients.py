"""A hostile client of ``lance-iceberg-ns serve``: every attack gets its error code, and nothing
outside the table's own location changes (the victim's files byte for byte, no ``metadata/``
written into it), nor does the catalog."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import lance
import lance.namespace
import pytest
import requests
from lance_namespace import DescribeTableRequest

from lance_iceberg_ns import companion_table_schema
from lance_iceberg_ns.identifiers import TRASH_NAMESPACE
from lance_iceberg_ns.server import serve_in_background
from lance_iceberg_ns.tables.tombstones import Tombstone

from ..conftest import SECRET_MARK
from ..helpers import files_under, other_client
from ..scene import STATIC_SECRET, Scene
from ..scene import refused as _refused


def test_register_a_dataset_outside_the_root_is_forbidden(scene: Scene) -> None:
    before = scene.untouched()
    for location in (str(scene.outsider), f"file://{scene.outsider}", "/etc", "/usr/lib"):
        _refused(scene.call("register", [*scene.db, "stolen"], {"location": location}), 403, 15)
    assert scene.untouched() == before
    assert not (scene.outsider / "metadata").exists()


def test_declare_outside_the_root_or_climbing_out_of_it_is_forbidden(scene: Scene, lance_root: Path) -> None:
    before = scene.untouched()
    climbing = [
        "/etc/lance",
        "/usr",
        f"file://{lance_root}/%2e%2e/%2e%2e/escape",
        f"file://{lance_root}/a/%2E%2E/%2e%2e/escape",
        f"{lance_root}/../escape",
        str(lance_root),
    ]
    for location in climbing:
        _refused(scene.call("declare", [*scene.db, "t"], {"location": location}), 403, 15)
    assert scene.untouched() == before


def test_a_location_overlapping_another_tables_is_forbidden(scene: Scene) -> None:
    before = scene.untouched()
    victim = str(scene.victim_location)
    for location in (victim, f"{victim}/data/inner", f"file://{victim}/", os.path.dirname(victim)):
        _refused(scene.call("declare", [*scene.db, "t"], {"location": location}), 403, 15)
    for location in (victim, f"file://{victim}/", f"file://{victim}/data/%2e%2e"):
        _refused(scene.call("register", [*scene.db, "t"], {"location": location}), 403, 15)
    assert scene.untouched() == before


def test_restore_through_an_entry_that_does_not_own_the_data_is_forbidden(scene: Scene) -> None:
    # an entry another client made directly in the catalog, at the victim's location
    other_client(scene.endpoint, scene.db[0]).create_table(
        (*scene.db[1:], "impostor"),
        schema=companion_table_schema(),
        location=str(scene.victim_location),
        properties={"table_type": "lance"},
    )
    before = scene.untouched()
    _refused(scene.call("restore", [*scene.db, "impostor"], {"version": 1}), 403, 15)
    assert scene.untouched() == before


@pytest.mark.parametrize(
    "target",
    [
        ["{db}", TRASH_NAMESPACE, "t~1~x"],
        [TRASH_NAMESPACE, "t_1_x"],
        ["{ns}.__lance_trash__", "t~1~x"],
        ["{db}", "__LANCE_TRASH__", "t"],
    ],
)
def test_the_trash_cannot_be_named_or_aliased(scene: Scene, target: list[str]) -> None:
    warehouse, namespace = scene.db
    table = [warehouse, *[part.format(db=namespace, ns=namespace) for part in target]]
    before = scene.untouched()
    _refused(scene.call("declare", table, {}), 400, 13)
    _refused(scene.call("register", table, {"location": str(scene.victim_location)}), 400, 13)
    _refused(scene.call("describe", table, {}), 400, 13)
    _refused(scene.call("drop", table), 400, 13)
    _refused(
        scene.call("rename", [*scene.db, "victim"], {"new_namespace_id": table[:-1], "new_table_name": "x"}), 400, 13
    )
    _refused(scene.call("ns:table/list", table[:-1]), 400, 13)
    _refused(scene.call("ns:create", table[:-1], {}), 400, 13)
    _refused(scene.call("ns:drop", table[:-1], {}), 400, 13)
    _refused(scene.call("ns:describe", table[:-1], {}), 400, 13)
    assert scene.untouched() == before


def test_renaming_out_of_the_trash_is_refused(scene: Scene) -> None:
    scene.operator.drop_table({"id": [*scene.db, "victim"]})  # soft-deleted: a tombstone in the trash
    tombstone = scene.operator.list_purgable_tables(scene.db)[0].tombstone
    before = scene.untouched()
    source = [scene.db[0], TRASH_NAMESPACE, tombstone]
    _refused(scene.call("rename", source, {"new_table_name": "mine"}), 400, 13)
    _refused(scene.call("drop", source), 400, 13)
    assert scene.untouched() == before


def test_a_planted_tombstone_hijacks_nothing_and_the_routine_purge_deletes_nothing(
    scene: Scene, tmp_path: Path
) -> None:
    """Someone with direct catalog access plants a tombstone for a name, pointing at the victim's
    data through a symbolic link. The victim's next declare of that name makes a new table of its
    own, and the operator's purge job refuses the tombstone."""
    link = tmp_path / "link-to-victim"
    os.symlink(scene.victim_location, link)
    planted = Tombstone((*scene.db[1:], "orders"), 1, "planted")
    direct = Tombstone((*scene.db[1:], "victim"), 1, "direct")
    catalog = other_client(scene.endpoint, scene.db[0])
    catalog.create_namespace((TRASH_NAMESPACE,))
    for tombstone, location in ((planted, str(link)), (direct, str(scene.victim_location))):
        catalog.create_table(
            tombstone.identifier,
            schema=companion_table_schema(),
            location=location,
            properties={"table_type": "lance"},
        )
    victim_files = files_under(scene.victim_location)

    declared = scene.call("declare", [*scene.db, "orders"], {}).json()
    assert declared["location"] not in (str(link), str(scene.victim_location))
    later = datetime.now(timezone.utc) + timedelta(days=30)
    assert scene.operator.purge_tables(namespace_id=[scene.db[0]], deleted_before=later) == []
    assert files_under(scene.victim_location) == victim_files
    assert lance.dataset(str(scene.victim_location)).count_rows() == 3
    assert len(scene.operator.list_purgable_tables(scene.db)) == 2  # left whole, for a human to look at


def test_the_server_never_hands_out_its_static_storage_credentials(
    scene: Scene, endpoint: str, lance_root: Path
) -> None:
    declared = scene.call("declare", [*scene.db, "fresh"], {}).text
    described = scene.call("describe", [*scene.db, "victim"], {}).text
    for answer in (declared, described):
        assert SECRET_MARK not in answer and "aws_secret_access_key" not in answer
        assert '"region":"eu-1"' in answer.replace(" ", "")  # what is not a secret still helps clients
    client = lance.namespace.RestNamespace(uri=scene.server.uri)
    described_by_pylance = client.describe_table(DescribeTableRequest(id=[*scene.db, "victim"]))
    assert STATIC_SECRET not in str(described_by_pylance.storage_options)
    # in process the operator's own namespace still has them
    assert scene.operator.describe_table({"id": [*scene.db, "victim"]}).storage_options["aws_secret_access_key"]
    # and an operator may opt in for a trusted setup
    properties = {"endpoint": endpoint, "root": str(lance_root), "storage.aws_secret_access_key": STATIC_SECRET}
    with serve_in_background(properties=properties, share_static_credentials=True) as trusted:
        answer = requests.post(
            f"{trusted.uri}/v1/table/{'$'.join([*scene.db, 'victim'])}/describe", json={}, timeout=30
        )
        assert answer.json()["storage_options"]["aws_secret_access_key"] == STATIC_SECRET


def test_reserved_location_properties_are_refused(scene: Scene) -> None:
    before = scene.untouched()
    for key in ("write.metadata.path", "write.data.path", "write.object-storage.path", "location"):
        body = {"properties": {key: str(scene.outsider)}}
        _refused(scene.call("declare", [*scene.db, "t"], body), 400, 13)
        body["location"] = str(scene.victim_location)
        _refused(scene.call("register", [*scene.db, "t"], body), 400, 13)
    assert scene.untouched() == before
    assert not (scene.outsider / "metadata").exists()
