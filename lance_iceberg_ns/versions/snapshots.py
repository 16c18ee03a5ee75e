"""Lance table versions managed by the Iceberg catalog, as the catalog records them in its
snapshots: the catalog is the commit arbiter. This module reads and plans what the catalog holds
(summaries, lineage, the commits); what is on disk under ``_versions/`` it asks
``versions.manifests``, which alone looks at and changes those files.

A managed table (property ``table_version_management=true`` on its companion table) records its
latest Lance version as the Iceberg snapshot its ``main`` branch points at. The snapshot's summary
carries the Lance version, its manifest path, size and e-tag; its manifest list is a valid, empty
Avro file, so an Iceberg reader sees an empty table, never Lance files.

Creating version ``n`` is a compare-and-swap: the commit adds the snapshot and moves ``main`` to
it under the requirement ``assert-ref-snapshot-id`` = the snapshot of version ``n - 1``. Of two
writers creating version ``n``, the catalog accepts exactly one; the other gets
ConcurrentModification (14), and pylance retries on top of the winner. Several tables move
together through the catalog's ``transactions/commit`` endpoint, where every requirement is
checked before any table changes.

The same commit removes the snapshot of version ``n - 1`` (unless a tag or branch holds it), and
the new snapshot takes over its empty manifest list: an Iceberg catalog rewrites the whole table
metadata on every commit, so a record of every version would make each commit cost more than the
last (Lance tables reach thousands of versions). The versions before the latest are the dataset's
own: their manifests were finalized under ``_versions/`` before the catalog let them go, and they
are listed and described from there, as Lance's own versions are; no version above the catalog's
latest is ever answered. Tables recorded before keep their older snapshots until those versions
are deleted.

pylance stages each manifest (``_versions/<n>.manifest-<uuid>``) and asks the namespace to create
the version with that path; the namespace copies it to its final name once the catalog committed
(``manifests.finalize``), so readers by location see it at once. The catalog keeps the staged path (a
snapshot is immutable); reads answer only the final path, moving the manifest there themselves when
its writer has not yet, or died before it did (``manifests.settle``), as does the commit that lets the
version go. Staged copies left behind are
removed with the orphan files (``lance_iceberg_ns.jobs.orphans``).
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lance_namespace import TableVersion
from lance_namespace.errors import (
    ConcurrentModificationError,
    InvalidInputError,
    InvalidTableStateError,
    TableVersionNotFoundError,
)
from pyiceberg.manifest import write_manifest_list
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadataUtil
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    RemoveSnapshotRefUpdate,
    RemoveSnapshotsUpdate,
    SetPropertiesUpdate,
    SetSnapshotRefUpdate,
    TableRequirement,
    TableUpdate,
)

from lance_iceberg_ns.catalog.companions import (  # noqa: F401  (is_managed: read as snapshots.is_managed)
    LANCE_VERSION_KEY,
    MANAGED_PROPERTY,
    is_managed,
    missing_protection,
)
from lance_iceberg_ns.limits import MAX_VERSION
from lance_iceberg_ns.storage import files
from lance_iceberg_ns.storage.locations import is_local
from lance_iceberg_ns.versions import manifests
from lance_iceberg_ns.versions.manifests import final_manifest_name, manifest_directory
from lance_iceberg_ns.versions.refusals import LatestMissing, forged, rolled_back_error, written_by_path_error

MAIN_BRANCH = "main"
VERSION_KEY = LANCE_VERSION_KEY
MANIFEST_KEY = "lance.manifest-path"
SIZE_KEY = "lance.manifest-size"
ETAG_KEY = "lance.e-tag"
NAMING_KEY = "lance.naming-scheme"
METADATA_PREFIX = "lance.metadata."
DECIMAL = re.compile(r"[0-9]{1,20}")  # how the bridge records a version or a size
# Every Lance version is a catalog commit, and every commit writes a metadata file as large as the
# history: without these, the files would pile up quadratically. Declared tables get them by default.
METADATA_RETENTION = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
}


def _main_is(snapshot_id: int | None) -> AssertRefSnapshotId:
    """The compare-and-swap: ``main`` still points at ``snapshot_id`` (None: has none yet)."""
    return AssertRefSnapshotId.model_validate({"ref": MAIN_BRANCH, "snapshot-id": snapshot_id})


def _summary(snapshot: Snapshot | None) -> dict[str, str]:
    """A snapshot's summary properties (pyiceberg's Summary does not iterate as a mapping)."""
    if snapshot is None or snapshot.summary is None:
        return {}
    return {str(k): str(v) for k, v in snapshot.summary.additional_properties.items()}


def _version_of(snapshot: Snapshot | None) -> int:
    return _summary_number(snapshot, VERSION_KEY) or 0


def _version_or_none(snapshot: Snapshot) -> int | None:
    """The version a snapshot off ``main`` records, if it is one: an engine's snapshot with a
    summary of its own making there (rolled back past, or on a branch of its own) blocks nothing."""
    try:
        return _summary_number(snapshot, VERSION_KEY)
    except InvalidTableStateError:
        return None


def _summary_number(snapshot: Snapshot | None, key: str) -> int | None:
    """A whole number the bridge recorded in a snapshot's summary (None when absent). Any engine
    on the catalog may commit snapshots, so a value that is not one (``abc``, ``-3``, ``1.5``, or
    beyond what Lance can hold) is the table's state, refused as InvalidTableStateError."""
    text = _summary(snapshot).get(key)
    if text is None:
        return None
    if not DECIMAL.fullmatch(text) or int(text) > MAX_VERSION:
        raise forged(snapshot, key, text, "not a Lance version number or size")
    return int(text)


