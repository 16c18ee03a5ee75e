"""Companion tables: the Iceberg entries that stand for Lance tables in the catalog.

Every Lance table is a companion Iceberg table with a one-column dummy schema, the property
``table_type=lance`` and the Lance dataset root as its location. This module loads, finds,
creates, renames, sets aside and drops them, through the warehouse catalogs; it speaks pyiceberg
only (the catalog half of the bridge never touches Lance data).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from lance_namespace.errors import ConcurrentModificationError, InvalidInputError
from pydantic import ValidationError
from pyiceberg import exceptions as iceberg
from pyiceberg.schema import Schema
from pyiceberg.table.update import AssertTableUUID, SetPropertiesUpdate
from pyiceberg.types import NestedField, StringType

from lance_iceberg_ns.cache import RecentlyUsed
from lance_iceberg_ns.catalog.listing import (
    TABLE_TYPE_KEY,
    TABLE_TYPE_LANCE,
    TableTypes,
    is_lance_table,
    parallel_map,
    shared_table_types,
)
from lance_iceberg_ns.catalog.managed_state import ManagedState
from lance_iceberg_ns.catalog.property_rules import check_requested_properties, plain_property_key
from lance_iceberg_ns.catalog.warehouse_cache import (
    WarehouseCatalogs,
    acquire_warehouse_catalogs,
    release_warehouse_catalogs,
)
from lance_iceberg_ns.catalog.warehouses import BridgeRestCatalog, TableSummary
from lance_iceberg_ns.config.settings import Settings, looks_secret
from lance_iceberg_ns.identifiers import LEGACY_TRASH_NAMESPACE, NamespaceId, TableId, aside_name, trash_path

logger = logging.getLogger(__name__)

BOOKKEEPING_PREFIX = "lance-iceberg-ns."
# The property that tells, after a lost answer, whether a create landed
# (``BridgeRestCatalog.create_table_once``); the location's ownership marker names it too, until
# the catalog's table UUID is known.
CREATE_ID = BOOKKEEPING_PREFIX + "create-id"
TRASH_COMMENT = "soft-deleted Lance tables (lance-iceberg-ns)"
# Iceberg engines on the same catalog take a table's location for theirs. With these, they refuse
# what would delete or add files there: Spark's remove_orphan_files, expire_snapshots and DROP TABLE
# PURGE ("GC is disabled"), INSERT INTO from Spark or pyiceberg ("Invalid file format: lance"), and
# from DuckDB, which writes Parquet whatever the format says but checks the codec before it writes
# ("Expected codec argument to be any of [...]"). Plain properties: every catalog keeps them.
MANAGED_PROPERTY = "table_version_management"  # the catalog manages the table's Lance versions
LANCE_VERSION_KEY = "lance.version"  # in a snapshot's summary: the Lance version it records
ENGINE_PROTECTION = {
    "gc.enabled": "false",
    "write.format.default": "lance",
    "write.parquet.compression-codec": "lance",
}
# After a catalog refused to restore a table's protection (the bridge may not change its
# properties), the table's reads go on without trying again, or warning again, for this long.
RESTORE_RETRY_SECONDS = 60.0


def companion_table_schema() -> Schema:
    """The schema of every companion table: one nullable string column ``dummy``."""
    return Schema(NestedField(field_id=1, name="dummy", field_type=StringType(), required=False))


def shown(properties: Mapping[str, str]) -> dict[str, str]:
    """A companion table's properties as answered: without the bridge's own bookkeeping."""
    return {key: value for key, value in properties.items() if not key.startswith(BOOKKEEPING_PREFIX)}


def stored_properties(requested: Mapping[str, str] | None) -> dict[str, str]:
    """Request properties as stored on a companion table: never a secret, always the type and the
    engine protection. Raises InvalidInputError for properties that would move the catalog's or the
    bridge's files, or let Iceberg engines delete or write the table's files."""
    check_requested_properties(dict(requested or {}), BOOKKEEPING_PREFIX)
    properties = {}
    for key, value in (requested or {}).items():
        if looks_secret(key, value):
            logger.warning("Not storing property %r in the catalog: it looks like a secret", key)
            continue
        if _refuse_unprotecting(key, value):
            continue  # the protection itself, stored under its own key below
        properties[key] = value
    properties[TABLE_TYPE_KEY] = TABLE_TYPE_LANCE  # always wins over a requested value
    return {**properties, **ENGINE_PROTECTION}


def _refuse_unprotecting(key: str, value: str) -> bool:
    """True when ``key`` names an engine protection and asks for its value; InvalidInputError when
    it asks for another."""
    plain = plain_property_key(key)
    if plain not in ENGINE_PROTECTION:
        return False
    if str(value).strip().lower() != ENGINE_PROTECTION[plain]:
        raise InvalidInputError(
            f"{key}={value!r} would let Iceberg engines delete or write the Lance table's files; "
            f"a Lance table keeps {plain}={ENGINE_PROTECTION[plain]}"
        )
    return True


def missing_protection(properties: Mapping[str, str], answer: Any = None) -> dict[str, str]:
    """The engine protections a companion's properties lack (or hold with another value); and, for
    a table whose ``main`` holds a Lance version the catalog recorded (``answer``: its loadTable
    answer), the management of its versions. An engine that removed ``table_version_management``
    would otherwise have the bridge write the table's next versions by its own commits on disk,
    which the catalog's readers no longer saw once the property was back."""
    missing = {
        key: value for key, value in ENGINE_PROTECTION.items() if str(properties.get(key, "")).strip().lower() != value
    }
    if not is_managed(properties) and _holds_lance_version(answer):
        missing[MANAGED_PROPERTY] = "true"
    return missing


