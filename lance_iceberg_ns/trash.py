"""The trash: soft delete, undrop, purge and status of Lance tables (the model is in ``lifecycle``).

A soft-deleted table is its companion renamed into its namespace's trash as a tombstone; each
transition is one catalog call on one identifier, and a purge deletes data only after its drop of
the tombstone won (see ``lifecycle`` for why that is the race guard).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

from lance_namespace.errors import (
    InvalidInputError,
    InvalidTableStateError,
    PermissionDeniedError,
    TableNotFoundError,
)
from pyiceberg import exceptions as iceberg

from lance_iceberg_ns.catalogs import TableSummary
from lance_iceberg_ns.companions import Companions
from lance_iceberg_ns.identifiers import NamespaceId, TableId, parse_namespace_id, parse_table_id
from lance_iceberg_ns.lifecycle import TRASH_NAMESPACE, PurgableTable, TableStatus, Tombstone, tombstones_of, trash_path
from lance_iceberg_ns.listing import walk
from lance_iceberg_ns.placement import Placement

logger = logging.getLogger(__name__)


class Trash:
    """Soft-deleted tables of one bridge: set aside, brought back, purged, reported."""

    def __init__(self, companions: Companions, placement: Placement, ttl_seconds: float) -> None:
        self._companions = companions
        self._placement = placement
        self._ttl_seconds = ttl_seconds

    def soft_delete(self, table: TableId, loaded: TableSummary) -> None:
        """Rename the live entry into the trash as a new tombstone; its data stays."""
        self._companions.set_aside(table, loaded, Tombstone.new(table.name).name)

    def tombstones(self, table: TableId) -> list[Tombstone]:
        """The table's tombstones, newest first: one listing of the trash namespace."""
        try:
            catalog = self._companions.catalog(table.warehouse)
            names = [ident[-1] for ident in catalog.list_tables(trash_path(table.namespace.path))]
        except iceberg.NoSuchNamespaceError:
            return []
        return tombstones_of(names, table.name)

    def restore(self, table: TableId, tombstone: Tombstone) -> None:
        """Rename the tombstone back: the one catalog call an undrop and a purge contend on.
        Raises TableNotFoundError when a purge took it first."""
        catalog = self._companions.catalog(table.warehouse)
        try:
            catalog.rename_table((*trash_path(table.namespace.path), tombstone.name), table.iceberg_identifier)
        except iceberg.NoSuchTableError:
            raise TableNotFoundError(f"Table {table} was purged before it could be restored") from None
        self._companions.types.keep((table.warehouse, table.iceberg_identifier), True)

    def restore_newest(self, table: TableId) -> bool:
        """Bring back the newest tombstone of the name, if there is one (True when it did)."""
        tombstones = self.tombstones(table)
        if tombstones:
            self.restore(table, tombstones[0])
        return bool(tombstones)

    def undrop(self, table_id: list[str]) -> TableStatus:
        """See ``IcebergLanceNamespace.undrop_table``."""
        table = parse_table_id(table_id)
        if not self.restore_newest(table):
            raise TableNotFoundError(f"Table {table} has no soft-deleted version to restore")
        return TableStatus("exists")

    def purge(self, table_id: list[str]) -> int:
        """See ``IcebergLanceNamespace.purge_table``."""
        table = parse_table_id(table_id)
        tombstones = self.tombstones(table)
        if not tombstones:
            if self._companions.exists(table):
                raise InvalidTableStateError(f"Table {table} is live; only soft-deleted tables can be purged")
            raise TableNotFoundError(f"Table {table} has nothing soft-deleted to purge")
        return sum(self._purge_tombstone(table, tombstone) for tombstone in tombstones)

    def _purge_tombstone(self, table: TableId, tombstone: Tombstone) -> bool:
        """Once the tombstone has shown that it owns its location, drop it (the race's arbiter),
        then, only if that drop won, delete the dataset's own files. Raises PermissionDeniedError
        (nothing deleted) when ownership cannot be shown."""
        catalog = self._companions.catalog(table.warehouse)
        identifier = (*trash_path(table.namespace.path), tombstone.name)
        try:
            entry = catalog.load_table_summary(identifier)
            location = self._placement.prove(entry)
            catalog.drop_table(identifier, purge_requested=False)
        except iceberg.NoSuchTableError:
            return False  # restored or purged by someone else first
        self._placement.delete_owned(entry, location)
        return True

    def purgable(self, namespace_id: list[str], deleted_before: datetime | None = None) -> list[PurgableTable]:
        """See ``IcebergLanceNamespace.list_purgable_tables``."""
        namespace = parse_namespace_id(namespace_id)
        if namespace is None:
            raise InvalidInputError("Give the warehouse or namespace whose soft-deleted tables to list")
        cutoff_ms = None if deleted_before is None else int(deleted_before.timestamp() * 1000)
        found = []
        for holder, names in self._trash_contents(namespace):
            found += [
                PurgableTable(id=[*holder.parts, t.table_name], deleted_at=t.deleted_at, tombstone=t.name)
                for t in tombstones_of(names)
                if cutoff_ms is None or t.deleted_at_ms < cutoff_ms
            ]
        return sorted(found, key=lambda purgable: purgable.deleted_at)

    def _trash_contents(self, top: NamespaceId) -> Iterator[tuple[NamespaceId, list[str]]]:
        """(namespace, names in its trash) for ``top`` and every namespace beneath it."""
        catalog = self._companions.catalog(top.warehouse)
        for namespace, children in walk(catalog, top):
            if TRASH_NAMESPACE in children:
                yield namespace, [ident[-1] for ident in catalog.list_tables(trash_path(namespace.path))]

    def purge_expired(self, namespace_id: list[str], deleted_before: datetime | None) -> list[list[str]]:
        """Purge every soft-deleted table of ``namespace_id`` (and beneath) deleted before
        ``deleted_before`` (default: now minus the trash's time to live). A tombstone that cannot
        show it owns its location is left whole, with a warning saying why."""
        if deleted_before is None:
            deleted_before = datetime.now(timezone.utc) - timedelta(seconds=self._ttl_seconds)
        purged = []
        for purgable in self.purgable(namespace_id, deleted_before):
            table = parse_table_id(purgable.id)
            tombstone = Tombstone.parse(purgable.tombstone)
            try:
                if tombstone is not None and self._purge_tombstone(table, tombstone):
                    purged.append(purgable.id)
            except (PermissionDeniedError, iceberg.ForbiddenError) as refused:
                logger.warning("Not purging %s (%s): %s", table, purgable.tombstone, refused)
        return purged

    def status(self, table_id: list[str]) -> TableStatus:
        """See ``IcebergLanceNamespace.table_status``."""
        table = parse_table_id(table_id)
        if self._companions.exists(table):
            return TableStatus("exists")
        tombstones = self.tombstones(table)
        if tombstones:
            return TableStatus("soft_deleted", tombstones[0].deleted_at)
        return TableStatus("not_found")