def _main_snapshot(table: Table) -> Snapshot | None:
    ref = table.metadata.refs.get(MAIN_BRANCH)
    return table.metadata.snapshot_by_id(ref.snapshot_id) if ref else None


def _main_history(table: Table) -> Iterator[Snapshot | None]:
    """The snapshots of ``main`` as loaded, newest first; None for a parent not loaded (the table
    was loaded with ``snapshots=refs``)."""
    snapshot = _main_snapshot(table)
    while snapshot is not None:
        yield snapshot
        parent = snapshot.parent_snapshot_id
        snapshot = table.metadata.snapshot_by_id(parent) if parent is not None else None
        if parent is not None and snapshot is None:
            yield None


def knows_latest(table: Table) -> bool:
    """Whether the loaded table shows its latest Lance version. One loaded with only its current
    snapshots does not when an Iceberg engine's commit (Spark's DELETE FROM, DuckDB's INSERT) put
    a snapshot without a version on top of ``main``: its history must be loaded."""
    for snapshot in _main_history(table):
        if snapshot is None:
            return False
        if _version_of(snapshot):
            return True
    return True


def _latest_lance_snapshot(table: Table) -> Snapshot | None:
    """The newest snapshot of ``main`` that holds a Lance version (as far as it is loaded)."""
    return next((s for s in _main_history(table) if s is not None and _version_of(s)), None)


def latest_version(table: Table) -> int:
    """The latest Lance version the catalog holds for the table (0: none yet); right when
    ``knows_latest``."""
    return _version_of(_latest_lance_snapshot(table))


def may_be_behind(table: Table) -> bool:
    """Whether ``main`` is behind the table's newest snapshot (an Iceberg engine rolled it back):
    then the history must be loaded to know which version numbers the table has already used."""
    main = _main_snapshot(table)
    return main is not None and (main.sequence_number or 0) < table.metadata.next_sequence_number() - 1


def highest_version(table: Table) -> int:
    """The highest Lance version any loaded snapshot records, on ``main`` or left off it by a
    rollback: Lance never writes a version number twice."""
    return max((_version_or_none(s) or 0 for s in table.metadata.snapshots), default=0)