def is_managed(properties: Mapping[str, str] | None) -> bool:
    """True when a companion table's properties say the catalog manages its versions."""
    return str((properties or {}).get(MANAGED_PROPERTY, "")).strip().lower() == "true"


def managed_entry(loaded: TableSummary) -> bool:
    """Whether the catalog manages the versions of the entry ``loaded``: its property says so, or a
    snapshot of it records a Lance version (an engine removed the property, and restoring it
    failed: the table is managed all the same, never written behind the catalog)."""
    return is_managed(loaded.properties) or _holds_lance_version(loaded.answer)


def _holds_lance_version(answer: Any) -> bool:
    """Whether a snapshot of a loadTable answer (those it holds) records a Lance version."""
    metadata = getattr(answer, "metadata", None)
    return any(
        snapshot.summary is not None and LANCE_VERSION_KEY in snapshot.summary.additional_properties
        for snapshot in (getattr(metadata, "snapshots", None) or ())
    )


def turned_off(properties: Mapping[str, str], missing: Mapping[str, str]) -> str:
    """How the ``missing`` protections are off, for a log line: ``gc.enabled changed,
    write.format.default removed``. Names only: a value found there is never shown."""
    return ", ".join(f"{key} {'changed' if key in properties else 'removed'}" for key in missing)


@dataclass
class Protected:
    """What ``Companions.protect_beneath`` found and did: the companions it protected, those that
    already were, and every one found without (part of) its protection with the properties it
    lacked; when only checking, those were left as they were and none is ``protected``."""

    protected: list[tuple[str, ...]] = field(default_factory=list)
    already: list[tuple[str, ...]] = field(default_factory=list)
    missing: dict[tuple[str, ...], tuple[str, ...]] = field(default_factory=dict)


