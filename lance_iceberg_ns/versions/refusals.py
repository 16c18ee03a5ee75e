"""What a table whose versions the catalog manages refuses, and the way out each refusal names:
a snapshot an engine committed with a summary of its own making, versions a writer by location
committed behind the catalog's back (or removed), and a rollback of ``main``."""

from __future__ import annotations

from typing import Any

from lance_namespace.errors import InvalidTableStateError


class FinalNameTaken(Exception):
    """A version the catalog just committed cannot take its final manifest name: a writer by
    location committed that version number meanwhile (``finalize``)."""


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


def written_by_path_error(name: str, version: int, latest: int) -> InvalidTableStateError:
    """The refusal of a new version of table ``name`` while the catalog names version ``latest``
    and a writer by location committed ``version``; it names the way out."""
    return InvalidTableStateError(
        f"Version {version} of {name} was written by a writer that went by its location (lance.write_dataset "
        f"on the path, polars' sink_lance), not through the catalog, which names version {latest}: a table "
        "whose versions the catalog manages takes no new version while its dataset is ahead of the catalog. "
        "Record the versions written by location in the catalog with "
        f"lance_iceberg_ns.jobs.adopt_versions_written_by_location, then {_undo_to(latest)} if their data "
        "should not stay; write only through the namespace from then on"
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