def rolled_back(table: Table) -> bool:
    """Whether ``main`` is behind versions the table has already used (loaded with its history)."""
    return latest_version(table) < highest_version(table)


def _lineage(table: Table) -> list[Snapshot]:
    """The Lance snapshots of ``main``, oldest first, their versions rising (Lance never writes a
    version number twice, and an engine rolls ``main`` back by moving it, not by committing an
    earlier version on top of a later one): a snapshot that records a version no later than the
    one before it is refused as ``_summary_number`` refuses."""
    lineage = [s for s in _main_history(table) if s is not None and _version_of(s)][::-1]
    for before, snapshot in zip(lineage, lineage[1:], strict=False):
        if (version := _version_of(snapshot)) <= (earlier := _version_of(before)):
            raise forged(snapshot, VERSION_KEY, str(version), f"not after the version before it on main ({earlier})")
    return lineage


def _table_version(snapshot: Snapshot, final_names: set[str], location: str) -> TableVersion:
    """The version a snapshot records, its manifest named in the table's own ``_versions/`` (the
    form pylance gives), final once finalized; never where a recorded path pointed elsewhere."""
    summary = _summary(snapshot)
    recorded = _recorded_manifest(snapshot, location).rsplit("/", 1)[-1]
    final_name = final_manifest_name(recorded)
    path = f"{manifest_directory(location)}/{final_name if final_name in final_names else recorded}"
    size = _summary_number(snapshot, SIZE_KEY)
    return TableVersion(
        version=_version_of(snapshot),
        manifest_path=path,
        manifest_size=size or None,
        e_tag=summary.get(ETAG_KEY) or None,
        timestamp_millis=snapshot.timestamp_ms,
        metadata={k[len(METADATA_PREFIX) :]: v for k, v in summary.items() if k.startswith(METADATA_PREFIX)},
    )


def _recorded_manifest(snapshot: Snapshot, location: str) -> str:
    """The manifest path a snapshot of the table at ``location`` recorded (staged, as the writer
    gave it), refused as ``_summary_number`` refuses: it must name the manifest of the snapshot's
    own version, in the table's own ``_versions/`` (as the bridge records it)."""
    recorded = _summary(snapshot).get(MANIFEST_KEY, "")
    if not manifests.names_a_manifest(recorded):
        raise forged(snapshot, MANIFEST_KEY, recorded, "not the path of a Lance manifest")
    version = _version_of(snapshot)
    if manifests.version_of_manifest(final_manifest_name(recorded)) != version:  # another version's, or another table's
        raise forged(snapshot, MANIFEST_KEY, recorded, f"not the manifest of the version it records ({version})")
    if not manifests.is_versions_directory_of(recorded.rpartition("/")[0], location):  # another table's, same number
        raise forged(snapshot, MANIFEST_KEY, recorded, "not in the table's own _versions/")
    return recorded


def managed_versions(
    table: Table, storage_options: Mapping[str, str], finalized: Collection[str] = ()
) -> list[TableVersion]:
    """Every Lance version the loaded table holds, oldest first (only the latest when it was
    loaded with ``snapshots=refs``), each answered by its final manifest (``manifests.settle``);
    LatestMissing when the latest has none.
    ``finalized``: final manifest names this process moved into place itself a moment ago, which
    need no look. The latest, unless this process moved it into place, costs one look at both of
    its names (at its final name alone once committed minutes ago); the earlier ones, one look at
    their final names."""
    lineage = _lineage(table)
    location = table.metadata.location
    recorded = [_recorded_manifest(s, location) for s in lineage]
    unknown = [path for path in recorded[:-1] if final_manifest_name(path) not in finalized]
    finals = set(finalized) | (manifests.finalized_names(location, storage_options, unknown) if unknown else set())
    unsettled = [path for path in recorded[:-1] if final_manifest_name(path) not in finals]
    answered = {path: manifests.settle(location, storage_options, path) for path in unsettled}
    if recorded and final_manifest_name(recorded[-1]) not in finalized:
        latest = manifests.settle(location, storage_options, recorded[-1], latest=True, young=_young(lineage[-1]))
        if latest is None:
            raise LatestMissing(".".join(table.name()), _version_of(lineage[-1]))
        answered[recorded[-1]] = latest
    finals |= {name for name in answered.values() if name is not None}
    return [_table_version(snapshot, finals, location) for snapshot in lineage]


