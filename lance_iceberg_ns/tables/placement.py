"""Where a table's data lives, and the proof that it is the table's own.

A catalog entry and its location are tied by the ownership marker (``ownership``): a location is
claimed before its entry is made (or, where the catalog places the table, right after: see
``claim_assigned``), proved before anything destructive, released when the entry lets its data go,
and only then are the dataset's own files deleted. Locations are confined to the root and the
allowed locations, if any (``locations``). This is the one place that joins the catalog half
(``companions``) and the storage half.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from lance_namespace.errors import (
    ConcurrentModificationError,
    InvalidInputError,
    NamespaceNotFoundError,
    PermissionDeniedError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from pyiceberg import exceptions as iceberg

from lance_iceberg_ns.catalog.companions import CREATE_ID, Companions
from lance_iceberg_ns.catalog.listing import is_lance_table, parallel_map, walk
from lance_iceberg_ns.catalog.warehouses import TableSummary
from lance_iceberg_ns.data import datasets
from lance_iceberg_ns.errors.storage import StoreRefused
from lance_iceberg_ns.identifiers import (
    LEGACY_TRASH_NAMESPACE,
    TRASH_NAMESPACE,
    NamespaceId,
    TableId,
    legacy_trash_path,
    trash_path,
)
from lance_iceberg_ns.storage import files, ownership
from lance_iceberg_ns.storage.credentials import lance_storage_options, vended_storage_options
from lance_iceberg_ns.storage.locations import LocationPolicy, is_local, is_relative, normalize_location, store_top
from lance_iceberg_ns.storage.options import StorageOptions
from lance_iceberg_ns.versions import bases

logger = logging.getLogger(__name__)

# A claim whose entry is not made yet (an import still copying), or a location whose files are
# being deleted, older than this is taken to be left behind by a writer that stopped.
IN_FLIGHT_SECONDS = 24 * 3600


def owner_entry(summary: TableSummary) -> ownership.Entry:
    """The entry a loaded summary is, as ownership markers name it."""
    return ownership.Entry(summary.entry, summary.table_uuid, summary.properties.get(CREATE_ID))


def catalog_name(table: TableId) -> ownership.EntryName:
    """Where the catalog holds a table: (warehouse, *identifier)."""
    return (table.warehouse, *table.iceberg_identifier)


@dataclass(frozen=True)
class Unregistered:
    """A location an entry claimed whose entry the catalog no longer holds (dropped from outside
    the bridge): its data belongs to nobody until it is registered again."""

    location: str
    was: str  # the name its marker gives, as text


Check = Callable[[str], None]  # refuses a place, raising


class Placement:
    """Claims, replaces, proves and releases table locations, and deletes only owned files."""

    def __init__(
        self,
        companions: Companions,
        locations: LocationPolicy,
        options: StorageOptions,
        let_go: Callable[[str], None],
    ) -> None:
        self._companions = companions
        self.locations = locations
        self._options = options
        self._let_go = let_go  # forget what is kept open at a location whose data goes

    # --- locations ----------------------------------------------------------------------------

    def new_location(self, table: TableId) -> str:
        """A new location of the table's own under the root (``LocationPolicy.default_location``)."""
        return self.locations.default_location(table.parts)

    def confine(self, location: str) -> str:
        """The normal form of a location under the root or an allowed one; PermissionDeniedError else."""
        return self.locations.confine(location)

    def free_location(self, raw: str) -> str:
        """A location a declare asked for: confined, and holding nothing yet. Over existing files a
        table would later delete what it never wrote, and over a dataset nobody owns it would adopt
        data that ``register_table`` is for (an owned place is refused by the claim).
        Raises PermissionDeniedError, InvalidInputError."""
        location = self.locations.confine_requested(raw)
        options = self._options.for_bridge()
        held = files.entries_at(location, options)  # one listing of the place
        if held and held & set(ownership.MARKER_ENTRIES):
            return location  # the claim says whose it is
        if held and files.VERSIONS_DIRECTORY in held and datasets.dataset_exists(location, options):
            raise InvalidInputError(f"A Lance dataset is already at {location}: register it with register_table")
        if held or (is_local(location) and not files.is_empty_directory(location, options)):  # a file, a link
            raise InvalidInputError(f"{location} already holds files: a table is declared in an empty place")
        return location

    def dataset_location(self, raw: str, table: TableId) -> str:
        """A location a register asked for: confined, and holding a dataset that names only its own
        files (InvalidInputError: a shallow clone would read, and write through, its source's).
        A relative one is resolved against the directory of the table's namespace under the root
        (``LocationPolicy.relative_location``), then confined and owned like any other."""
        if is_relative(raw):
            raw = self.locations.relative_location(table.namespace.parts, raw)
        location = self.locations.confine_requested(raw)
        bases.refuse_unregistrable(location, self._options.for_bridge())
        return location

    def entry_options(self, entry: TableSummary) -> dict[str, str]:
        """What the bridge reaches an entry's files with: its static options, and the credentials
        the catalog vended in the entry's loadTable answer, if any (no extra request)."""
        vended = vended_storage_options(entry.config, entry.storage_credentials, entry.location)
        return self._options.for_bridge(vended)

    # --- ownership ------------------------------------------------------------------------------

    def claim(
        self,
        table: TableId,
        location: str,
        properties: dict[str, str],
        taking_over: bool = False,
        fill: Callable[[], None] | None = None,
        unfill: Callable[[], None] | None = None,
        create_id: str | None = None,
    ) -> Any:
        """Create the companion table at ``location``, which it then owns (``create_id``: the
        create's own mark on its entry, made here when not given). The location is claimed
        before the entry is made (a conditional create of the marker: a refused claim creates
        nothing, and of several at once exactly one wins), and the claim stamped with the entry's
        UUID after, on the tag the create returned (a claim taken meanwhile is lost: the entry is
        dropped again). An object store that refuses the bridge's credentials where the bridge has
        none of its own (the catalog vends them for the new table) is claimed right after the
        entry instead, and a refused claim drops the entry again. ``fill`` runs between the claim
        and the entry (an import copies the files then: the table is published only once it is
        whole); on a failure, ``unfill`` takes back what it wrote, only while the claim still
        stands. ``taking_over``: the location is owned by the entry this one replaces, and passes
        to it at once. Returns pyiceberg's ``Table``."""
        create_id = create_id or uuid.uuid4().hex
        top = self.locations.base_of(location) or location
        claimed = None
        if not taking_over:
            owner = ownership.Owner(create_id, None, catalog_name(table))
            try:
                claimed = ownership.claim(location, top, owner, self._options.for_bridge())
            except StoreRefused:
                if self._options.has_secrets():  # refused what it was given: nothing to wait for
                    raise
                with contextlib.suppress(OSError):  # look before the catalog writes its metadata there
                    ownership.check_free(location, top, self._options.for_bridge())
        try:
            if fill is not None:
                if claimed is None:
                    raise PermissionDeniedError(f"The location {location!r} cannot be written before it is registered")
                fill()
            created = self._companions.create(table, location, properties, create_id)
        except BaseException as exc:
            if claimed is not None:
                if unfill is not None and ownership.still_claimed(claimed):
                    unfill()
                if isinstance(exc, iceberg.NoSuchNamespaceError):  # the catalog's files are all there is
                    claimed.undo_create()
                else:
                    claimed.undo()
            raise
        owner = ownership.Owner(create_id, str(created.metadata.table_uuid), catalog_name(table))
        options = self._options.for_bridge(lance_storage_options(dict(created.io.properties)))
        try:
            if claimed is not None or taking_over:
                if not ownership.stamp(location, owner, options, claimed):
                    raise PermissionDeniedError(f"The location {location!r} was taken by another table meanwhile")
            else:
                ownership.claim(location, top, owner, options)
        except BaseException:
            self._companions.drop(table.warehouse, table.iceberg_identifier)
            self._companions.forget(table)
            raise
        return created

    def claim_assigned(
        self, table: TableId, properties: dict[str, str], check: Check | None = None, create_id: str | None = None
    ) -> Any:
        """Create the companion table where the catalog places it (``createTable`` with no
        location: ``location_mode=catalog``), then claim that location, which it then owns.

        The catalog decides the place, and a store that lets only the catalog's tables be written
        refuses a marker anywhere else (S3 Tables and SeaweedFS's table buckets: "table location
        must be within bucket"), so the claim comes right after the entry is made: with the
        credentials the catalog vended for the new table, if any, a conditional create of the
        marker (``ownership.claim``: refused where another table owns the place, or a place above
        or below it), after which the place must hold nothing but the catalog's ``metadata/``.
        The place must also lie under the root or an allowed location, when either is set, and
        pass ``check``. Otherwise the claim is taken back, the entry dropped and the metadata file
        its create wrote deleted, and PermissionDeniedError says why (or ``check`` raises): no
        entry, marker or file is left. Returns pyiceberg's ``Table``."""
        create_id = create_id or uuid.uuid4().hex
        created = self._companions.create(table, None, properties, create_id)
        if created.metadata.properties.get(CREATE_ID) != create_id:  # a catalog that answers a create
            raise TableAlreadyExistsError(f"Table {table} already exists")  # of a taken name with its table
        options = self._options.for_bridge(lance_storage_options(dict(created.io.properties)))
        location: str | None = None
        try:
            location = self._assigned(table, created.metadata.location)
            if check is not None:
                check(location)
            owner = ownership.Owner(create_id, str(created.metadata.table_uuid), catalog_name(table))
            claimed = self._claim_assigned(table, location, owner, options)
            written = _metadata_written(location, created.metadata_location)
            if written is not None and written not in _metadata_files(location, options):
                claimed.undo()  # a purge of the place's earlier table deleted it before the claim held
                raise ConcurrentModificationError(
                    f"Table {table}: its place was being emptied as it was created; nothing was created, retry"
                )
        except BaseException:
            self._unmake(table, created, create_id, location, options)
            raise
        return created

    def _assigned(self, table: TableId, raw: str) -> str:
        """The location the catalog placed ``table`` at, confined (PermissionDeniedError)."""
        try:
            return self.locations.confine(raw)
        except PermissionDeniedError as exc:
            raise PermissionDeniedError(
                f"The catalog placed table {table} at {raw!r}: {exc}; nothing was created"
            ) from None

    def _claim_assigned(
        self, table: TableId, location: str, owner: ownership.Owner, options: dict[str, str]
    ) -> ownership.Claim:
        """Claim a location the catalog assigned; the place must then hold nothing but the
        catalog's metadata and the marker (a look made once the claim holds it)."""
        top = self.locations.base_of(location) or store_top(location)
        try:
            claimed = ownership.claim(location, top, owner, options)
        except PermissionDeniedError as exc:
            owned = ownership.read_owner(location, options) is not None
            why = "another table owns it (a soft-deleted table keeps its location until it is purged or restored)"
            raise PermissionDeniedError(
                f"The catalog placed table {table} at {location!r}: {why if owned else exc}; nothing was created"
            ) from None
        ours = {*ownership.MARKER_ENTRIES, files.ICEBERG_METADATA_DIRECTORY}
        held = (files.entries_at(location, options) or set()) - ours
        if held:
            claimed.undo()
            dataset = files.VERSIONS_DIRECTORY in held
            raise PermissionDeniedError(
                f"The catalog placed table {table} at {location!r}, which already holds "
                + ("a Lance dataset (register it with register_table)" if dataset else "files")
                + ": nothing was created"
            )
        return claimed

    def _unmake(
        self, table: TableId, created: Any, create_id: str, location: str | None, options: dict[str, str]
    ) -> None:
        """Take back a companion made where the catalog placed it: the entry, while the name still
        holds this very create's (``create_id``), then the metadata file its create wrote at a
        location the bridge may reach (and, on a local disk, the directories left empty). A claim
        made was taken back before (``ownership.claim`` takes back what it refuses itself)."""
        current = self._companions.find(table)  # None too for an entry whose metadata file is gone
        self._companions.forget(table)
        if current is not None and current.properties.get(CREATE_ID) != create_id:
            return  # the name holds another table now: nothing of this create's to take back
        with contextlib.suppress(iceberg.NoSuchTableError):
            self._companions.drop(table.warehouse, table.iceberg_identifier)
        written = _metadata_written(location, created.metadata_location) if location else None
        if location is None or written is None:
            return
        metadata = f"{location}/{files.ICEBERG_METADATA_DIRECTORY}"
        try:
            files.delete_file(metadata, written, options)
            if is_local(location):
                files.remove_empty_entries(location, [files.ICEBERG_METADATA_DIRECTORY])
                files.remove_empty_directories(location, location)
        except OSError as exc:  # the entry is gone; a file the catalog wrote is all that is left
            logger.warning("The metadata file %s/%s was left: %s", metadata, written, exc)

    def replace(self, table: TableId, replaced: TableSummary, location: str, properties: dict[str, str]) -> Any:
        """Register ``location`` under a name that ``replaced`` holds: the old entry steps aside
        while the new one is made, comes back if that fails, and is deregistered once it worked.
        The same location passes from the old entry to the new one, which must then own it."""
        same_place = normalize_location(replaced.location) == location
        if same_place:
            self.prove(replaced)
        aside = self._companions.set_aside(table, replaced, why="replaced")
        try:
            created = self.claim(table, location, properties, taking_over=same_place)
        except BaseException:
            self._companions.put_back(table, aside)
            raise
        self._companions.drop(table.warehouse, aside)
        if not same_place:
            self.release(replaced)
        return created

    def prove(self, entry: TableSummary) -> str:
        """The entry's location, once shown to be its own: confined, and named by its marker.
        Raises PermissionDeniedError, saying why, otherwise."""
        location = self.locations.confine(entry.location)
        self.prove_place(location, owner_entry(entry), self.entry_options(entry))
        return location

    def owns(self, entry: TableSummary) -> bool:
        """Whether ``prove`` shows the place to be the entry's: only then may a commit to it write there."""
        try:
            self.prove(entry)
        except (PermissionDeniedError, TableNotFoundError, OSError):
            return False
        return True

    def prove_handed_out(self, entry: TableSummary) -> None:
        """``prove``, before a location is handed to a client that then reads and writes by it
        (pylance, after ``describe_table``); a place with nothing at it has nothing to protect."""
        try:
            self.prove(entry)
        except PermissionDeniedError:
            if not files.is_empty_directory(self.locations.confine(entry.location), self.entry_options(entry)):
                raise

    def still_proves(self, table: TableId, kept: Any) -> dict[str, str] | None:
        """What reaches a table's files, when a state kept of it (``prove_state``) still shows its
        location is the entry's; None once the table was dropped, purged or replaced elsewhere."""
        try:
            return self.prove_state(table, kept)
        except (PermissionDeniedError, TableNotFoundError):
            return None

    def prove_state(self, table: TableId, loaded: Any) -> dict[str, str]:
        """``prove`` for a table's state as pyiceberg loaded or committed it (a managed table's);
        what the bridge reaches its files with. A catalog copy of the entry, or a state kept from
        before the table was dropped or replaced elsewhere, shows nothing (PermissionDeniedError,
        TableNotFoundError)."""
        options = self._options.for_bridge(lance_storage_options(dict(loaded.io.properties)))
        entry = ownership.Entry(catalog_name(table), str(loaded.metadata.table_uuid), loaded.properties.get(CREATE_ID))
        self.prove_place(self.locations.confine(loaded.metadata.location), entry, options)
        return options

    def prove_place(self, location: str, entry: ownership.Entry, options: dict[str, str]) -> None:
        """``prove`` for a place the data half opens, and for ``prove``. Raises
        PermissionDeniedError unless the marker names the entry; TableNotFoundError when the entry
        was renamed or dropped since it was loaded.

        A marker left behind by a rename outside the bridge (or written before markers named
        entries) names the table under a name that no longer holds it. Only then is the whole
        catalog asked, and the marker follows the entry if it is the only one of its table at the
        location; a catalog copy beside it makes both wait for a person (no entry is trusted)."""
        try:
            ownership.prove(location, entry, options)
        except PermissionDeniedError:
            held = ownership.read_owner(location, options)
            if held is None or not held.same_table(entry):
                raise
            if self._through_another_name(held, entry):
                raise self._companions.second_name(entry.name[0], held.entry[0]) from None
            if not self._still_holds(entry):
                raise TableNotFoundError(f"Table {'.'.join(entry.name)} was renamed or dropped meanwhile") from None
            named = ownership.Entry(held.entry, held.table_uuid, held.claim)
            if held.entry and self._still_holds(named):
                raise  # a copy of the table that the marker's own entry still holds
            if self._holders(entry.name[0], held, location) != [entry.name]:
                raise
            ownership.rewrite(location, held, replace(held, entry=entry.name), options)

    def refuse_another_name(self, entry: TableSummary) -> None:
        """InvalidInputError when the entry's marker names this very table through another name of
        its catalog without warehouse prefixes (a deregister, which needs no proof, included)."""
        try:
            location = self.locations.confine(entry.location)
            held = ownership.read_owner(location, self.entry_options(entry))
        except (PermissionDeniedError, OSError):
            return
        if held is not None and self._through_another_name(held, owner_entry(entry)):
            raise self._companions.second_name(owner_entry(entry).name[0], held.entry[0])

    def _through_another_name(self, held: ownership.Owner, entry: ownership.Entry) -> bool:
        """Whether the marker names this very table through another name of its catalog without
        warehouse prefixes (every warehouse name reaches the same one there)."""
        return (
            len(held.entry) > 1
            and held.entry[1:] == entry.name[1:]
            and self._companions.one_catalog(entry.name[0], held.entry[0])
        )

    def renamed(self, entry: TableSummary, to: ownership.EntryName) -> None:
        """After the catalog renamed ``entry`` to ``to``: the marker names the new name. A marker
        already behind (another rename raced this one) follows only when the whole catalog shows
        ``to`` to be the only entry of the table at the location. A failure here leaves the marker
        behind, and the table refused until it is registered again: the rename itself stands."""
        try:
            location = self.locations.confine(entry.location)
            options = self.entry_options(entry)
            held = ownership.read_owner(location, options)
            if held is None or not held.same_table(owner_entry(entry)):
                return  # not its own: nothing to carry
            if held.names(owner_entry(entry)) or self._holders(to[0], held, location) == [to]:
                ownership.rewrite(location, held, replace(held, entry=to), options)
            else:
                logger.warning("The ownership marker at %s does not follow %s: it names another entry", location, to)
        except Exception as exc:  # the rename stands; only the marker is behind
            logger.warning("The ownership marker of %s was not brought up to date: %s", ".".join(to), exc)

    def adopt(self, location: str) -> None:
        """Before a register: let go of the marker at ``location`` when no entry of the catalog
        holds its table there any more (dropped outside the bridge), so that the register can
        claim the data. Otherwise (an entry renamed by an Iceberg engine still holds it, or a
        catalog copy does) the marker stays and the claim refuses."""
        options = self._options.for_bridge()
        held = ownership.read_owner(location, options)
        if held is None or not held.entry or self._holders(held.entry[0], held, location):
            return
        if held.in_flight and not self._left_behind(location, options):
            doing = "deleted" if held.releasing else "made"
            raise PermissionDeniedError(f"A table at {location!r} is being {doing}: nothing was registered")
        ownership.rewrite(location, held, None, options)

    def _left_behind(self, location: str, options: dict[str, str]) -> bool:
        """Whether a marker of a claim in flight (an entry being made, files being deleted) was last
        written long enough ago that its writer must have stopped (``IN_FLIGHT_SECONDS``)."""
        found = next(filter(None, files.stat_files(location, list(ownership.marker_names(location)), options)), None)
        return found is not None and time.time() - found.modified > IN_FLIGHT_SECONDS

    def unregistered_locations(self, warehouse: str) -> list[Unregistered]:
        """Locations under the root and the allowed locations whose marker names a table of
        ``warehouse`` that no entry of the catalog holds there any more: data an Iceberg engine's
        DROP TABLE left behind. Registering one adopts it."""
        entries = self._catalog_entries(warehouse)
        found = []
        for top in self.locations.bases:
            for location, held in ownership.markers_under(top, self._options.for_bridge()):
                if held.entry[:1] == (warehouse,) and not _holding(entries, held, location):
                    found.append(Unregistered(location, ".".join(held.entry)))
        return sorted(found, key=lambda unregistered: unregistered.location)

    def _still_holds(self, entry: ownership.Entry) -> bool:
        """Whether the entry's name still holds its table (a rename or drop may have come since)."""
        try:
            self._companions.catalog(entry.name[0])
        except NamespaceNotFoundError:  # a warehouse this bridge does not reach: it cannot tell
            return True
        try:
            summary = self._companions.catalog(entry.name[0]).load_table_summary(entry.name[1:], refs_only=True)
        except (iceberg.NoSuchTableError, iceberg.NoSuchNamespaceError):
            return False
        return summary.table_uuid == entry.table_uuid

    def _holders(self, warehouse: str, held: ownership.Owner, location: str) -> list[ownership.EntryName]:
        """The names of every entry of ``warehouse`` (trash included) of the marker's table at
        ``location``: more than one means catalog copies."""
        return _holding(self._catalog_entries(warehouse), held, location)

    def _catalog_entries(self, warehouse: str) -> list[tuple[ownership.Entry, str]]:
        """Every Lance companion of the warehouse, the trash included, with its location: a full
        listing, made only where a marker's name alone cannot tell (register over a marker, the
        unregistered listing, a rename the marker fell behind, a marker of before names were kept)."""
        catalog = self._companions.catalog(warehouse)
        identifiers: list[tuple[str, ...]] = []
        for namespace, children in walk(catalog, NamespaceId(warehouse, ())):
            paths = [namespace.path]
            if not namespace.path and TRASH_NAMESPACE in children:  # the warehouse's trash, at its top
                paths.append(trash_path())
            if LEGACY_TRASH_NAMESPACE in children:  # the trash of earlier versions, below a namespace
                paths.append(legacy_trash_path(namespace.path))
            for path in paths:
                with contextlib.suppress(iceberg.NoSuchNamespaceError):  # a trash emptied and dropped meanwhile
                    identifiers += [tuple(ident) for ident in catalog.list_tables(path)] if path else []

        def load(identifier: tuple[str, ...]) -> TableSummary | None:
            with contextlib.suppress(iceberg.NoSuchTableError):
                return catalog.load_table_summary(identifier, refs_only=True)
            return None

        summaries = parallel_map(self._companions.lookups(), load, identifiers)
        return [
            (owner_entry(summary), normalize_location(summary.location))
            for summary in summaries
            if summary is not None and is_lance_table(summary.properties)
        ]

    def release(self, entry: TableSummary) -> None:
        """Give up the entry's claim on its location (its data then belongs to no entry)."""
        try:
            location = self.locations.confine(entry.location)
        except PermissionDeniedError:  # never ours to mark
            return
        ownership.release(location, owner_entry(entry), self.entry_options(entry))

    def delete_owned(self, entry: TableSummary, location: str) -> None:
        """Delete the dataset's own files at a location the entry was shown to own (``prove``),
        once the entry is gone from the catalog."""
        self._let_go(location)
        options = self.entry_options(entry)
        if not ownership.let_go(location, owner_entry(entry), options):
            if ownership.read_owner(location, options) is None:  # deleted with the entry (table buckets do)
                logger.debug("Nothing left to delete at %s: the catalog deleted it with the entry", location)
            else:
                logger.warning("The files at %s were left: another table claimed the location meanwhile", location)
            return
        files.delete_owned_files(location, options, *ownership.marker_names(location))

    def remove(self, table: TableId, loaded: TableSummary) -> None:
        """Once the entry has shown that it owns its location, remove it, then its own files."""
        location = self.prove(loaded)
        aside = self._companions.set_aside(table, loaded, why="dropped")
        self._companions.drop(table.warehouse, aside)
        self.delete_owned(loaded, location)


def _holding(
    entries: list[tuple[ownership.Entry, str]], held: ownership.Owner, location: str
) -> list[ownership.EntryName]:
    """The names of the entries of the marker's table at ``location``."""
    place = normalize_location(location)
    return [entry.name for entry, at in entries if at == place and held.same_table(entry)]


def _metadata_files(location: str, options: dict[str, str]) -> set[str]:
    return files.entries_at(f"{location}/{files.ICEBERG_METADATA_DIRECTORY}", options) or set()


def _metadata_written(location: str, metadata_location: str | None) -> str | None:
    """The name of the metadata file a create wrote in ``location``'s ``metadata/`` directory, if
    that is where it is (a catalog may keep its metadata elsewhere)."""
    directory, _, name = (metadata_location or "").rpartition("/")
    try:
        inside = normalize_location(directory) == f"{location}/{files.ICEBERG_METADATA_DIRECTORY}"
    except (InvalidInputError, PermissionDeniedError):
        return None
    return name if inside and name.endswith(".metadata.json") else None
