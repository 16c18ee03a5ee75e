"""What a table whose versions the catalog manages refuses, and the way out each refusal names:
a snapshot an engine committed with a summary of its own making, versions a writer by location
committed behind the catalog's back (or removed), a rollback of ``main``; and a managed table at a
location whose manifest lists pyiceberg cannot write."""

from __future__ import annotations

from typing import Any

from lance_namespace.errors import InvalidTableStateError, UnsupportedOperationError

from lance_iceberg_ns.config.settings import Settings
from lance_iceberg_ns.storage.locations import is_local


class FinalNameTaken(Exception):
    """A version the catalog just committed cannot take its final manifest name: a writer by
    location committed that version number meanwhile (``finalize``)."""


class FinalNameUnmoved(Exception):
    """A version the catalog just committed cannot take its final manifest name: the store refused
    the move (``finalize``), and no reader may be handed its staged path instead."""


class LatestMissing(Exception):
    """The manifest of the latest version a loaded table records is in neither of its names: a
    writer by location removed it, or its commit was taken back since the table was loaded."""

    def __init__(self, table: str, version: int) -> None:
        super().__init__(table, version)
        self.table, self.version = table, version


def forged(snapshot: Any, key: str, text: str, what: str) -> InvalidTableStateError:
    """A snapshot whose summary records under ``key`` a ``text`` that is not ``what`` the bridge records."""
    return InvalidTableStateError(
        f"Snapshot {snapshot.snapshot_id} records {key}={text[:60]!r}, which is {what}: an engine other than"
        " lance-iceberg-ns committed it; roll main back past it to read the table"
    )


def latest_gone_error(name: str, latest: int) -> InvalidTableStateError:
    """The refusal of a table whose latest version, as the catalog names it, is gone from disk."""
    return InvalidTableStateError(
        f"Version {latest} of {name}, the latest the catalog names, is gone from the dataset's _versions/: a "
        "writer that went by its location removed it (cleanup_old_versions on the path, say), behind the "
        "catalog's back, and the catalog can take no version after it. To keep the dataset as it is on disk, "
        "deregister_table and register_table its location again (it then keeps Lance's own versions)"
    )


class WrittenByLocationError(InvalidTableStateError):
    """InvalidTableState: the dataset is ahead of the catalog, a writer by location having committed
    versions the catalog does not record (adoption records them)."""


_WRITTEN_BY_LOCATION = "was written by a writer that went by its location"  # in ``written_by_path_error``'s words


def is_written_by_location(error: BaseException) -> bool:
    """Whether ``error`` is the refusal of a dataset ahead of the catalog (``written_by_path_error``),
    raised here or passed on by pylance from a commit through the namespace (then a plain
    InvalidTableStateError carrying its words)."""
    return isinstance(error, WrittenByLocationError) or (
        isinstance(error, InvalidTableStateError) and _WRITTEN_BY_LOCATION in str(error)
    )


def revived_written_by_location_error(name: str, refusal: str) -> InvalidTableStateError:
    """The refusal of a create that would bring back the soft-deleted table ``name`` whose dataset
    a writer by location moved ahead of the catalog (``refusal`` says how): the table stays in the
    trash, and the ways out are those of a table in the trash, not of a live one."""
    return InvalidTableStateError(
        f"The create would bring back the soft-deleted table {name}, and it cannot take a new version: "
        f"{refusal.split(': a table whose versions', 1)[0]}. It stays soft-deleted. To keep it, undrop_table "
        "it and record its versions written by location (a server does so before it answers the next "
        "request on the table; in process, adopt_versions_written_by_location), which names any file "
        "there that is no version of the table, to be removed. To create a new table under the name "
        "instead, purge_table it first"
    )


def written_by_path_error(name: str, version: int, latest: int) -> InvalidTableStateError:
    """The refusal of a new version of table ``name`` while the catalog names version ``latest``
    and a writer by location committed ``version``; it names the way out (before any version, one
    that is not 1 cannot be adopted: ``not_from_version_one_error``)."""
    if not latest and version != 1:
        return not_from_version_one_error(name, version)
    return WrittenByLocationError(
        f"Version {version} of {name} {_WRITTEN_BY_LOCATION} (lance.write_dataset "
        f"on the path, polars' sink_lance), not through the catalog, which names version {latest}: a table "
        "whose versions the catalog manages takes no new version while its dataset is ahead of the catalog. "
        "Record the versions written by location in the catalog with "
        f"lance_iceberg_ns.jobs.adopt_versions_written_by_location, then {_undo_to(latest)} if their data "
        "should not stay; write only through the namespace from then on"
    )


def not_from_version_one_error(name: str, first: int) -> InvalidTableStateError:
    """The refusal of a table with no version in the catalog whose dataset begins at version
    ``first``, not 1: the catalog cannot take its versions, adopted or not."""
    return InvalidTableStateError(
        f"The dataset of {name} begins at version {first}, not 1: a writer by location made it a shallow clone "
        "of another dataset, or removed its first versions, so the catalog cannot take its versions. Drop the "
        "table (or deregister it and register a deep copy of its dataset)"
    )


def rolled_back_error(name: str, latest: int, used: int) -> InvalidTableStateError:
    """The refusal of a new version while ``main`` is back at ``latest`` and versions up to ``used`` exist."""
    return InvalidTableStateError(
        f"The main branch of {name} was moved back to version {latest} (an Iceberg rollback) "
        f"while the table has versions up to {used}, and Lance never writes a version number twice. Move main "
        f"forward again to the snapshot of version {used} (Iceberg: manage_snapshots().set_current_snapshot, "
        f"CALL system.set_current_snapshot), then {_undo_to(latest)} if its data should be current"
    )


def _undo_to(latest: int) -> str:
    """The way back to ``latest``: a restore, or, before any version, a drop."""
    return f"restore_table to version {latest}" if latest else "drop the table"


# The schemes pyiceberg's own FileIOs (pyarrow's, fsspec's) open; Lance's az:// is not one of them.
FILE_IO_SCHEMES = frozenset(
    {"s3", "s3a", "s3n", "oss", "gs", "gcs", "abfs", "abfss", "wasb", "wasbs", "hdfs", "viewfs", "hf"}
)


def refuse_unwritable_manifest_lists(location: str, settings: Settings) -> None:
    """Refuse a managed table at a location whose manifest lists pyiceberg's FileIO cannot write,
    before anything is written, rather than fail its first commit. A FileIO of the configuration's
    own (``iceberg.py-io-impl``) is trusted with any scheme. Raises UnsupportedOperationError."""
    if is_local(location) or "py-io-impl" in settings.catalog_properties:
        return
    scheme, _, rest = location.partition("://")
    scheme = scheme.lower()
    hint = " (abfss://<container>/<path> names the same objects)"
    if scheme not in FILE_IO_SCHEMES:
        raise UnsupportedOperationError(
            f"A managed table cannot live at {location}: pyiceberg's FileIO, which writes its manifest "
            f"lists, does not open {scheme}:// locations{hint if scheme == 'az' else ''}"
        )
    if "@" in rest.partition("/")[0]:  # pyarrow would take <container>@<host> for the container's name
        raise UnsupportedOperationError(
            f"A managed table cannot live at {location}: pyiceberg's FileIO, which writes its manifest "
            f"lists, does not open <container>@<account host> locations{hint}"
        )