def _young(snapshot: Snapshot) -> bool:
    """Whether a snapshot was committed recently enough that its version's final name may still be
    contested (``manifests.CONTESTED_FOR_SECONDS``, and as long again for clocks that differ)."""
    return time.time() * 1000 - snapshot.timestamp_ms < 2 * manifests.CONTESTED_FOR_SECONDS * 1000


def describe_managed_version(table: Table, storage_options: Mapping[str, str], version: int | None) -> TableVersion:
    """One version (the latest when None), answered by its final manifest (``manifests.settle``:
    one whose writer has not moved it into place yet, or died before it did, is copied there now);
    LatestMissing when the latest is asked for and has none."""
    lineage = _lineage(table)
    wanted = [s for s in lineage if version is None or _version_of(s) == version][-1:]
    if not wanted:
        name = ".".join(table.name())
        raise TableVersionNotFoundError(
            f"Version {version} not found for table {name}"
            if version is not None
            else f"Table {name} has no version yet"
        )
    snapshot = wanted[0]
    recorded = _recorded_manifest(snapshot, table.metadata.location)
    latest = snapshot is lineage[-1]
    answered = manifests.settle(table.metadata.location, storage_options, recorded, latest, _young(snapshot))
    if answered is None and latest:
        raise LatestMissing(".".join(table.name()), _version_of(snapshot))
    return _table_version(snapshot, {answered} if answered else set(), table.metadata.location)


def written_by_path_after(table: Table, storage_options: Mapping[str, str]) -> int | None:
    """The version after the latest of ``table`` (as loaded) when its final manifest is already in
    ``_versions/``, else None: one look, in both naming schemes (a manifest planted under the
    other scheme's name must not pass for none). With the catalog's current state, a writer by
    location committed it; with a state kept from earlier, another writer may also have committed
    it through the catalog since. For a table with no version yet, any version on disk: a writer
    by location's first version need not be numbered 1 (a shallow clone keeps its source's number),
    and the catalog must not leave it to be read from disk, as pylance would."""
    latest = latest_version(table)
    location = table.metadata.location
    if manifests.version_present(location, storage_options, latest + 1):
        return latest + 1
    if latest == 0 and (on_disk := manifests.final_manifests(location, storage_options)):
        return min(on_disk)
    return None


def latest_gone(table: Table, storage_options: Mapping[str, str]) -> bool:
    """Whether the manifest of the latest version of ``table`` (as loaded) is gone from
    ``_versions/``, in both naming schemes and as its writer staged it: a writer by location
    cleaned up old versions. Only the catalog's current state says so; a state kept from earlier
    may name a version that the catalog let go of since."""
    snapshot = _latest_lance_snapshot(table)
    if snapshot is None:
        return False
    recorded = _recorded_manifest(snapshot, table.metadata.location)
    return not manifests.version_present(table.metadata.location, storage_options, _version_of(snapshot), recorded)


def written_by_path(table: Table, version: int) -> InvalidTableStateError:
    """The refusal of a new version while a writer by location committed ``version`` (behind the
    catalog's back), unless the catalog itself (``table`` loaded with its history) is behind the
    versions on disk: ``main`` moved back (the rollback's refusal) or an engine committed an
    earlier version on top of a later one (``_lineage``'s)."""
    _lineage(table)
    if rolled_back(table):
        return rolled_back_error(".".join(table.name()), latest_version(table), highest_version(table))
    return written_by_path_error(".".join(table.name()), version, latest_version(table))


