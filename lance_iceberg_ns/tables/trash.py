"""The trash: soft delete, undrop, purge and status of Lance tables (the model is in ``tombstones``).

A soft-deleted table is its companion renamed into its warehouse's trash as a tombstone; each
transition is one catalog call on one identifier, and a purge deletes data only after its drop of
the tombstone won (see ``tombstones`` for why that is the race guard).

Anyone who can write to the catalog can put an entry into a trash namespace, so the bridge acts
only on tombstones it made: a name of a tombstone's shape, a deletion time not in the future, a
Lance companion, and a location whose ownership marker names that very tombstone (a soft delete
carries the marker along its rename): the name then vouches for where the table was, through its
digest. Any other entry there is *foreign*: it is never brought back, never purged and never makes
a name live; ``list_purgable_tables`` reports it, with why, for a person to look at (one whose
origin cannot be told, in the listing of its whole warehouse).

The warehouse's trash is made by the first drop that needs it and never removed, so drops,
deregisters and purges running side by side never find it gone. Tombstones that earlier versions
kept in a namespace's ``__lance_trash__`` are moved into it (``move_legacy_trash``) by the next drop
in their namespace, by ``drop_namespace`` and by ``purge_expired``; until then they are listed,
restored and purged where they are.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from lance_namespace.errors import (
    InvalidInputError,
    InvalidTableStateError,
    NamespaceNotFoundError,
    PermissionDeniedError,
    TableNotFoundError,
)
from pyiceberg import exceptions as iceberg
from pyiceberg.table.update import AssertTableUUID, SetPropertiesUpdate

from lance_iceberg_ns.catalog.companions import Companions
from lance_iceberg_ns.catalog.listing import is_lance_table, walk
from lance_iceberg_ns.catalog.warehouses import BridgeRestCatalog, TableSummary
from lance_iceberg_ns.errors.storage import StoreRefused, StoreUnavailable
from lance_iceberg_ns.identifiers import (
    LEGACY_TRASH_NAMESPACE,
    TRASH_NAMESPACE,
    NamespaceId,
    TableId,
    in_default_namespace,
    legacy_trash_path,
    parse_namespace_id,
    parse_table_id,
    trash_path,
)
from lance_iceberg_ns.tables.placement import Placement
from lance_iceberg_ns.tables.tombstones import (
    NOT_DUE,
    ORIGIN_PROPERTY,
    PurgableTable,
    PurgeReport,
    SkippedPurge,
    TableStatus,
    Tombstone,
    TrashName,
    newest_first,
    origin_property,
)

FUTURE_SKEW_MS = 5 * 60 * 1000  # how far the clocks of bridges sharing a catalog may be apart


class ForeignTombstone(Exception):
    """An entry in a trash namespace that this bridge did not make (or cannot vouch for)."""


@dataclass(frozen=True)
class Vouched:
    """A tombstone the bridge made: its entry, and its location, shown to be its own."""

    entry: TableSummary
    location: str


@dataclass(frozen=True)
class Examined:
    """A trash entry as a listing found it: what ``list_purgable_tables`` says of it, and the
    tombstone it is (None for a foreign entry that is not even that)."""

    purgable: PurgableTable
    tombstone: Tombstone | None


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
        self._trash_made: set[str] = set()  # warehouses whose trash this bridge saw made: never removed

    # --- into the trash ---------------------------------------------------------------------------

    def soft_delete(self, table: TableId, loaded: TableSummary) -> None:
        """Record where the live entry is (when it owns its location), rename it into the
        warehouse's trash as a new tombstone (its marker then names the tombstone; its data stays),
        then move what an earlier version left in the namespace's old trash."""
        tombstone = Tombstone.new(table.iceberg_identifier)
        catalog = self._companions.catalog(table.warehouse)
        if loaded.properties.get(ORIGIN_PROPERTY) != origin_property(tombstone.origin) and self._placement.owns(loaded):
            self._record_origin(catalog, table.iceberg_identifier, loaded, tombstone.origin)
        self._make_trash(table.warehouse)
        aside = self._companions.set_aside(table, loaded, tombstone.name)
        self._placement.renamed(loaded, (table.warehouse, *aside))
        try:
            self.move_legacy_trash(table.namespace)
        except Exception as exc:  # the drop stands; the old trash waits for the next one
            logger.warning("The old trash of %s was not emptied: %s", table.namespace, exc)

    @staticmethod
    def _record_origin(
        catalog: BridgeRestCatalog, identifier: tuple[str, ...], entry: TableSummary, origin: tuple[str, ...]
    ) -> None:
        """Set ``ORIGIN_PROPERTY`` on the entry loaded as ``entry`` (the same table UUID) before it
        is renamed into the trash. Raises CommitFailedException when the name holds another entry
        by now."""
        value = origin_property(origin)
        same_table = (AssertTableUUID(uuid=uuid.UUID(entry.table_uuid)),) if entry.table_uuid else ()
        catalog.commit_changes([(identifier, same_table, (SetPropertiesUpdate(updates={ORIGIN_PROPERTY: value}),))])

    def _make_trash(self, warehouse: str) -> None:
        """Create the warehouse's trash unless this bridge saw it made. Drops racing to make it
        may each be told it exists or, by some catalogs, that the create failed: either is fine
        once it exists."""
        if warehouse not in self._trash_made:
            self._companions.make_trash(warehouse)
            self._trash_made.add(warehouse)

    def move_legacy_trash(self, namespace: NamespaceId) -> list[str]:
        """Move every tombstone an earlier version kept in the namespace's ``__lance_trash__`` into
        the warehouse's trash (each vouched for first; its marker follows it), then drop the old
        namespace once it is empty. Returns the names of the entries left there: foreign ones."""
        catalog = self._companions.catalog(namespace.warehouse)
        legacy = legacy_trash_path(namespace.path)
        names = self._names(catalog, legacy)
        if names is None:
            return []
        left = [name for name in names if not self._move(namespace, name)]
        if not left:
            with contextlib.suppress(iceberg.NamespaceNotEmptyError, iceberg.NoSuchNamespaceError):
                catalog.drop_namespace(legacy)
        return left

    def _move(self, namespace: NamespaceId, name: str) -> bool:
        """Move one entry of the namespace's old trash into the warehouse's trash, if the bridge
        made it. False when it did not, or someone restored, purged or moved it first."""
        tombstone = Tombstone.in_legacy_trash(namespace.path, name)
        if tombstone is None:
            return False
        catalog = self._companions.catalog(namespace.warehouse)
        moved = tombstone.moved()
        try:
            vouched = self.vouch(namespace.warehouse, tombstone)
            if vouched.entry.properties.get(ORIGIN_PROPERTY) != origin_property(moved.origin):
                self._record_origin(catalog, tombstone.identifier, vouched.entry, moved.origin)
            self._make_trash(namespace.warehouse)
            catalog.rename_table(tombstone.identifier, moved.identifier)
        except (ForeignTombstone, iceberg.CommitFailedException, iceberg.TableAlreadyExistsError):
            return False
        except iceberg.NoSuchNamespaceError:  # the warehouse's trash was removed from outside: made again next time
            self._trash_made.discard(namespace.warehouse)
            return False
        except iceberg.NoSuchTableError:
            return True  # restored, purged or moved by someone else meanwhile: not left here
        self._placement.renamed(vouched.entry, (namespace.warehouse, *moved.identifier))
        return True

    # --- finding tombstones ---------------------------------------------------------------------

    @staticmethod
    def _names(catalog: BridgeRestCatalog, path: tuple[str, ...]) -> list[str] | None:
        """The names of the tables of a trash namespace; None when there is no such namespace (or,
        for the trash of earlier versions, none that the catalog takes the name of: S3 Tables' rules
        refuse ``__lance_trash__`` with a 400)."""
        try:
            return [ident[-1] for ident in catalog.list_tables(path)]
        except iceberg.NoSuchNamespaceError:
            return None
        except iceberg.BadRequestError:
            if path[-1:] == (LEGACY_TRASH_NAMESPACE,):
                return None
            raise

    def tombstones(self, table: TableId) -> list[Tombstone]:
        """The table's tombstones by name, newest first: one listing of the warehouse's trash (by
        the digest of the table's identifier), one of its namespace's old trash."""
        catalog = self._companions.catalog(table.warehouse)
        origin = table.iceberg_identifier
        parsed = [TrashName.parse(name) for name in self._names(catalog, trash_path()) or []]
        found = [name.tombstone(origin) for name in parsed if name is not None]
        legacy = self._names(catalog, legacy_trash_path(table.namespace.path)) or []
        found += [Tombstone.in_legacy_trash(table.namespace.path, name) for name in legacy]
        return newest_first(t for t in found if t is not None and t.origin == origin)

    def vouch(self, warehouse: str, tombstone: Tombstone, entry: TableSummary | None = None) -> Vouched:
        """The tombstone's entry (``entry``: loaded already), if the bridge made it (see the module's
        docstring): a deletion time not in the future, a Lance companion, a location of its own.
        Raises ForeignTombstone saying why not, NoSuchTableError when it is gone."""
        return self._vouch(warehouse, tombstone.identifier, tombstone.deleted_at_ms, entry)

    def _vouch(
        self, warehouse: str, identifier: tuple[str, ...], deleted_at_ms: int, entry: TableSummary | None
    ) -> Vouched:
        """``vouch`` for any trash entry named as a tombstone, by where it is and when it says it
        was dropped."""
        if deleted_at_ms > time.time() * 1000 + FUTURE_SKEW_MS:
            raise ForeignTombstone("its deletion time is in the future")
        catalog = self._companions.catalog(warehouse)
        if entry is None:
            entry = catalog.load_table_summary(identifier, refs_only=True)
        if not is_lance_table(entry.properties):
            raise ForeignTombstone("it is not a Lance table")
        try:
            return Vouched(entry, self._placement.prove(entry))
        except (StoreRefused, StoreUnavailable):  # a store that cannot be read shows nothing either way
            raise
        except (PermissionDeniedError, TableNotFoundError, OSError) as refused:
            catalog.load_table_summary(identifier, refs_only=True)  # an undrop just took it: NoSuchTableError
            raise ForeignTombstone(f"its location is not its own ({refused})") from None

    # --- out of the trash -----------------------------------------------------------------------

    def restore(self, table: TableId, tombstone: Tombstone, vouched: Vouched) -> None:
        """Rename the tombstone back (its marker then names the table again): the one catalog call
        an undrop and a purge contend on. Raises TableNotFoundError when a purge took it first,
        NamespaceNotFoundError when the table's namespace is gone (create it again first)."""
        catalog = self._companions.catalog(table.warehouse)
        try:
            catalog.rename_table(tombstone.identifier, table.iceberg_identifier)
        except iceberg.NoSuchTableError:
            raise TableNotFoundError(f"Table {table} was purged before it could be restored") from None
        except iceberg.NoSuchNamespaceError:
            if catalog.namespace_exists(table.namespace.path):  # the old trash it was in was emptied meanwhile
                raise TableNotFoundError(f"Table {table} was moved or purged before it could be restored") from None
            raise NamespaceNotFoundError(
                f"Namespace {table.namespace} does not exist: create it again to restore {table.name} there"
            ) from None
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
                return tombstone, self.vouch(table.warehouse, tombstone)
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
                purged += self._purge_tombstone(table.warehouse, tombstone)
            except ForeignTombstone as why:
                foreign.append(f"{tombstone.name}: {why}")
        if foreign and not purged:
            raise PermissionDeniedError(
                f"The soft-deleted entries of {table} were not made by this bridge, so nothing was deleted "
                f"({'; '.join(foreign)})"
            )
        return purged

    def _purge_tombstone(self, warehouse: str, tombstone: Tombstone) -> bool:
        """Once the bridge has vouched for the tombstone (its location shown to be its own), drop
        it (the race's arbiter), then, only if that drop won, delete the dataset's own files.
        Raises ForeignTombstone (nothing deleted) when it cannot vouch for it."""
        catalog = self._companions.catalog(warehouse)
        try:
            vouched = self.vouch(warehouse, tombstone)
            catalog.drop_table(tombstone.identifier, purge_requested=False)
        except iceberg.NoSuchTableError:
            return False  # restored or purged by someone else first
        self._placement.delete_owned(vouched.entry, vouched.location)
        return True

    # --- listings and purges of a namespace -----------------------------------------------------

    def list_purgable_tables(
        self, namespace_id: list[str], deleted_before: datetime | None = None
    ) -> list[PurgableTable]:
        """See ``IcebergLanceNamespace.list_purgable_tables``."""
        top = _listed_namespace(namespace_id)
        cutoff_ms = None if deleted_before is None else int(deleted_before.timestamp() * 1000)
        found = [
            examined.purgable
            for examined in self._examine_all(top, moving=False)
            if examined.purgable.foreign is not None or cutoff_ms is None or examined.purgable.deleted_at_ms < cutoff_ms
        ]
        return sorted(found, key=lambda purgable: purgable.deleted_at_ms)

    def _examine_all(self, top: NamespaceId, moving: bool) -> list[Examined]:
        """Every entry of the warehouse's trash dropped from ``top`` or beneath it (every entry, for
        a warehouse), and of the old trash of each namespace there, first emptied into the
        warehouse's when ``moving``. A namespace that is gone still has its tombstones listed;
        NamespaceNotFoundError when it has none either."""
        catalog = self._companions.catalog(top.warehouse)
        try:
            walked = list(walk(catalog, top))
        except iceberg.NoSuchNamespaceError:
            if not top.path:
                raise
            walked = None  # dropped: what was soft-deleted from it is still in the warehouse's trash
        named: list[tuple[NamespaceId | None, str]] = []
        listed = [top.path, *(namespace.path for namespace, _ in walked or [])]  # where a name's label may be from
        for namespace, children in walked or []:
            if LEGACY_TRASH_NAMESPACE in children:
                left = self.move_legacy_trash(namespace) if moving else None
                legacy = left if left is not None else self._names(catalog, legacy_trash_path(namespace.path))
                named += [(namespace, name) for name in legacy or []]
        named += [(None, name) for name in self._names(catalog, trash_path()) or []]
        found = self._companions.lookups().map(lambda entry: self._examine(top, listed, *entry), named)
        examined = [entry for entry in found if entry is not None]
        if walked is None and not examined:
            raise NamespaceNotFoundError(f"Namespace {top} does not exist, and nothing soft-deleted comes from it")
        return examined

    def _examine(
        self, top: NamespaceId, listed: list[tuple[str, ...]], holder: NamespaceId | None, name: str
    ) -> Examined | None:
        """What a listing of ``top`` (and of the namespaces ``listed`` beneath it) says of one trash
        entry: of the old trash of ``holder``, or of the warehouse's (``holder`` None). None: gone
        meanwhile, or not dropped from ``top``."""
        if holder is not None:
            return self._examine_legacy(holder, name)
        parsed = TrashName.parse(name)
        unknown_origin = PurgableTable([top.warehouse, TRASH_NAMESPACE, name], None, name)
        if parsed is None:
            return None if top.path else _foreign(unknown_origin, "its name is not a tombstone's")
        identifier = (*trash_path(), name)
        try:
            entry = self._companions.catalog(top.warehouse).load_table_summary(identifier, refs_only=True)
            tombstone = parsed.found_in(entry.properties, listed)
            if tombstone is None:  # whose it was cannot be told: the listing of the warehouse reports it
                if top.path:
                    return None
                self._vouch(top.warehouse, identifier, parsed.deleted_at_ms, entry)
                return _foreign(unknown_origin, "it does not say where it was dropped from")
            if tombstone.origin[: len(top.path)] != top.path:
                return None
            return self._examined(top.warehouse, tombstone, entry)
        except ForeignTombstone as why:
            return _foreign(unknown_origin, str(why))
        except iceberg.NoSuchTableError:
            return None

    def _examine_legacy(self, holder: NamespaceId, name: str) -> Examined | None:
        tombstone = Tombstone.in_legacy_trash(holder.path, name)
        if tombstone is None:
            unnamed = PurgableTable([*holder.parts, LEGACY_TRASH_NAMESPACE, name], None, name)
            return _foreign(unnamed, "its name is not a tombstone's")
        try:
            return self._examined(holder.warehouse, tombstone, None)
        except iceberg.NoSuchTableError:
            return None

    def _examined(self, warehouse: str, tombstone: Tombstone, entry: TableSummary | None) -> Examined:
        """A tombstone as a listing reports it: foreign, with why, when the bridge cannot vouch for
        it. Raises NoSuchTableError when it is gone."""
        purgable = PurgableTable([warehouse, *tombstone.origin], tombstone.deleted_at, tombstone.name)
        try:
            self.vouch(warehouse, tombstone, entry)
        except (StoreRefused, StoreUnavailable) as unread:  # listed, never purged, while it cannot be read
            why = f"its location cannot be read: {unread}"
            return Examined(replace(purgable, unreadable=why), tombstone)
        except ForeignTombstone as why:
            return Examined(PurgableTable(purgable.id, purgable.deleted_at, purgable.tombstone, str(why)), tombstone)
        return Examined(purgable, tombstone)

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
        ``deleted_before`` (default: now minus the trash's time to live), having first moved the
        tombstones of the old trash namespaces there into the warehouse's trash. A foreign
        tombstone, or one that cannot show it owns its location, is left whole, with a warning
        saying why; the answer lists the ids purged, and in ``skipped`` every entry left whole,
        with why."""
        top = _listed_namespace(namespace_id)
        if deleted_before is None:
            deleted_before = datetime.now(timezone.utc) - timedelta(seconds=self._ttl_seconds)
        cutoff_ms = int(deleted_before.timestamp() * 1000)
        report = PurgeReport()
        for examined in sorted(self._examine_all(top, moving=True), key=lambda e: e.purgable.deleted_at_ms):
            skipped = self._purge_entry(top.warehouse, examined, cutoff_ms, deleted_before)
            purgable = examined.purgable
            if skipped is None:
                report.append(purgable.id)
            elif skipped:
                report.skipped.append(SkippedPurge(purgable.id, purgable.tombstone, skipped))
        return report

    def _purge_entry(self, warehouse: str, examined: Examined, cutoff_ms: int, deleted_before: datetime) -> str | None:
        """Purge one trash entry: None when purged, else why not ('' when someone took it first)."""
        purgable, tombstone = examined.purgable, examined.tombstone
        if purgable.foreign is not None or tombstone is None:
            logger.warning("Not purging %s: it is foreign (%s)", purgable.tombstone, purgable.foreign)
            return f"foreign tombstone: {purgable.foreign}"
        if purgable.unreadable is not None:
            logger.warning("Not purging %s: %s", purgable.tombstone, purgable.unreadable)
            return f"location unreadable: {purgable.unreadable}"
        if purgable.deleted_at_ms >= cutoff_ms:
            when, cutoff = (_second(moment) for moment in (purgable.deleted_at, deleted_before))
            return f"{NOT_DUE}: soft-deleted at {when}, purging only those deleted before {cutoff}"
        try:
            return None if self._purge_tombstone(warehouse, tombstone) else ""
        except (ForeignTombstone, iceberg.ForbiddenError) as refused:
            logger.warning("Not purging %s (%s): %s", ".".join(purgable.id), purgable.tombstone, refused)
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


def _listed_namespace(namespace_id: list[str]) -> NamespaceId:
    namespace = parse_namespace_id(namespace_id)
    if namespace is None:
        raise InvalidInputError("Give the warehouse or namespace whose soft-deleted tables to list")
    return namespace


def _foreign(purgable: PurgableTable, why: str) -> Examined:
    return Examined(PurgableTable(purgable.id, purgable.deleted_at, purgable.tombstone, why), None)


def _second(moment: datetime | None) -> str:
    return "an unknown time" if moment is None else moment.isoformat(timespec="seconds")
