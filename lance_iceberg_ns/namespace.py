"""``IcebergLanceNamespace``: the Lance Namespace operations on an Iceberg REST catalog.

Every Lance table is a companion Iceberg table with a one-column dummy schema, the property
``table_type=lance``, and the Lance dataset root as its location. This class is the table of
contents: each operation hands off to the object that owns its concern, and ``operation`` applies
what every call shares (request coercion and bounds, error translation, timing) once.

* ``namespaces``: namespaces; ``listing``: which tables are Lance tables;
* ``tables``: the table lifecycle; ``trash``: soft delete, undrop, purge;
* ``versions``: versions, Lance-managed or catalog-managed;
* ``data.plane``: rows, schema, indices and tags;
* under them, ``companions`` (the catalog entries), ``placement`` (locations and ownership) and
  ``data.opening`` (datasets kept open, ownership proved; ``data.datasets`` alone opens them).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import lance
import lance_namespace as ln
from lance_namespace import LanceNamespace

from lance_iceberg_ns.catalog.companions import Companions, Protected, companion_table_schema
from lance_iceberg_ns.catalog.listing import ID_DELIMITER, TableListing
from lance_iceberg_ns.catalog.namespaces import Namespaces
from lance_iceberg_ns.catalog.warehouses import BridgeRestCatalog
from lance_iceberg_ns.config import sources
from lance_iceberg_ns.config.settings import Settings
from lance_iceberg_ns.data import ResolvedTable, datasets
from lance_iceberg_ns.data.ipc import QueryAnswer
from lance_iceberg_ns.data.opening import OpenDatasets
from lance_iceberg_ns.data.plane import DataPlane
from lance_iceberg_ns.operation import operation
from lance_iceberg_ns.storage.locations import LocationPolicy
from lance_iceberg_ns.storage.options import StorageOptions
from lance_iceberg_ns.storage.ownership import Entry
from lance_iceberg_ns.tables.lifecycle import Tables
from lance_iceberg_ns.tables.placement import Placement, Unregistered
from lance_iceberg_ns.tables.tombstones import PurgableTable, TableStatus
from lance_iceberg_ns.tables.trash import Trash
from lance_iceberg_ns.versions.operations import Versions

__all__ = ["ID_DELIMITER", "IcebergLanceNamespace", "as_namespace", "companion_table_schema"]


class IcebergLanceNamespace(LanceNamespace):
    """A Lance namespace whose tables are registered in an Iceberg REST catalog.

    Identifiers start with the warehouse: namespaces are ``[warehouse, ns...]``, tables
    ``[warehouse, ns..., table]``. See ``lance_iceberg_ns.config.settings`` for the properties.
    Raises ``InvalidInputError`` for invalid properties.
    """

    def __init__(self, **properties: str) -> None:
        self._properties = dict(properties)
        self._settings = settings = Settings.from_properties(self._properties)
        self._lock = threading.Lock()
        self._twins: dict[str, IcebergLanceNamespace] = {}  # by purpose: see ``_twin``
        options = StorageOptions(settings.storage_options, settings.share_static_credentials)
        self._companions = companions = Companions(settings)
        locations = LocationPolicy.of(settings.root, settings.allowed_locations)
        self._placement = placement = Placement(companions, locations, options, lambda at: self._datasets.forget(at))
        self._datasets = OpenDatasets(self._writes_through, self._reads_through, placement.prove_place, settings)
        self._trash = Trash(companions, placement, settings.soft_delete_ttl_seconds, settings.default_namespace)
        self._namespaces = Namespaces(companions, settings.warehouses, self._trash.move_legacy_trash)
        self._listing = TableListing(
            companions.catalog,
            companions.types,
            companions.lookups,
            lambda location: datasets.dataset_exists(location, options.for_bridge()),
            settings.lookup_threads,
            settings.warehouses,
        )
        self._tables = Tables(settings, companions, placement, options, self._trash, self._datasets)
        self._versions = Versions(self._tables)
        self._data = DataPlane(self._tables.resolve, self._datasets, companions.lookups)

    @classmethod
    def from_pyiceberg_catalog(cls, name: str, **properties: str) -> IcebergLanceNamespace:
        """The bridge for a catalog configured for pyiceberg (``~/.pyiceberg.yaml``,
        ``PYICEBERG_CATALOG__<NAME>__*``); ``properties`` (``root=...``) win over it."""
        return cls(**{**sources.pyiceberg_catalog_properties(name), **properties})

    @classmethod
    def from_environment(cls, **properties: str) -> IcebergLanceNamespace:
        """The bridge configured by ``LANCE_ICEBERG_*`` variables (over the pyiceberg catalog
        ``LANCE_ICEBERG_CATALOG`` names, if any); ``properties`` win over both."""
        return cls(**sources.resolve_properties(properties))

    # --- identity, pickling, lifetime, parts ----------------------------------------------------

    def namespace_id(self) -> str:
        """Differs between endpoints, principals and storage configurations; shows no secret."""
        settings = self._settings
        shaping = [settings.storage_options, settings.catalog_properties, settings.secrets()]
        fingerprint = hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:12]
        return (
            f"IcebergLanceNamespace {{ endpoint: '{settings.redact(settings.endpoint)}', "
            f"principal: '{settings.principal()}', config: '{fingerprint}' }}"
        )

    def __repr__(self) -> str:
        endpoint = self._settings.redact(self._settings.endpoint)
        return f"IcebergLanceNamespace(endpoint={endpoint!r}, root={self._settings.root!r})"

    def __getstate__(self) -> dict[str, Any]:
        # Connections and threads are not shipped; executors rebuild them on first use.
        return {"properties": self._properties}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state["properties"])  # type: ignore[misc]

    def close(self) -> None:
        """Release the catalog connections and lookup threads; the object stays usable (it reconnects)."""
        self._companions.close()
        with self._lock:
            twins = list(self._twins.values())  # kept: a read still running on one is closed by the next close()
        for twin in twins:
            twin.close()

    def __enter__(self) -> IcebergLanceNamespace:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def allowing(self, *locations: str) -> IcebergLanceNamespace:
        """This namespace, also allowing tables at ``locations`` (an import's source); close it when done."""
        allowed = ",".join([*self._placement.locations.allowed, *locations])
        return IcebergLanceNamespace(**{**self._properties, "allowed_locations": allowed})

    def _writes_through(self) -> IcebergLanceNamespace:
        """The namespace the data plane opens managed tables through to write them (pylance
        describes the table through it, and reaches the files with the options it answers): this
        one, or its twin in this process that answers every static option when this one keeps
        secrets from its callers (a server's)."""
        return self._twin(sharing=True, asking=False)

    def _reads_through(self) -> IcebergLanceNamespace:
        """The namespace the data plane opens managed tables through to read them: as
        ``_writes_through``, one that asks the catalog every time (``commit_cache_seconds`` 0),
        never this process's last commit."""
        return self._twin(sharing=True, asking=True)

    def _twin(self, sharing: bool, asking: bool) -> IcebergLanceNamespace:
        changed = {}
        if sharing and not self._settings.share_static_credentials:
            changed["share_static_credentials"] = "true"
        if asking and self._settings.commit_cache_seconds:
            changed["commit_cache_seconds"] = "0"
        if not changed:
            return self
        key = ",".join(sorted(changed))
        with self._lock:
            if key not in self._twins:
                self._twins[key] = IcebergLanceNamespace(**{**self._properties, **changed})
            return self._twins[key]

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def properties(self) -> dict[str, str]:
        """The properties the namespace was built from (secrets included: do not show them)."""
        return dict(self._properties)

    def catalog(self, warehouse: str) -> BridgeRestCatalog:
        """The warehouse's pyiceberg REST catalog. Raises NamespaceNotFoundError for an unknown warehouse."""
        return self._companions.catalog(warehouse)

    def prefix(self, warehouse: str) -> str:
        """The API prefix the warehouse's catalog uses ('' for unprefixed paths)."""
        return self._companions.warehouses().prefix(warehouse)

    @operation()
    def dataset(self, table_id: list[str], version: int | str | None = None) -> lance.LanceDataset:
        """The table's dataset (at ``version``) through the one opener: kept open, ownership proved."""
        return self._data.dataset(table_id, version)

    @property
    def companions(self) -> Companions:
        """The companion tables in the catalog (load, create, rename, set aside, drop), for the
        directory import, which places each table it copies itself; other tools use the
        operations and the seams below."""
        return self._companions

    @property
    def placement(self) -> Placement:
        """Table locations and the proof of their ownership (for the directory import, as ``companions``)."""
        return self._placement

    # --- seams for tools (Ray, planned writes, the command line) ---------------------------------

    @operation()
    def resolve_table(self, table_id: list[str], proved: bool = False) -> ResolvedTable:
        """The live table as the data half sees it: its location, what reaches its files (for this
        process only: credentials too), whether the catalog manages its versions, and the entry it
        is; with ``proved``, its location shown to be that entry's own. Raises TableNotFoundError,
        PermissionDeniedError; a plain Iceberg table is InvalidInputError."""
        return self._tables.resolve_table(table_id, proved)

    @operation()
    def remove_declared_table(
        self, table_id: list[str], place: tuple[str, Entry] | None, create_id: str | None = None
    ) -> bool:
        """Take back a table declared for a write that failed, entry and files, only while the name
        holds that very entry at ``place`` (``ResolvedTable.place``; with none, the entry its create
        marked ``create_id``) and nothing was written there;
        unlike ``drop_table``, never another client's table that took the name. False: nothing
        changed. Raises PermissionDeniedError (its location is not its own)."""
        return self._tables.remove_declared_table(table_id, place, create_id)

    @operation()
    def drop_restored_table(self, table_id: list[str], place: tuple[str, Entry], restored_after: float) -> bool:
        """Soft-delete again a table a create brought back from the trash (after ``restored_after``,
        seconds since the epoch) for a write that was cut off, only while the name holds that very
        entry at ``place`` and nothing was written since. False: nothing changed."""
        return self._tables.drop_restored_table(table_id, place, restored_after)

    @operation()
    def protect_tables(self, namespace_id: list[str], check: bool = False) -> Protected:
        """Keep Iceberg engines off the Lance tables of a warehouse or namespace and beneath it
        (for a warehouse, its trash too): the engine protection properties where missing; plain
        Iceberg tables are never touched. Which were protected now, which already were, and what
        each one protected lacked; with ``check``, nothing is changed and none is protected."""
        return self._tables.protect_tables(namespace_id, check)

    # --- namespaces (lance_iceberg_ns.catalog.namespaces, lance_iceberg_ns.catalog.listing) ---------------------

    @operation(ln.CreateNamespaceRequest)
    def create_namespace(self, request: ln.CreateNamespaceRequest) -> ln.CreateNamespaceResponse:
        """Create a namespace (modes Create, ExistOk, Overwrite). Raises NamespaceAlreadyExistsError."""
        return self._namespaces.create_namespace(request)

    @operation(ln.ListNamespacesRequest)
    def list_namespaces(self, request: ln.ListNamespacesRequest) -> ln.ListNamespacesResponse:
        """A page of the child namespaces, by name; at the root, the configured ``warehouses``."""
        return self._namespaces.list_namespaces(request)

    @operation(ln.DescribeNamespaceRequest)
    def describe_namespace(self, request: ln.DescribeNamespaceRequest) -> ln.DescribeNamespaceResponse:
        """Properties of a namespace (a warehouse has none). Raises NamespaceNotFoundError."""
        return self._namespaces.describe_namespace(request)

    @operation(ln.DropNamespaceRequest)
    def drop_namespace(self, request: ln.DropNamespaceRequest) -> ln.DropNamespaceResponse:
        """Drop an empty namespace (RESTRICT); a missing one unless mode is Fail. Raises NamespaceNotEmptyError."""
        return self._namespaces.drop_namespace(request)

    @operation(ln.NamespaceExistsRequest)
    def namespace_exists(self, request: ln.NamespaceExistsRequest) -> None:  # type: ignore[override]  # REST: 200, no body
        """Return when the namespace exists. Raises NamespaceNotFoundError."""
        return self._namespaces.namespace_exists(request)

    @operation(ln.ListTablesRequest)
    def list_tables(self, request: ln.ListTablesRequest) -> ln.ListTablesResponse:
        """A page of the Lance tables of a namespace, by name. Raises NamespaceNotFoundError."""
        return self._listing.list_tables(request)

    @operation(ln.ListTablesRequest)
    def list_all_tables(self, request: ln.ListTablesRequest) -> ln.ListTablesResponse:
        """A page of every Lance table beneath a warehouse or namespace, as ids joined by ``$``."""
        return self._listing.list_all_tables(request)

    # --- the table lifecycle (lance_iceberg_ns.tables.lifecycle) ------------------------------------------

    @operation(ln.DeclareTableRequest)
    def declare_table(self, request: ln.DeclareTableRequest) -> ln.DeclareTableResponse:
        """Register a table about to be written, at a new location of its own under the root, or
        at the requested one (under the root or an allowed location, empty). Raises
        TableAlreadyExistsError, NamespaceNotFoundError, PermissionDeniedError, InvalidInputError."""
        return self._tables.declare_table(request)

    @operation(ln.DescribeTableRequest)
    def describe_table(self, request: ln.DescribeTableRequest) -> ln.DescribeTableResponse:
        """Location, properties and storage options; with ``load_detailed_metadata`` (or a version
        or tag) also the version and schema. Raises TableNotFoundError, TableVersionNotFoundError;
        a plain Iceberg table is InvalidInputError."""
        return self._tables.describe_table(request)

    @operation(ln.TableExistsRequest)
    def table_exists(self, request: ln.TableExistsRequest) -> None:  # type: ignore[override]  # REST: 200, no body
        """Return when the table (and the requested version) exists. Raises TableNotFoundError,
        TableVersionNotFoundError; a plain Iceberg table is InvalidInputError."""
        return self._tables.table_exists(request)

    @operation(ln.DropTableRequest)
    def drop_table(self, request: ln.DropTableRequest) -> ln.DropTableResponse:
        """Soft-delete the table (``undrop_table`` brings it back); with ``soft_delete=false``,
        once the entry shows it owns its location, remove it and the dataset's own files.
        Raises TableNotFoundError, PermissionDeniedError (nothing changed)."""
        return self._tables.drop_table(request)

    @operation(ln.DeregisterTableRequest)
    def deregister_table(self, request: ln.DeregisterTableRequest) -> ln.DeregisterTableResponse:
        """Remove the entry, keep the data (then nobody's: it can be registered again). Raises TableNotFoundError."""
        return self._tables.deregister_table(request)

    @operation(ln.RegisterTableRequest)
    def register_table(self, request: ln.RegisterTableRequest) -> ln.RegisterTableResponse:
        """Register an existing dataset owned by no other entry, under the root or an allowed
        location; mode Overwrite replaces the entry once the new one is made. Raises
        TableAlreadyExistsError, PermissionDeniedError, InvalidInputError (no dataset there)."""
        return self._tables.register_table(request)

    @operation(ln.RenameTableRequest)
    def rename_table(self, request: ln.RenameTableRequest) -> ln.RenameTableResponse:
        """Rename within the warehouse (the data stays). Raises TableNotFoundError, TableAlreadyExistsError."""
        return self._tables.rename_table(request)

    @operation(ln.CreateTableRequest)
    def create_table(self, request: ln.CreateTableRequest, request_data: bytes | None = None) -> ln.CreateTableResponse:
        """Create a table from an Arrow IPC stream (modes Create, ExistOk, Overwrite); over a
        soft-deleted one, the newest is brought back and overwritten. Raises
        TableAlreadyExistsError, InvalidInputError."""
        return self._tables.create_table(request, request_data)

    # --- the trash (lance_iceberg_ns.tables.trash) -----------------------------------------------------

    @operation()
    def undrop_table(self, table_id: list[str]) -> TableStatus:
        """Bring back the most recently soft-deleted table of this name, with its data and history.
        Raises TableNotFoundError, TableAlreadyExistsError (a live table has the name)."""
        return self._tables.undrop_table(table_id)

    @operation()
    def purge_table(self, table_id: list[str]) -> int:
        """Delete every soft-deleted version of a table: the entry, then its own data; how many.
        Raises InvalidTableStateError (the table is live), TableNotFoundError, PermissionDeniedError."""
        return self._trash.purge_table(table_id)

    @operation()
    def purge_tables(
        self,
        ids: list[list[str]] | None = None,
        *,
        namespace_id: list[str] | None = None,
        deleted_before: datetime | None = None,
    ) -> list[list[str]]:
        """Purge the given tables, or every soft-deleted table of ``namespace_id`` (and beneath) deleted
        before ``deleted_before`` (default: now minus ``soft_delete_ttl``); the ids purged (see ``trash``)."""
        return self._trash.purge_tables(ids, namespace_id, deleted_before)

    @operation()
    def list_purgable_tables(
        self, namespace_id: list[str], deleted_before: datetime | None = None
    ) -> list[PurgableTable]:
        """Soft-deleted tables of a namespace and beneath it (deleted before ``deleted_before``), and foreign ones."""
        return self._trash.list_purgable_tables(namespace_id, deleted_before)

    @operation()
    def unregistered_locations(self, warehouse: str) -> list[Unregistered]:
        """Data whose entry an Iceberg engine dropped from ``warehouse``; ``register_table`` adopts it."""
        return self._placement.unregistered_locations(warehouse)

    @operation()
    def table_status(self, table_id: list[str]) -> TableStatus:
        """``exists``, ``soft_deleted`` (with ``deleted_at``) or ``not_found``."""
        return self._trash.table_status(table_id)

    # --- versions (lance_iceberg_ns.versions.operations) -------------------------------------------------

    @operation(ln.ListTableVersionsRequest)
    def list_table_versions(self, request: ln.ListTableVersionsRequest) -> ln.ListTableVersionsResponse:
        """A page of the table's versions, oldest (or with ``descending`` newest) first. Raises TableNotFoundError."""
        return self._versions.list_table_versions(request)

    @operation(ln.DescribeTableVersionRequest)
    def describe_table_version(self, request: ln.DescribeTableVersionRequest) -> ln.DescribeTableVersionResponse:
        """One version (the latest when none is given). Raises TableVersionNotFoundError."""
        return self._versions.describe_table_version(request)

    @operation(ln.RestoreTableRequest)
    def restore_table(self, request: ln.RestoreTableRequest) -> ln.RestoreTableResponse:
        """Make an older version the latest again, as a new version (later ones are kept).
        Raises TableNotFoundError, TableVersionNotFoundError, PermissionDeniedError."""
        return self._versions.restore_table(request)

    @operation(ln.CreateTableVersionRequest)
    def create_table_version(self, request: ln.CreateTableVersionRequest) -> ln.CreateTableVersionResponse:
        """Commit a version of a managed table, as a compare-and-swap on its latest version.
        Raises ConcurrentModificationError (another writer won), UnsupportedOperationError."""
        return self._versions.create_table_version(request)

    @operation(ln.BatchCreateTableVersionsRequest)
    def batch_create_table_versions(
        self, request: ln.BatchCreateTableVersionsRequest
    ) -> ln.BatchCreateTableVersionsResponse:
        """Commit versions of managed tables of one warehouse: all, or none (ConcurrentModificationError)."""
        return self._versions.batch_create_table_versions(request)

    @operation(ln.BatchDeleteTableVersionsRequest)
    def batch_delete_table_versions(
        self, request: ln.BatchDeleteTableVersionsRequest
    ) -> ln.BatchDeleteTableVersionsResponse:
        """Forget versions of a managed table (never the latest). Raises ConcurrentModificationError."""
        return self._versions.batch_delete_table_versions(request)

    # --- writes (lance_iceberg_ns.data.plane) ---------------------------------------------------

    @operation(ln.InsertIntoTableRequest)
    def insert_into_table(
        self, request: ln.InsertIntoTableRequest, request_data: bytes | None = None
    ) -> ln.InsertIntoTableResponse:
        """Append an Arrow IPC stream's rows (``append``) or replace the rows (``overwrite``).
        Raises TableSchemaValidationError, InvalidInputError."""
        return self._data.insert_into_table(request, request_data)

    @operation(ln.MergeInsertIntoTableRequest)
    def merge_insert_into_table(
        self, request: ln.MergeInsertIntoTableRequest, request_data: bytes | None = None
    ) -> ln.MergeInsertIntoTableResponse:
        """Upsert an Arrow IPC stream's rows on the ``on`` columns. Raises InvalidInputError."""
        return self._data.merge_insert_into_table(request, request_data)

    @operation(ln.UpdateTableRequest)
    def update_table(self, request: ln.UpdateTableRequest) -> ln.UpdateTableResponse:
        """Set columns to SQL expressions in the rows matching ``predicate``. Raises InvalidInputError."""
        return self._data.update_table(request)

    @operation(ln.DeleteFromTableRequest)
    def delete_from_table(self, request: ln.DeleteFromTableRequest) -> ln.DeleteFromTableResponse:
        """Delete the rows matching ``predicate``. Raises InvalidInputError."""
        return self._data.delete_from_table(request)

    # --- tags and branches ----------------------------------------------------------------------

    @operation(ln.ListTableTagsRequest)
    def list_table_tags(self, request: ln.ListTableTagsRequest) -> ln.ListTableTagsResponse:
        """A page of the table's tags, by name."""
        return self._data.list_table_tags(request)

    @operation(ln.GetTableTagVersionRequest)
    def get_table_tag_version(self, request: ln.GetTableTagVersionRequest) -> ln.GetTableTagVersionResponse:
        """The version a tag names. Raises TableTagNotFoundError."""
        return self._data.get_table_tag_version(request)

    @operation(ln.CreateTableTagRequest)
    def create_table_tag(self, request: ln.CreateTableTagRequest) -> ln.CreateTableTagResponse:
        """Name a version. Raises TableTagAlreadyExistsError, TableVersionNotFoundError."""
        return self._data.create_table_tag(request)

    @operation(ln.UpdateTableTagRequest)
    def update_table_tag(self, request: ln.UpdateTableTagRequest) -> ln.UpdateTableTagResponse:
        """Move a tag to another version. Raises TableTagNotFoundError, TableVersionNotFoundError."""
        return self._data.update_table_tag(request)

    @operation(ln.DeleteTableTagRequest)
    def delete_table_tag(self, request: ln.DeleteTableTagRequest) -> ln.DeleteTableTagResponse:
        """Remove a tag (its version stays). Raises TableTagNotFoundError."""
        return self._data.delete_table_tag(request)

    @operation(ln.ListTableBranchesRequest)
    def list_table_branches(self, request: ln.ListTableBranchesRequest) -> ln.ListTableBranchesResponse:
        """A page of the table's branches, by name (a managed table has none)."""
        return self._data.list_table_branches(request)

    @operation(ln.CreateTableBranchRequest)
    def create_table_branch(self, request: ln.CreateTableBranchRequest) -> ln.CreateTableBranchResponse:
        """Start a branch at a version. Raises TableBranchAlreadyExistsError; on a managed table
        UnsupportedOperationError."""
        return self._data.create_table_branch(request)

    @operation(ln.DeleteTableBranchRequest)
    def delete_table_branch(self, request: ln.DeleteTableBranchRequest) -> ln.DeleteTableBranchResponse:
        """Remove a branch. Raises TableBranchNotFoundError; on a managed table UnsupportedOperationError."""
        return self._data.delete_table_branch(request)

    # --- schema ---------------------------------------------------------------------------------

    @operation(ln.AlterTableAddColumnsRequest)
    def alter_table_add_columns(self, request: ln.AlterTableAddColumnsRequest) -> ln.AlterTableAddColumnsResponse:
        """Add columns computed by SQL expressions. Raises InvalidInputError."""
        return self._data.alter_table_add_columns(request)

    @operation(ln.AlterTableAlterColumnsRequest)
    def alter_table_alter_columns(self, request: ln.AlterTableAlterColumnsRequest) -> ln.AlterTableAlterColumnsResponse:
        """Rename, cast or change the nullability of columns. Raises InvalidInputError."""
        return self._data.alter_table_alter_columns(request)

    @operation(ln.AlterTableDropColumnsRequest)
    def alter_table_drop_columns(self, request: ln.AlterTableDropColumnsRequest) -> ln.AlterTableDropColumnsResponse:
        """Drop columns. Raises InvalidInputError."""
        return self._data.alter_table_drop_columns(request)

    @operation(ln.UpdateTableSchemaMetadataRequest)
    def update_table_schema_metadata(
        self, request: ln.UpdateTableSchemaMetadataRequest
    ) -> ln.UpdateTableSchemaMetadataResponse:
        """Merge keys into the schema's metadata; answers the metadata after."""
        return self._data.update_table_schema_metadata(request)

    # --- reads, search and indices --------------------------------------------------------------

    @operation(ln.CountTableRowsRequest)
    def count_table_rows(self, request: ln.CountTableRowsRequest) -> ln.CountTableRowsResponse:
        """Rows (at ``version``), those matching ``predicate`` if given. Raises TableVersionNotFoundError."""
        return self._data.count_table_rows(request)

    @operation(ln.QueryTableRequest)
    def query_table(self, request: ln.QueryTableRequest) -> QueryAnswer:  # type: ignore[override]  # the IPC bytes
        """The rows a scan, vector or full-text search selects, as Arrow IPC file bytes (with the
        ``data`` of a QueryTableResponse). Raises TableNotFoundError, InvalidInputError."""
        return self._data.query_table(request)

    @operation(ln.ExplainTableQueryPlanRequest)
    def explain_table_query_plan(self, request: ln.ExplainTableQueryPlanRequest) -> str:
        """The physical plan of a query, without running it."""
        return self._data.explain_table_query_plan(request)

    @operation(ln.AnalyzeTableQueryPlanRequest)
    def analyze_table_query_plan(self, request: ln.AnalyzeTableQueryPlanRequest) -> str:
        """The plan of a query, run, with its metrics."""
        return self._data.analyze_table_query_plan(request)

    @operation(ln.GetTableStatsRequest)
    def get_table_stats(self, request: ln.GetTableStatsRequest) -> ln.GetTableStatsResponse:
        """Bytes on disk, rows, indices and fragment sizes."""
        return self._data.get_table_stats(request)

    @operation(ln.CreateTableIndexRequest)
    def create_table_index(self, request: ln.CreateTableIndexRequest) -> ln.CreateTableIndexResponse:
        """Build and commit a vector, scalar or full-text index. Raises TableIndexAlreadyExistsError."""
        return self._data.create_table_index(request)

    @operation(ln.CreateTableIndexRequest)
    def create_table_scalar_index(self, request: ln.CreateTableIndexRequest) -> ln.CreateTableScalarIndexResponse:
        """``create_table_index`` for scalar and full-text index types only."""
        return self._data.create_table_scalar_index(request)

    @operation(ln.ListTableIndicesRequest)
    def list_table_indices(self, request: ln.ListTableIndicesRequest) -> ln.ListTableIndicesResponse:
        """A page of the table's indices (at ``version``), by name."""
        return self._data.list_table_indices(request)

    @operation(ln.DescribeTableIndexStatsRequest)
    def describe_table_index_stats(
        self, request: ln.DescribeTableIndexStatsRequest
    ) -> ln.DescribeTableIndexStatsResponse:
        """An index's type and rows indexed. Raises TableIndexNotFoundError."""
        return self._data.describe_table_index_stats(request)

    @operation(ln.DropTableIndexRequest)
    def drop_table_index(self, request: ln.DropTableIndexRequest) -> ln.DropTableIndexResponse:
        """Drop an index and commit. Raises TableIndexNotFoundError."""
        return self._data.drop_table_index(request)


def as_namespace(namespace: IcebergLanceNamespace | Mapping[str, str]) -> IcebergLanceNamespace:
    """The bridge itself, or one built from its properties (as executors and helpers receive it)."""
    if isinstance(namespace, IcebergLanceNamespace):
        return namespace
    return IcebergLanceNamespace(**dict(namespace))