def superseded(table: Table, storage_options: Mapping[str, str], finalized: Collection[str]) -> list[Snapshot]:
    """The versions a new version lets go from the catalog: the Lance snapshots of ``main`` as
    loaded, oldest first, but for the latest (the catalog keeps the two newest, so that a tag or
    branch made on the latest version is known, from the catalog's answer to the commit that made
    it, before its snapshot can go). Each goes once its manifest is final: from then on the
    dataset's own ``_versions/`` answers for it; one whose writer has not finalized it yet is
    finalized here. A tag or branch keeps a snapshot, but not those after it. The first version
    that cannot be finalized stays, and so does every version after it, so that it stays on
    ``main``'s history. Only a manifest not in ``finalized`` costs a look."""
    candidates = _lineage(table)[:-1]
    location = table.metadata.location
    paths = [_recorded_manifest(s, location) for s in candidates]
    unknown = [path for path in paths if final_manifest_name(path) not in finalized]
    finals = set(finalized) | (manifests.finalized_names(location, storage_options, unknown) if unknown else set())
    held = {ref.snapshot_id for name, ref in table.metadata.refs.items() if name != MAIN_BRANCH}
    superseded = []
    for snapshot, recorded in zip(candidates, paths, strict=True):
        final = final_manifest_name(recorded) in finals
        if not final and manifests.settle(location, storage_options, recorded) != final_manifest_name(recorded):
            break
        if snapshot.snapshot_id not in held:
            superseded.append(snapshot)
    return superseded


def knows_predecessor(table: Table) -> bool:
    """Whether the loaded table holds the snapshot before its latest Lance version (a table loaded
    with only its current snapshots does not), which the next version lets go."""
    latest = _latest_lance_snapshot(table)
    parent = latest.parent_snapshot_id if latest is not None else None
    return parent is None or table.metadata.snapshot_by_id(parent) is not None


def recorded_versions(table: Table) -> list[int]:
    """The Lance versions the loaded table records, oldest first: the versions before the first
    are answered by the dataset's own ``_versions/``."""
    return [_version_of(snapshot) for snapshot in _lineage(table)]


def held_versions(table: Table) -> dict[int, str]:
    """The Lance versions whose snapshots an Iceberg tag or branch other than ``main`` holds, each
    with the ref that holds it."""
    held = {}
    for name, ref in table.metadata.refs.items():
        snapshot = table.metadata.snapshot_by_id(ref.snapshot_id) if name != MAIN_BRANCH else None
        if snapshot is not None and _version_of(snapshot):
            held[_version_of(snapshot)] = f"Iceberg {ref.snapshot_ref_type.value} {name!r}"
    return held


def earliest_recorded(table: Table) -> int:
    """The oldest Lance version the loaded table records (0: none)."""
    return next(iter(recorded_versions(table)), 0)