class Companions:
    """The companion tables of the warehouses one bridge reaches, with what the bridge remembers
    of them: which names are Lance tables, and managed tables' latest states."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._warehouses = acquire_warehouse_catalogs(settings)
        self._released = False
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self.types: TableTypes = shared_table_types(
            settings.endpoint, settings.principal(), settings.table_type_cache_seconds
        )
        self.managed = ManagedState(settings.commit_cache_seconds)
        # tables whose protection a catalog refused to restore lately (``protect``)
        self._unrestorable: RecentlyUsed[tuple[str, tuple[str, ...], str | None], bool] = RecentlyUsed(
            1024, RESTORE_RETRY_SECONDS
        )
        # the one name of a catalog without warehouse prefixes, once named (``_one_warehouse``)
        self._unprefixed: str | None = settings.warehouses[0] if settings.warehouses else None

    # --- connections ----------------------------------------------------------------------

    def catalog(self, warehouse: str) -> BridgeRestCatalog:
        """The warehouse's pyiceberg catalog. Raises NamespaceNotFoundError for a warehouse the
        server does not know, InvalidInputError for a second name of a catalog without prefixes."""
        catalog, prefix = self.warehouses().connected(warehouse)
        if not prefix:
            self._one_warehouse(warehouse)
        return catalog

    def _one_warehouse(self, warehouse: str) -> None:
        """A catalog without warehouse prefixes (its ``/v1/config`` names none, and it routes no
        ``/v1/<warehouse>/``) serves one catalog under every warehouse name, so it is one warehouse:
        the first of the ``warehouses`` setting, else the first name this bridge used for it.
        Another name would reach the same tables, whose ownership markers name the first, and
        every write would be refused as another table's: it is refused here, at its first use."""
        with self._lock:
            if self._unprefixed is None:
                self._unprefixed = warehouse
            named = self._unprefixed
        if warehouse != named:
            raise self.second_name(warehouse, named)

    def second_name(self, warehouse: str, named: str) -> InvalidInputError:
        """The error for ``warehouse``, a second name of the catalog without prefixes ``named`` names."""
        endpoint = self._settings.redact(self._settings.endpoint)
        return InvalidInputError(
            f"Warehouse {warehouse!r} is another name for warehouse {named!r}: the catalog at {endpoint} has no "
            "warehouse prefixes (its /v1/config names none), so every warehouse name reaches the same namespaces "
            f"and tables. Name them [{named!r}, ...], or give the property warehouses={named} to every bridge on "
            "this catalog (see docs/warehouses-and-prefixes.md)"
        )

    def one_catalog(self, warehouse: str, other: str) -> bool:
        """Whether two warehouse names reach the same catalog without prefixes."""
        catalogs = self.warehouses()
        return warehouse != other and catalogs.prefix(warehouse) == "" and catalogs.prefix(other) == ""

    def warehouses(self) -> WarehouseCatalogs:
        """The warehouse catalogs (taken back after ``close``: the object stays usable)."""
        if self._released:
            with self._lock:
                if self._released:
                    self._warehouses = acquire_warehouse_catalogs(self._settings)
                    self._released = False
        return self._warehouses

    def lookups(self) -> ThreadPoolExecutor:
        """Threads for catalog lookups that run side by side (a listing's loadTable requests, a
        read's check of where its table is); started as needed."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self._settings.lookup_threads, thread_name_prefix="lance-iceberg-ns-lookup"
                )
            return self._executor

    def close(self) -> None:
        """Give back the catalog connections (closed when no other bridge of the process shares
        them) and stop the lookup threads."""
        with self._lock:
            if not self._released:
                self._released = True
                release_warehouse_catalogs(self._settings)
            if self._executor is not None:
                self._executor.shutdown(wait=False)
                self._executor = None

    # --- lookups ----------------------------------------------------------------------------

    def load(self, table: TableId) -> TableSummary:
        """The companion table's summary. Raises NoSuchTableError; a plain Iceberg table under
        that name is InvalidInputError."""
        loaded = self.catalog(table.warehouse).load_table_summary(table.iceberg_identifier, refs_only=True)
        self._require_lance(table, loaded.properties)
        return loaded

    def find(self, table: TableId) -> TableSummary | None:
        """The companion table's summary, or None when the name holds no table."""
        try:
            return self.load(table)
        except iceberg.NoSuchTableError:
            return None

    def load_table(self, table: TableId, history: bool) -> Any:
        """The companion table as pyiceberg loads it: with every snapshot when ``history``, else
        only the current ones (one cheap request). A plain Iceberg table is InvalidInputError."""
        catalog = self.catalog(table.warehouse)
        identifier = table.iceberg_identifier
        loaded = catalog.load_table(identifier) if history else catalog.load_table_refs(identifier)
        self._require_lance(table, loaded.properties)
        return loaded

    def table_from_summary(self, table: TableId, summary: TableSummary) -> Any:
        """pyiceberg's ``Table`` for a summary just loaded, with no new request."""
        return self.catalog(table.warehouse).table_from_summary(table.iceberg_identifier, summary)

    def exists(self, table: TableId) -> bool:
        """Whether the name holds a table (of any type)."""
        return self.catalog(table.warehouse).table_exists(table.iceberg_identifier)

    def _require_lance(self, table: TableId, properties: Mapping[str, str]) -> None:
        is_lance = is_lance_table(dict(properties))
        self.types.keep((table.warehouse, table.iceberg_identifier), is_lance)
        if not is_lance:
            raise InvalidInputError(f"Table {table} is an Iceberg table, not a Lance table (no table_type=lance)")

    # --- changes --------------------------------------------------------------------------

    def create(self, table: TableId, location: str | None, properties: dict[str, str], create_id: str) -> Any:
        """Create the companion table at ``location``, or where the catalog places it when None
        (pyiceberg's ``Table``), with the engine protection, safely retried when the answer is lost
        (``BridgeRestCatalog.create_table_once``)."""
        created = self.catalog(table.warehouse).create_table_once(
            table.iceberg_identifier,
            CREATE_ID,
            create_id,
            schema=companion_table_schema(),
            location=location,
            properties={**properties, **ENGINE_PROTECTION},
        )
        self.managed.forget(table)  # a state kept of the name is an earlier table's (dropped by an engine)
        self.types.keep((table.warehouse, table.iceberg_identifier), True)
        return created

    def protect(self, table: TableId, loaded: TableSummary) -> TableSummary:
        """Restore ``ENGINE_PROTECTION`` where the entry just loaded lacks it (an engine turned it
        off, or the entry is older than the protection), before a data operation on the table:
        nothing to do, and no request, when it has it all; else one catalog commit, and a warning
        naming the table and what was off. The summary as the catalog now holds it. A catalog that
        refuses (no right to change the table's properties, or the entry replaced meanwhile) is
        a warning too, repeated at most every ``RESTORE_RETRY_SECONDS``, and the operation this
        comes before goes on without it."""
        missing = missing_protection(loaded.properties, loaded.answer)
        if not missing:
            return loaded
        refused = (table.warehouse, table.iceberg_identifier, loaded.table_uuid)
        if self._unrestorable.get(refused):
            return loaded
        how = turned_off(loaded.properties, missing)
        try:
            self._commit_protection(table.warehouse, table.iceberg_identifier, loaded, missing)
        except (iceberg.RESTError, iceberg.CommitFailedException, iceberg.NoSuchTableError) as exc:
            self._unrestorable.keep(refused, True)
            logger.warning(
                "Could not protect %s from Iceberg engines (%s): %s. Until it is restored, an Iceberg engine on the "
                "catalog can delete the Lance table's files (run `lance-iceberg-ns tables protect` as a principal "
                "that may change table properties)",
                table,
                how,
                type(exc).__name__,
            )
            return loaded
        logger.warning(
            "Lance table %s had its protection from Iceberg engines turned off in the catalog (%s): restored %s",
            table,
            how,
            ", ".join(f"{key}={value}" for key, value in missing.items()),
        )
        return replace(loaded, properties={**loaded.properties, **missing})

    def _commit_protection(
        self, warehouse: str, identifier: tuple[str, ...], loaded: TableSummary, missing: Mapping[str, str]
    ) -> None:
        """Set the ``missing`` engine protections on the entry ``loaded`` was loaded as (the same
        table UUID), in one commit. Raises the catalog's errors."""
        same_table = (AssertTableUUID(uuid=uuid.UUID(loaded.table_uuid)),) if loaded.table_uuid else ()
        change = (identifier, same_table, (SetPropertiesUpdate(updates=dict(missing)),))
        self.catalog(warehouse).commit_changes([change])
        self._unrestorable.forget((warehouse, identifier, loaded.table_uuid))

    def protect_beneath(self, top: NamespaceId, check: bool = False) -> Protected:
        """Protect every companion of ``top`` and of every namespace beneath it (for a warehouse,
        its trash included) where its protection is missing; with ``check``, change nothing and
        only say which lack it. Plain Iceberg tables are never touched. An entry is protected
        whether or not it owns its location: with GC on, an engine could delete the files there
        through any entry naming it. Raises the catalog's errors."""
        catalog = self.catalog(top.warehouse)
        done = Protected()

        def load(identifier: tuple[str, ...]) -> TableSummary | None:
            try:
                return catalog.load_table_summary(identifier, refs_only=True)
            except (iceberg.NoSuchTableError, ValidationError):  # dropped since the listing, or not one of ours
                return None

        pending = [top.path]
        while pending:
            path = pending.pop()
            pending += [(*path, child[-1]) for child in catalog.list_namespaces(path)]
            identifiers = [tuple(identifier) for identifier in catalog.list_tables(path)] if path else []
            for identifier, loaded in zip(identifiers, parallel_map(self.lookups(), load, identifiers), strict=True):
                if loaded is None or not is_lance_table(loaded.properties):
                    continue
                missing = missing_protection(loaded.properties, loaded.answer)
                if not missing:
                    done.already.append(identifier)
                    continue
                done.missing[identifier] = tuple(missing)
                if not check:
                    self._commit_protection(top.warehouse, identifier, loaded, missing)
                    done.protected.append(identifier)
        return done

    def rename(self, source: TableId, target: TableId) -> None:
        """Rename within a warehouse; the data stays where it is."""
        self.catalog(source.warehouse).rename_table(source.iceberg_identifier, target.iceberg_identifier)
        self.forget(source)
        self.managed.forget(target)
        self.types.keep((target.warehouse, target.iceberg_identifier), True)

    def set_aside(
        self, table: TableId, expected: TableSummary, name: str | None = None, why: str = ""
    ) -> tuple[str, ...]:
        """Rename the entry into the trash namespace, out of every client's reach: as ``name`` (a
        tombstone), or out of every listing while it is ``why``. Then check that it is still the
        one loaded as ``expected``: between the load and now, a rename and a new table could have
        given the name to another entry. Raises ConcurrentModificationError (the entry back in
        place). Returns the identifier it has in the trash."""
        catalog = self.catalog(table.warehouse)
        trash = trash_path(table.namespace.path)
        aside = (*trash, name or aside_name(why))
        for last_try in (False, True):  # a drop may have just removed an empty trash (``drop``)
            self.make_trash(table.warehouse)
            try:
                catalog.rename_table(table.iceberg_identifier, aside)
                break
            except (iceberg.NoSuchNamespaceError, iceberg.NoSuchTableError):
                if last_try or catalog.namespace_exists(trash):
                    raise
        self.forget(table)
        if catalog.load_table_summary(aside, refs_only=True).table_uuid != expected.table_uuid:
            catalog.rename_table(aside, table.iceberg_identifier)
            raise ConcurrentModificationError(f"Table {table} was replaced meanwhile; nothing was changed")
        return aside

    def make_trash(self, warehouse: str) -> None:
        """Create the warehouse's trash unless it exists: racing creates may be told it exists or,
        by a JDBC catalog, get a 500; either is fine once it exists."""
        catalog = self.catalog(warehouse)
        try:
            catalog.create_namespace(trash_path(), {"comment": TRASH_COMMENT})
        except iceberg.NamespaceAlreadyExistsError:
            pass
        except iceberg.ServerError:
            if not catalog.namespace_exists(trash_path()):
                raise

    def put_back(self, table: TableId, aside: tuple[str, ...]) -> None:
        """Undo ``set_aside``: the entry takes its name again."""
        self.catalog(table.warehouse).rename_table(aside, table.iceberg_identifier)

    def drop(self, warehouse: str, identifier: tuple[str, ...]) -> None:
        """Remove an entry from the catalog (never its files: the bridge deletes what it owns); an
        entry of a namespace's trash as earlier versions kept it takes that namespace along when
        left empty, so a purge leaves nothing behind."""
        catalog = self.catalog(warehouse)
        catalog.drop_table(identifier, purge_requested=False)
        if len(identifier) > 2 and identifier[-2] == LEGACY_TRASH_NAMESPACE:
            with contextlib.suppress(iceberg.NamespaceNotEmptyError, iceberg.NoSuchNamespaceError):
                catalog.drop_namespace(identifier[:-1])

    def forget(self, table: TableId) -> None:
        """Forget what is remembered of a name whose table this process just dropped or moved."""
        self.types.forget((table.warehouse, table.iceberg_identifier))
        self.managed.forget(table)
