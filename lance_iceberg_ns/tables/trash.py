"""The trash: soft delete, undrop, purge and status of Lance tables (the model is in ``lifecycle``).

A soft-deleted table is its companion renamed into its namespace's trash as a tombstone; each
transition is one catalog call on one identifier, and a purge deletes data only after its drop of
the tombstone won (see ``lifecycle`` for why that is the race guard).

Anyone who can write to the catalog can put an entry into a trash namespace, so the bridge acts
only on tombstones it made: a name of a tombstone's shape, a deletion time not in the future, a
Lance companion, and a location whose ownership marker names that very tombstone (a soft delete
carries the marker along its rename). Any other entry there is *foreign*: it is never brought
back, never purged and never makes a name live; ``list_purgable_tables`` reports it, with why, for a person
to look at.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from lance_namespace.errors import (
    InvalidInputError,
    InvalidTableStateError,
    PermissionDeniedError,
    TableNotFoundError,
)
from pyiceberg import exceptions as iceberg

from lance_iceberg_ns.catalog.companions import Companions
from lance_iceberg_ns.catalog.listing import is_lance_table, walk
from lance_iceberg_ns.catalog.warehouses import TableSummary
from lance_iceberg_ns.identifiers import (
    TRASH_NAMESPACE,
    NamespaceId,
    TableId,
    in_default_namespace,
    parse_namespace_id,
    parse_table_id,
    trash_path,
)
from lance_iceberg_ns.tables.placement import Placement
from lance_iceberg_ns.tables.tombstones import (
    NOT_DUE,
    PurgableTable,
    PurgeReport,
    SkippedPurge,
    TableStatus,
    Tombstone,
    tombstones_of,
)

FUTURE_SKEW_MS = 5 * 60 * 1000  # how far the clocks of bridges sharing a catalog may be apart


class ForeignTombstone(Exception):
    """An entry in a trash namespace that this bridge did not make (or cannot vouch for)."""


@dataclass(frozen=True)
class Vouched:
    """A tombstone the bridge made: its entry, and its location, shown to be its own."""

    entry: TableSummary
    location: str


logger = logging.getLogger(__name__)


class Trash:
    """Soft-deleted tables of one bridge: set aside, brought back, purged, reported. A table id
    ``purge_tables`` is given is placed in ``default_namespace`` as every operation's is."""

    def __init__(
        self, companions: Companions, placement: Placement, ttl_seconds: float, default_namespace: tuple[str, ...]
    ) -> None:
        self._companions = companions
        self._placement = placement
        self._ttl_seconds = ttl_seconds
        self._default_namespace = default_namespace

    def soft_delete(self, table: TableId, loaded: TableSummary) -> None:
        """Rename the live entry into the trash as a new tombstone (its marker then names the
        tombstone); its data stays."""
        tombstone = self._companions.set_aside(table, loaded, Tombstone.new(table.name).name)
        self._placement.renamed(loaded, (table.warehouse, *tombstone))

    def tombstones(self, table: TableId) -> list[Tombstone]:
        """The table's tombstones by name, newest first: one listing of the trash namespace."""
        try:
            catalog = self._companions.catalog(table.warehouse)
            names = [ident[-1] for ident in catalog.list_tables(trash_path(table.namespace.path))]
        except iceberg.NoSuchNamespaceError:
            return []
        return tombstones_of(names, table.name)

    def vouch(self, namespace: NamespaceId, name: str) -> Vouched:
        """The trash entry ``name`` of ``namespace``, if the bridge made it (see the module's
        docstring). Raises ForeignTombstone saying why not, NoSuchTableError when it is gone."""
        tombstone = Tombstone.parse(name)
        if tombstone is None:
            raise ForeignTombstone("its name is not a tombstone's")
        if tombstone.deleted_at_ms > time.time() * 1000 + FUTURE_SKEW_MS:
            raise ForeignTombstone("its deletion time is in the future")
        catalog = self._companions.catalog(namespace.warehouse)
        identifier = (*trash_path(namespace.path), name)
        entry = catalog.load_table_summary(identifier, refs_only=True)
        if not is_lance_table(entry.properties):
            raise ForeignTombstone("it is not a Lance table")
        try:
            return Vouched(entry, self._placement.prove(entry))
        except (PermissionDeniedError, TableNotFoundError, OSError) as refused:
            catalog.load_table_summary(identifier, refs_only=True)  # an undrop just took it: NoSuchTableError
            raise ForeignTombstone(f"its location is not its own ({refused})") from None

    def restore(self, table: TableId, tombstone: Tombstone, vouched: Vouched) -> None:
        """Rename the tombstone back (its marker then names the table again): the one catalog call
        an undrop and a purge contend on. Raises TableNotFoundError when a purge took it first."""
        catalog = self._companions.catalog(table.warehouse)
        try:
            catalog.rename_table((*trash_path(table.namespace.path), tombstone.name), table.iceberg_identifier)
        except iceberg.NoSuchTableError:
            raise TableNotFoundError(f"Table {table} was purged before it could be restored") from None
        self._placement.renamed(vouched.entry, (table.warehouse, *table.iceberg_identifier))
        self._companions.types.keep((table.warehouse, table.iceberg_identifier), True)

    def restore_newest(self, table: TableId) -> bool:
        """Bring back the newest tombstone of the name that the bridge made, if there is one (True
        when it did); foreign ones are left where they are."""
        vouched = self._newest(table)
        if vouched is not None:
            self.restore(table, *vouched)
        return vouched is not None

    def _newest(self, table: TableId) -> tuple[Tombstone, Vouched] | None:
        for tombstone in self.tombstones(table):
            try:
                return tombstone, self.vouch(table.namespace, tombstone.name)
            except (ForeignTombstone, iceberg.NoSuchTableError):
                continue
        return None

    def undrop_table(self, table_id: list[str]) -> TableStatus:
        """See ``IcebergLanceNamespace.undrop_table``."""
        table = parse_table_id(table_id)
        if not self.restore_newest(table):
            raise TableNotFoundError(f"Table {table} has no soft-deleted version to restore")
        return TableStatus("exists")

    def purge_table(self, table_id: list[str]) -> int:
        """See ``IcebergLanceNamespace.purge_table``."""
        table = parse_table_id(table_id)
        tombstones = self.tombstones(table)
        if not tombstones:
            if self._companions.exists(table):
                raise InvalidTableStateError(f"Table {table} is live; only soft-deleted tables can be purged")
            raise TableNotFoundError(f"Table {table} has nothing soft-deleted to purge")
        purged, foreign = 0, []
        for tombstone in tombstones:
            try:
                purged += self._purge_tombstone(table, tombstone)
            except ForeignTombstone as why:
                foreign.append(f"{tombstone.name}: {why}")
        if foreign and not purged:
            raise PermissionDeniedError(
                f"The soft-deleted entries of {table} were not made by this bridge, so nothing was deleted "
                f"({'; '.join(foreign)})"
            )
        return purged

    def _purge_tombstone(self, table: TableId, tombstone: Tombstone) -> bool:
        """Once the bridge has vouched for the tombstone (its location shown to be its own), drop
        it (the race's arbiter), then, only if that drop won, delete the dataset's own files.
        Raises ForeignTombstone (nothing deleted) when it cannot vouch for it."""
        catalog = self._companions.catalog(table.warehouse)
        try:
            vouched = self.vouch(table.namespace, tombstone.name)
            catalog.drop_table((*trash_path(table.namespace.path), tombstone.name), purge_requested=False)
        except iceberg.NoSuchTableError:
            return False  # restored or purged by someone else first
        self._placement.delete_owned(vouched.entry, vouched.location)
        return True

    def list_purgable_tables(
        self, namespace_id: list[str], deleted_before: datetime | None = None
    ) -> list[PurgableTable]:
        """See ``IcebergLanceNamespace.list_purgable_tables``."""
        namespace = parse_namespace_id(namespace_id)
        if namespace is None:
            raise InvalidInputError("Give the warehouse or namespace whose soft-deleted tables to list")
        cutoff_ms = None if deleted_before is None else int(deleted_before.timestamp() * 1000)
        named = [(holder, name) for holder, names in self._trash_contents(namespace) for name in names]
        examined = self._companions.lookups().map(lambda found: self._examine(*found), named)
        found = [
            purgable
            for purgable in examined
            if purgable is not None
            and (purgable.foreign is not None or cutoff_ms is None or purgable.deleted_at_ms < cutoff_ms)
        ]
        return sorted(found, key=lambda purgable: purgable.deleted_at_ms)

    def _examine(self, holder: NamespaceId, name: str) -> PurgableTable | None:
        """What ``list_purgable_tables`` says of one trash entry (None: gone meanwhile)."""
        tombstone = Tombstone.parse(name)
        try:
            self.vouch(holder, name)
            foreign = None
        except ForeignTombstone as why:
            foreign = str(why)
        except iceberg.NoSuchTableError:
            return None
        if tombstone is None:
            return PurgableTable(
                id=[*holder.parts, TRASH_NAMESPACE, name], deleted_at=None, tombstone=name, foreign=foreign
            )
        return PurgableTable(
            id=[*holder.parts, tombstone.table_name], deleted_at=tombstone.deleted_at, tombstone=name, foreign=foreign
        )

    def _trash_contents(self, top: NamespaceId) -> Iterator[tuple[NamespaceId, list[str]]]:
        """(namespace, names in its trash) for ``top`` and every namespace beneath it."""
        catalog = self._companions.catalog(top.warehouse)
        for namespace, children in walk(catalog, top):
            if TRASH_NAMESPACE in children:
                yield namespace, [ident[-1] for ident in catalog.list_tables(trash_path(namespace.path))]

    def purge_tables(
        self, ids: list[list[str]] | None, namespace_id: list[str] | None, deleted_before: datetime | None
    ) -> list[list[str]]:
        """See ``IcebergLanceNamespace.purge_tables``: each of ``ids`` as ``purge_table`` does (the
        ids purged), or else the expired tables of ``namespace_id`` (``purge_expired``)."""
        if ids is not None:
            default = self._default_namespace
            return [table_id for table_id in ids if self.purge_table(in_default_namespace(table_id, default))]
        if namespace_id is None:
            raise InvalidInputError("purge_tables needs ids, or the namespace whose expired tables to purge")
        return self.purge_expired(namespace_id, deleted_before)

    def purge_expired(self, namespace_id: list[str], deleted_before: datetime | None) -> PurgeReport:
        """Purge every soft-deleted table of ``namespace_id`` (and beneath) deleted before
        ``deleted_before`` (default: now minus the trash's time to live). A foreign tombstone, or
        one that cannot show it owns its location, is left whole, with a warning saying why; the
        answer lists the ids purged, and in ``skipped`` every entry left whole, with why."""
        if deleted_before is None:
            deleted_before = datetime.now(timezone.utc) - timedelta(seconds=self._ttl_seconds)
        cutoff_ms = int(deleted_before.timestamp() * 1000)
        report = PurgeReport()
        for purgable in self.list_purgable_tables(namespace_id):
            skipped = self._purge_entry(purgable, cutoff_ms, deleted_before)
            if skipped is None:
                report.append(purgable.id)
            elif skipped:
                report.skipped.append(SkippedPurge(purgable.id, purgable.tombstone, skipped))
        return report

    def _purge_entry(self, purgable: PurgableTable, cutoff_ms: int, deleted_before: datetime) -> str | None:
        """Purge one trash entry: None when purged, else why not ('' when someone took it first)."""
        tombstone = Tombstone.parse(purgable.tombstone)
        if purgable.foreign is not None or tombstone is None:
            logger.warning("Not purging %s: it is foreign (%s)", purgable.tombstone, purgable.foreign)
            return f"foreign tombstone: {purgable.foreign}"
        if purgable.deleted_at_ms >= cutoff_ms:
            when, cutoff = (_second(moment) for moment in (purgable.deleted_at, deleted_before))
            return f"{NOT_DUE}: soft-deleted at {when}, purging only those deleted before {cutoff}"
        table = parse_table_id(purgable.id)
        try:
            return None if self._purge_tombstone(table, tombstone) else ""
        except (ForeignTombstone, iceberg.ForbiddenError) as refused:
            logger.warning("Not purging %s (%s): %s", table, purgable.tombstone, refused)
            return f"ownership not proved: {refused}"

    def table_status(self, table_id: list[str]) -> TableStatus:
        """See ``IcebergLanceNamespace.table_status``."""
        table = parse_table_id(table_id)
        if self._companions.exists(table):
            return TableStatus("exists")
        newest = self._newest(table)
        if newest is not None:
            return TableStatus("soft_deleted", newest[0].deleted_at)
        return TableStatus("not_found")


def _second(moment: datetime | None) -> str:
    return "an unknown time" if moment is None else moment.isoformat(timespec="seconds")