@dataclass(frozen=True)
class VersionCommit:
    """One Lance version of one table, ready to commit: the catalog change and its manifest list."""

    identifier: tuple[str, ...]
    requirements: tuple[TableRequirement, ...]
    updates: tuple[TableUpdate, ...]
    written_manifest_list: str | None  # None: it took over the manifest list of the version it let go
    storage_options: Mapping[str, str]  # what reaches the table's files
    version: TableVersion

    @property
    def change(self) -> tuple[tuple[str, ...], tuple[TableRequirement, ...], tuple[TableUpdate, ...]]:
        """The catalog change, as ``BridgeRestCatalog.commit_changes`` takes it."""
        return self.identifier, self.requirements, self.updates

    def undo_change(self) -> tuple[tuple[str, ...], tuple[TableRequirement, ...], tuple[TableUpdate, ...]]:
        """The catalog change that takes this commit back once it landed: ``main`` back where it
        was, the new snapshot gone, as long as ``main`` is still the new snapshot."""
        snapshot = next(update.snapshot for update in self.updates if isinstance(update, AddSnapshotUpdate))
        back: TableUpdate
        if snapshot.parent_snapshot_id is None:
            back = RemoveSnapshotRefUpdate.model_validate({"ref-name": MAIN_BRANCH})
        else:
            back = SetSnapshotRefUpdate.model_validate(
                {"ref-name": MAIN_BRANCH, "type": SnapshotRefType.BRANCH, "snapshot-id": snapshot.parent_snapshot_id}
            )
        let_go = RemoveSnapshotsUpdate.model_validate({"snapshot-ids": [snapshot.snapshot_id]})
        return self.identifier, (_main_is(snapshot.snapshot_id),), (back, let_go)

    def discard(self, taken_back: bool = False) -> None:
        """Delete the manifest list written for a commit that did not land, or (``taken_back``) the
        one it held once landed: a list taken over from the version it let go, which went with it."""
        held = self.written_manifest_list
        if taken_back:
            held = next(
                update.snapshot for update in self.updates if isinstance(update, AddSnapshotUpdate)
            ).manifest_list
        if held is not None:
            with contextlib.suppress(OSError):
                _delete_manifest_list(held, self.storage_options)


def _delete_manifest_list(path: str, storage_options: Mapping[str, str]) -> None:
    """Delete a manifest list pyiceberg wrote, through the storage module: pyiceberg's FileIO leaves
    an empty marker object for the directory of a file it deletes on an object store. The object is
    the one pyiceberg named, its key the URI's path as spelled (pyiceberg decodes no ``%``)."""
    scheme, _, rest = path.partition("://")
    if is_local(path):
        directory, _, name = path.rpartition("/")
        files.delete_files(directory, [name], storage_options)
    else:
        bucket, _, key = rest.partition("/")
        files.delete_files(f"{scheme}://{bucket}", [key], storage_options)


def refuse_if_rolled_back(table: Table) -> None:
    """InvalidTableStateError when ``main`` is behind versions the table has used (``table`` loaded
    with its history): checked before a writer stages a version that could never be committed."""
    if rolled_back(table):
        raise rolled_back_error(".".join(table.name()), latest_version(table), highest_version(table))


