"""The table lifecycle: declare, describe, check, drop, deregister, register, rename and create.

Each operation parses its identifier, asks the catalog (``companions``), places or proves the data
(``placement``) and answers; a drop goes to the trash unless soft delete is off. ``resolve`` is
the seam to the data half: a table id as the live table the catalog names right now.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace

from lance_namespace import (
    CreateTableRequest,
    CreateTableResponse,
    DeclareTableRequest,
    DeclareTableResponse,
    DeregisterTableRequest,
    DeregisterTableResponse,
    DescribeTableRequest,
    DescribeTableResponse,
    DropTableRequest,
    DropTableResponse,
    RegisterTableRequest,
    RegisterTableResponse,
    RenameTableRequest,
    RenameTableResponse,
    TableExistsRequest,
)
from lance_namespace.errors import InvalidInputError, TableAlreadyExistsError, TableNotFoundError
from pyiceberg import exceptions as iceberg

from lance_iceberg_ns.cache import RecentlyUsed
from lance_iceberg_ns.catalog.client_properties import answered_io_properties
from lance_iceberg_ns.catalog.companions import (
    Companions,
    Protected,
    managed_entry,
    missing_protection,
    shown,
    stored_properties,
)
from lance_iceberg_ns.catalog.warehouses import TableSummary
from lance_iceberg_ns.config.settings import Settings
from lance_iceberg_ns.data import ResolvedTable, datasets, ipc, writes
from lance_iceberg_ns.data.opening import OpenDatasets
from lance_iceberg_ns.identifiers import TableId, parse_namespace_id, parse_table_id
from lance_iceberg_ns.request_rules import parse_mode, refuse_branch
from lance_iceberg_ns.storage.credentials import lance_storage_options, vended_storage_options
from lance_iceberg_ns.storage.locations import is_relative, table_uri
from lance_iceberg_ns.storage.options import StorageOptions
from lance_iceberg_ns.storage.ownership import Entry
from lance_iceberg_ns.tables.placement import Placement, catalog_name, owner_entry
from lance_iceberg_ns.tables.tombstones import TableStatus
from lance_iceberg_ns.tables.trash import Trash
from lance_iceberg_ns.versions import manifests, snapshots
from lance_iceberg_ns.versions.refusals import (
    is_written_by_location,
    latest_gone_error,
    refuse_unwritable_manifest_lists,
    revived_written_by_location_error,
)

CREATE_MODES = ("create", "existok", "overwrite")
RESOLVED_KEPT = 256  # tables whose last resolution for a read is kept

# Told of each table a create may declare, before anything is made (no place yet, and the mark its
# entry will bear), then of the table it declared (``None``) or brought back from the trash (the
# time, in seconds since the epoch, the create began), with its place, before the create writes: a
# data worker tells its server, which has the create undone (``remove_declared_table``,
# ``drop_restored_table``) should the worker end meanwhile, where the create's own undo never runs.
told_of_declared: ContextVar[
    Callable[[Sequence[str], tuple[str, Entry] | None, float | None, str | None], None] | None
] = ContextVar("told_of_declared", default=None)


@dataclass(frozen=True)
class Tables:
    """The table operations of one bridge, on the parts it is made of."""

    settings: Settings
    companions: Companions
    placement: Placement
    options: StorageOptions
    trash: Trash
    datasets: OpenDatasets
    # each table's last load and what it resolved to for a read: a catalog answer unchanged since
    # (a 304 hands back the very summary) resolves to the same, with nothing worked out again
    _read_as: RecentlyUsed[tuple[str, ...], tuple[TableSummary, ResolvedTable]] = field(
        default_factory=lambda: RecentlyUsed(RESOLVED_KEPT), repr=False, compare=False
    )

    # --- the seam to the data half --------------------------------------------------------------

    def resolve(self, table_id: Sequence[str], writing: bool = False) -> ResolvedTable:
        """A live Lance table through the catalog, for a data operation (see ``resolved``).
        Soft-deleted or missing is TableNotFoundError; a plain Iceberg table InvalidInputError."""
        table = parse_table_id(table_id)
        loaded = self.companions.load(table)
        if writing:
            return self.resolved(table, loaded, writing)
        kept = self._read_as.get(tuple(table.parts))
        if kept is not None and kept[0] is loaded:
            return kept[1]
        resolved = self.resolved(table, loaded)
        self._read_as.keep(tuple(table.parts), (loaded, resolved))
        return resolved

    def resolved(self, table: TableId, loaded: TableSummary, writing: bool = False) -> ResolvedTable:
        """A loaded entry as the data half sees it: its confined location, what the bridge reaches
        it with, and whether the catalog manages its versions. ``writing``: the location must also
        be shown to be the entry's own (PermissionDeniedError). Before any data operation, a read
        too, the entry gets back the engine protection an engine turned off (``Companions.protect``:
        read from the answer in hand, a commit only when some is missing), when it owns its
        location: a commit has the catalog write a metadata file there, and an entry planted at
        another table's location may write nothing into it."""
        location = self.placement.prove(loaded) if writing else self.placement.confine(loaded.location)
        if missing_protection(loaded.properties, loaded.answer) and (writing or self.placement.owns(loaded)):
            loaded = self.companions.protect(table, loaded)
        resolved = ResolvedTable(
            id=tuple(table.parts),
            location=location,
            storage_options=self.placement.entry_options(loaded),
            managed=managed_entry(loaded),
            entry=owner_entry(loaded),
            metadata_location=getattr(loaded.answer, "metadata_location", None),
        )
        if writing and resolved.managed:
            self._refuse_unwritable(table, loaded, resolved.storage_options)
        return resolved

    def _refuse_unwritable(self, table: TableId, loaded: TableSummary, storage_options: dict[str, str]) -> None:
        """A managed table whose main an Iceberg engine moved back, or whose dataset a writer by
        location moved ahead of the catalog, takes no new version: refused before pylance stages
        one (it would only learn that the commit's result is unknown)."""
        current = self.companions.table_from_summary(table, loaded)
        if snapshots.may_be_behind(current) or not snapshots.knows_latest(current):
            current = self.companions.load_table(table, history=True)
            snapshots.refuse_if_rolled_back(current)
        written = snapshots.written_by_path_after(current, storage_options)
        if written is not None:  # the catalog asked again: a writer through it finalizes only after its commit
            current = self.companions.load_table(table, history=True)
            if snapshots.latest_version(current) < written:
                raise snapshots.written_by_path(current, written)
        elif snapshots.latest_gone(current, storage_options):  # asked again: another writer may have moved on since
            current = self.companions.load_table(table, history=True)
            if snapshots.latest_gone(current, storage_options):
                raise latest_gone_error(".".join(current.name()), snapshots.latest_version(current))

    def resolve_table(self, table_id: Sequence[str], proved: bool = False) -> ResolvedTable:
        """``resolve`` for a tool beside the data half (Ray, a planned write): the live table and,
        with ``proved``, its location shown to be the entry's own (PermissionDeniedError), with
        nothing prepared for a write (``resolve(writing=True)`` does that)."""
        table = parse_table_id(table_id)
        loaded = self.companions.load(table)
        resolved = self.resolved(table, loaded)
        return replace(resolved, location=self.placement.prove(loaded)) if proved else resolved

    # --- operations -----------------------------------------------------------------------------

    def declare_table(self, request: DeclareTableRequest, create_id: str | None = None) -> DeclareTableResponse:
        """Declare the table (``create_id``: the create's own mark on its entry, made when not given)."""
        table = parse_table_id(request.id)
        properties = stored_properties(request.properties)
        if self.settings.table_version_management:
            properties.setdefault(snapshots.MANAGED_PROPERTY, "true")
        if snapshots.is_managed(properties):
            properties = {**snapshots.METADATA_RETENTION, **properties}
        managed = snapshots.is_managed(properties)
        if not request.location and self.settings.location_mode == "catalog":
            check = (lambda at: refuse_unwritable_manifest_lists(at, self.settings)) if managed else None
            created = self.placement.claim_assigned(table, properties, check, create_id)
        else:
            if request.location:
                location = self.placement.free_location(request.location)
            else:
                location = self.placement.new_location(table)
            if managed:
                refuse_unwritable_manifest_lists(location, self.settings)
            created = self.placement.claim(table, location, properties, create_id=create_id)
        self.datasets.forget_table(table.parts)  # the name's next read asks the catalog
        vended = None
        if request.vend_credentials or self.settings.vend_credentials:
            # pyiceberg has merged the answer's config and best-matching storage credential over
            # the catalog's own properties: only the answer's are the catalog's to hand on
            answered = answered_io_properties(created.io.properties, self.settings, table.warehouse)
            vended = lance_storage_options(answered)
        return DeclareTableResponse(
            location=created.metadata.location,
            properties=shown(created.metadata.properties),
            storage_options=self.options.for_caller(vended),
            managed_versioning=snapshots.is_managed(created.metadata.properties),
        )

    def describe_table(self, request: DescribeTableRequest) -> DescribeTableResponse:
        table = parse_table_id(request.id)
        refuse_branch(request.branch, "describe_table")
        if request.version is not None and request.tag:
            raise InvalidInputError("Give either a version or a tag, not both")
        vending = bool(request.vend_credentials or self.settings.vend_credentials)
        committed = None if vending else self.companions.managed.own_commit(table)
        if committed is not None and self.placement.still_proves(table, committed) is None:
            self.companions.managed.forget(table)  # dropped or replaced elsewhere since
            committed = None
        if committed is not None:  # this process committed the table's latest version a moment ago
            location, properties, vended = committed.metadata.location, committed.properties, None
            loaded = None
        else:
            loaded = self.companions.load(table)
            self.placement.prove_handed_out(loaded)  # a catalog copy of the entry is not handed its table's data
            loaded = self.companions.protect(table, loaded)  # the client reads the table next (pylance, lancedb)
            location, properties = loaded.location, loaded.properties
            vended = self._vended(table, loaded) if vending else None
            if managed_entry(loaded):  # pylance asks for the latest version next: answer from this
                self.companions.managed.loaded(table, self.companions.table_from_summary(table, loaded))
        response = DescribeTableResponse(
            location=location,
            properties=shown(properties),
            storage_options=self.options.for_caller(vended),
            managed_versioning=managed_entry(loaded) if loaded is not None else snapshots.is_managed(properties),
        )
        if request.with_table_uri:
            response.table_uri = table_uri(location)
        wanted_version = request.version if request.version is not None else request.tag
        if request.load_detailed_metadata or wanted_version is not None:
            resolved = self.resolved(table, loaded or self.companions.load(table))
            if vended:  # what the credentials endpoint vended reaches the files where the answer's may not
                resolved = replace(resolved, storage_options=self.options.for_bridge(vended))
            dataset = self.datasets.open(resolved, wanted_version, reading=True)
            response.version = dataset.version
            response.var_schema = datasets.arrow_schema_json(dataset)
            response.table = table.name
            response.namespace = table.namespace.parts
            response.is_only_declared = False
        elif request.check_declared:
            location = self.placement.confine(location)
            response.is_only_declared = not datasets.dataset_exists(location, self.options.for_bridge(vended))
        return response

    def _vended(self, table: TableId, loaded: TableSummary) -> dict[str, str]:
        """Lance storage options from the catalog's vended credentials for a table: through the
        credentials endpoint where the server advertises one, else from the loadTable answer."""
        catalog = self.companions.catalog(table.warehouse)
        if catalog.supports_credentials_endpoint():
            storage_credentials = catalog.load_table_credentials(table.iceberg_identifier)
        else:
            storage_credentials = loaded.storage_credentials
        return vended_storage_options(loaded.config, storage_credentials, loaded.location)

    def table_exists(self, request: TableExistsRequest) -> None:
        table = parse_table_id(request.id)
        loaded = self.companions.load(table)
        if request.version is not None:
            self.datasets.open(self.resolved(table, loaded), request.version, reading=True)

    def drop_table(self, request: DropTableRequest) -> DropTableResponse:
        table = parse_table_id(request.id)
        loaded = self.companions.load(table)
        if self.settings.soft_delete:
            self.trash.soft_delete(table, loaded)
        else:
            self.placement.remove(table, loaded)
        self.datasets.forget_table(table.parts)  # read at once as gone, whatever read_consistency_interval
        return DropTableResponse(id=table.parts, location=loaded.location, properties=shown(loaded.properties))

    def deregister_table(self, request: DeregisterTableRequest) -> DeregisterTableResponse:
        table = parse_table_id(request.id)
        loaded = self.companions.load(table)
        self.placement.refuse_another_name(loaded)  # one catalog reached by a second warehouse name
        aside = self.companions.set_aside(table, loaded, why="deregistered")
        self.companions.drop(table.warehouse, aside)
        self.placement.release(loaded)
        self.datasets.forget_table(table.parts)
        return DeregisterTableResponse(id=table.parts, location=loaded.location, properties=shown(loaded.properties))

    def register_table(self, request: RegisterTableRequest) -> RegisterTableResponse:
        table = parse_table_id(request.id)
        mode = parse_mode(request.mode, "create", ("create", "overwrite"), "register_table")
        if not request.location:
            raise InvalidInputError("register_table needs the location of an existing Lance dataset")
        properties = stored_properties(request.properties)
        if snapshots.is_managed(properties):
            raise InvalidInputError(
                f"{snapshots.MANAGED_PROPERTY} is set when a table is declared; "
                "a registered dataset keeps Lance's own versions"
            )
        location = self.placement.dataset_location(request.location, table)
        replaced = self.companions.find(table)
        if replaced is not None and mode != "overwrite":
            raise TableAlreadyExistsError(f"Table {table} already exists")
        self.placement.adopt(location)  # data whose entry an Iceberg engine dropped
        if replaced is None:
            created = self.placement.claim(table, location, properties)
        else:
            created = self.placement.replace(table, replaced, location, properties)
        self.datasets.forget_table(table.parts)  # whatever it named before (dropped elsewhere, say) is not read
        # a relative location is answered as it was asked, as Lance's directory namespace does
        answered = request.location if is_relative(request.location) else created.metadata.location
        return RegisterTableResponse(location=answered, properties=shown(created.metadata.properties))

    def rename_table(self, request: RenameTableRequest) -> RenameTableResponse:
        source = parse_table_id(request.id)
        if not request.new_table_name:
            raise InvalidInputError("rename_table needs new_table_name")
        target_namespace = (
            parse_namespace_id(request.new_namespace_id) if request.new_namespace_id else source.namespace
        )
        if target_namespace is None or not target_namespace.path:
            raise InvalidInputError("The new namespace must be [warehouse, namespace, ...]")
        if target_namespace.warehouse != source.warehouse:
            raise InvalidInputError("A table can only be renamed within its warehouse")
        target = parse_table_id([*target_namespace.parts, request.new_table_name])
        loaded = self.companions.load(source)
        self.companions.rename(source, target)
        self.placement.renamed(loaded, catalog_name(target))
        self.datasets.forget_table(source.parts)
        self.datasets.forget_table(target.parts)  # it may have named a table since dropped elsewhere
        return RenameTableResponse()

    def undrop_table(self, table_id: Sequence[str]) -> TableStatus:
        """The trash brings the table back (``Trash.undrop_table``); the name's next read asks the catalog."""
        status = self.trash.undrop_table(list(table_id))
        self.datasets.forget_table(parse_table_id(table_id).parts)
        return status

    def create_table(self, request: CreateTableRequest, request_data: bytes | None) -> CreateTableResponse:
        table = parse_table_id(request.id)
        mode = parse_mode(request.mode, "create", CREATE_MODES, "create_table")
        rows = ipc.read_arrow_stream(request_data, "create_table")
        live = self.companions.find(table)
        if live is not None and mode == "create":
            raise TableAlreadyExistsError(f"Table {table} already exists")
        if live is not None and mode == "existok":
            return CreateTableResponse(location=live.location, properties=shown(live.properties))
        began = time.time()  # a version written after it is not the table brought back from the trash
        create_id = uuid.uuid4().hex
        tell = told_of_declared.get() if live is None else None
        if tell is not None:  # before anything is made: a table it declares bears this mark
            tell(table.parts, None, None, create_id)
        try:
            declared = live is None and self._make_room(table, request, create_id)
        except (TableAlreadyExistsError, iceberg.TableAlreadyExistsError):  # another create declared it meanwhile
            if mode != "existok" or (live := self.companions.find(table)) is None:
                raise
            return CreateTableResponse(location=live.location, properties=shown(live.properties))
        self.datasets.forget_table(table.parts)  # a table brought back from the trash included
        try:
            resolved = self.resolve(table.parts, writing=True)
            if tell is not None:
                tell(table.parts, resolved.place, None if declared else began, None)
            dataset = writes.create(self.datasets, resolved, rows, declared)
        except BaseException as exc:
            if live is None:
                self._undo_create(table, declared)
            if live is None and not declared and is_written_by_location(exc):
                raise revived_written_by_location_error(str(table), str(exc)) from None
            raise
        entry = self.companions.load(table)
        return CreateTableResponse(location=entry.location, version=dataset.version, properties=shown(entry.properties))

    def _written_after(self, resolved: ResolvedTable, moment: float) -> bool:
        """Whether the table's latest version was written after ``moment`` (seconds since the epoch)."""
        try:
            dataset = self.datasets.open(resolved, reading=True)
        except TableNotFoundError:  # declared, never written
            return False
        return manifests.latest_written_at(dataset) > moment

    def _make_room(self, table: TableId, request: CreateTableRequest, create_id: str) -> bool:
        """Before a create writes: bring back the newest soft-deleted table of the name (its data
        is then overwritten as a new version, one lineage), else declare a new table at a new
        location of its own. True when a new table was declared."""
        if self.trash.restore_newest(table):
            return False
        self.declare_table(DeclareTableRequest(id=table.parts, properties=request.properties), create_id)
        return True

    def _undo_create(self, table: TableId, declared: bool) -> None:
        """A create whose write failed: a table it declared goes, unless another client wrote
        into it meanwhile (its rows were acknowledged); one it brought back is soft-deleted again."""
        loaded = self.companions.load(table)
        if declared:
            if datasets.dataset_exists(loaded.location, self.placement.entry_options(loaded)):
                return
            self.placement.remove(table, loaded)
        else:
            self.trash.soft_delete(table, loaded)

    # --- for tools beside the operations ----------------------------------------------------------

    def remove_declared_table(
        self, table_id: Sequence[str], place: tuple[str, Entry] | None, create_id: str | None = None
    ) -> bool:
        """Take back a table a tool declared for a write that failed: its entry, then its own files,
        only while the name still holds that very entry at ``place`` (``ResolvedTable.place``), or
        with no place, the entry its create marked ``create_id``, and no dataset was written there.
        False, with nothing changed, otherwise. Raises PermissionDeniedError (its location is not
        its own)."""
        table = parse_table_id(table_id)
        loaded = self.companions.find(table)
        if loaded is None:
            return False
        resolved = self.resolved(table, loaded)
        same = (
            resolved.place == tuple(place)
            if place is not None
            else bool(create_id) and resolved.entry.claim == create_id
        )
        if not same or datasets.dataset_exists(resolved.location, resolved.storage_options):
            return False
        self.placement.remove(table, loaded)
        return True

    def drop_restored_table(self, table_id: Sequence[str], place: tuple[str, Entry], restored_after: float) -> bool:
        """Soft-delete again a table a create brought back from the trash (after ``restored_after``,
        seconds since the epoch) for a write that was cut off, only while the name still holds that
        very entry at ``place`` and no version was written since: a table another client wrote to
        since is theirs. False, with nothing changed, otherwise."""
        table = parse_table_id(table_id)
        loaded = self.companions.find(table)
        if loaded is None:
            return False
        resolved = self.resolved(table, loaded)
        if resolved.place != tuple(place) or self._written_after(resolved, restored_after):
            return False
        self.trash.soft_delete(table, loaded)
        self.datasets.forget_table(table.parts)
        return True

    def protect_tables(self, namespace_id: Sequence[str], check: bool = False) -> Protected:
        """Set the engine protection on every Lance table of a warehouse or namespace and beneath
        it where it is missing, or with ``check`` only say which lack it (``Companions.protect_beneath``).
        The root is InvalidInputError."""
        top = parse_namespace_id(namespace_id)
        if top is None:
            raise InvalidInputError("Give the warehouse whose Lance tables to protect")
        return self.companions.protect_beneath(top, check)