def plan_version(
    table: Table,
    request: Any,
    manifest_path: str,
    storage_options: Mapping[str, str],
    finalized: Collection[str] = (),
) -> VersionCommit:
    """The commit of ``request.version`` (a CreateTableVersion request or batch entry) on top of the
    table's latest version, recording ``manifest_path`` (the request's, checked to be the table's
    own: ``versions.own_manifest_path``), and letting go of the versions before it
    (``superseded``; ``finalized``: final manifest names known to be in place). A version that
    exists is ConcurrentModification; a gap is InvalidInput; any version while ``main`` is rolled
    back behind versions already used is InvalidTableState."""
    if not knows_latest(table):  # the callers load the history first; a retry does
        raise ConcurrentModificationError(f"The latest version of {'.'.join(table.name())} was not loaded")
    parent = _main_snapshot(table)  # the new version goes on top of main, whoever committed last
    latest = latest_version(table)
    if rolled_back(table):
        raise rolled_back_error(".".join(table.name()), latest_version(table), highest_version(table))
    if request.version <= latest:
        raise ConcurrentModificationError(
            f"Version {request.version} of {'.'.join(table.name())} already exists (the latest is {latest})"
        )
    if request.version != latest + 1:
        raise InvalidInputError(f"Version {request.version} does not follow the latest version {latest}")
    metadata = table.metadata
    snapshot_id = metadata.new_snapshot_id()
    sequence_number = metadata.next_sequence_number()
    parent_id = parent.snapshot_id if parent else None
    let_go = superseded(table, storage_options, finalized)
    written = None
    if let_go:  # each manifest list stays held by exactly one snapshot
        manifest_list = let_go[-1].manifest_list
    else:
        manifest_list = written = f"{metadata.location}/metadata/snap-{snapshot_id}-lance-{request.version}.avro"
        with write_manifest_list(
            format_version=metadata.format_version,
            output_file=table.io.new_output(manifest_list),
            snapshot_id=snapshot_id,
            parent_snapshot_id=parent_id,
            sequence_number=sequence_number,
            avro_compression="deflate",
        ):
            pass  # no manifests: Iceberg readers see an empty table
    summary = {VERSION_KEY: str(request.version), MANIFEST_KEY: manifest_path}
    if request.manifest_size is not None:
        summary[SIZE_KEY] = str(request.manifest_size)
    if request.e_tag:
        summary[ETAG_KEY] = request.e_tag
    if request.naming_scheme:
        summary[NAMING_KEY] = str(request.naming_scheme)
    summary.update({METADATA_PREFIX + k: str(v) for k, v in (request.metadata or {}).items()})
    snapshot = Snapshot.model_validate(
        {
            "snapshot-id": snapshot_id,
            "parent-snapshot-id": parent_id,
            "sequence-number": sequence_number,
            "timestamp-ms": int(time.time() * 1000),
            "manifest-list": manifest_list,
            "summary": Summary(Operation.APPEND, **summary),
            "schema-id": metadata.current_schema_id,
        }
    )
    updates: tuple[TableUpdate, ...] = (
        AddSnapshotUpdate(snapshot=snapshot),
        SetSnapshotRefUpdate.model_validate(
            {"ref-name": MAIN_BRANCH, "type": SnapshotRefType.BRANCH, "snapshot-id": snapshot_id}
        ),
    )
    if let_go:
        let_go_ids = [snapshot.snapshot_id for snapshot in let_go]
        updates += (RemoveSnapshotsUpdate.model_validate({"snapshot-ids": let_go_ids}),)
    protection = missing_protection(metadata.properties)
    if protection:  # a companion made before the engine protection gains it with this version
        updates += (SetPropertiesUpdate(updates=protection),)
    requirements: tuple[TableRequirement, ...] = (_main_is(parent_id),)
    return VersionCommit(
        tuple(table.name()),
        requirements,
        updates,
        written,
        storage_options,
        _table_version(snapshot, set(), metadata.location),
    )


def committed(table: Table, answer: bytes | None) -> Table | None:
    """The table as the catalog answered a commit (its ``CommitTableResponse``), so that the next
    commit plans on what the catalog holds, refs made by others included; None when there is no
    answer to read (a batch commit's, or one the bridge could not parse)."""
    if not answer:
        return None
    try:
        body = json.loads(answer)
        metadata = TableMetadataUtil.parse_obj(body["metadata"])
    except (ValueError, KeyError, TypeError):
        return None
    return Table(
        table.name(), metadata, body.get("metadata-location", table.metadata_location), table.io, table.catalog
    )


def plan_removal(table: Table, versions: Sequence[int]) -> tuple[tuple[TableRequirement, ...], tuple[TableUpdate, ...]]:
    """Removing Lance versions from the catalog: the snapshots of those it records go, the latest
    version stays, and the change holds only if ``main`` has not moved meanwhile."""
    lineage = {_version_of(s): s for s in _lineage(table)}
    latest = max(lineage) if lineage else 0
    if latest in versions:
        raise InvalidInputError(f"The latest version ({latest}) cannot be deleted")
    snapshot_ids = [lineage[v].snapshot_id for v in versions if v in lineage]
    parent = _main_snapshot(table)
    requirements: tuple[TableRequirement, ...] = (_main_is(parent.snapshot_id if parent else None),)
    updates: tuple[TableUpdate, ...] = ()
    if snapshot_ids:
        updates = (RemoveSnapshotsUpdate.model_validate({"snapshot-ids": snapshot_ids}),)
    return requirements, updates
