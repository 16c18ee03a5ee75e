"""``IcebergLanceNamespace``: the Lance Namespace operations on an Iceberg REST catalog.

Every Lance table is a companion Iceberg table with a one-column dummy schema, the property
``table_type=lance``, and the Lance dataset root as its location. Each operation parses its
identifier, makes its catalog call and builds the response; error translation, request coercion
(pylance calls back from Rust with plain dicts) and timing are applied by ``_operation``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

import lance
import requests
from lance_namespace import (
    AlterTableAddColumnsRequest,
    AlterTableAddColumnsResponse,
    AlterTableAlterColumnsRequest,
    AlterTableAlterColumnsResponse,
    AlterTableBackfillColumnsRequest,
    AlterTableDropColumnsRequest,
    AlterTableDropColumnsResponse,
    AnalyzeTableQueryPlanRequest,
    BatchCreateTableVersionsRequest,
    BatchCreateTableVersionsResponse,
    BatchDeleteTableVersionsRequest,
    BatchDeleteTableVersionsResponse,
    CountTableRowsRequest,
    CountTableRowsResponse,
    CreateNamespaceRequest,
    CreateNamespaceResponse,
    CreateTableBranchRequest,
    CreateTableBranchResponse,
    CreateTableIndexRequest,
    CreateTableIndexResponse,
    CreateTableRequest,
    CreateTableResponse,
    CreateTableScalarIndexResponse,
    CreateTableTagRequest,
    CreateTableTagResponse,
    CreateTableVersionRequest,
    CreateTableVersionResponse,
    DeclareTableRequest,
    DeclareTableResponse,
    DeleteFromTableRequest,
    DeleteFromTableResponse,
    DeleteTableBranchRequest,
    DeleteTableBranchResponse,
    DeleteTableTagRequest,
    DeleteTableTagResponse,
    DeregisterTableRequest,
    DeregisterTableResponse,
    DescribeNamespaceRequest,
    DescribeNamespaceResponse,
    DescribeTableIndexStatsRequest,
    DescribeTableIndexStatsResponse,
    DescribeTableRequest,
    DescribeTableResponse,
    DescribeTableVersionRequest,
    DescribeTableVersionResponse,
    DropNamespaceRequest,
    DropNamespaceResponse,
    DropTableIndexRequest,
    DropTableIndexResponse,
    DropTableRequest,
    DropTableResponse,
    ExplainTableQueryPlanRequest,
    GetTableStatsRequest,
    GetTableStatsResponse,
    GetTableTagVersionRequest,
    GetTableTagVersionResponse,
    InsertIntoTableRequest,
    InsertIntoTableResponse,
    LanceNamespace,
    ListNamespacesRequest,
    ListNamespacesResponse,
    ListTableBranchesRequest,
    ListTableBranchesResponse,
    ListTableIndicesRequest,
    ListTableIndicesResponse,
    ListTablesRequest,
    ListTablesResponse,
    ListTableTagsRequest,
    ListTableTagsResponse,
    ListTableVersionsRequest,
    ListTableVersionsResponse,
    MergeInsertIntoTableRequest,
    MergeInsertIntoTableResponse,
    NamespaceExistsRequest,
    QueryTableRequest,
    RegisterTableRequest,
    RegisterTableResponse,
    RenameTableRequest,
    RenameTableResponse,
    RestoreTableRequest,
    RestoreTableResponse,
    TableExistsRequest,
    UpdateFieldMetadataRequest,
    UpdateTableRequest,
    UpdateTableResponse,
    UpdateTableSchemaMetadataRequest,
    UpdateTableSchemaMetadataResponse,
    UpdateTableTagRequest,
    UpdateTableTagResponse,
)
from lance_namespace.errors import (
    ConcurrentModificationError,
    InvalidInputError,
    InvalidTableStateError,
    NamespaceNotEmptyError,
    NamespaceNotFoundError,
    PermissionDeniedError,
    TableAlreadyExistsError,
    TableNotFoundError,
    UnsupportedOperationError,
)
from pyiceberg import exceptions as iceberg
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField, StringType

from lance_iceberg_ns import datasets, managed, ownership, sources, versions
from lance_iceberg_ns.catalogs import (
    BridgeRestCatalog,
    TableSummary,
    acquire_warehouse_catalogs,
    release_warehouse_catalogs,
)
from lance_iceberg_ns.config import Settings, looks_secret
from lance_iceberg_ns.credentials import lance_storage_options, vended_storage_options
from lance_iceberg_ns.data import ResolvedTable, indices, ipc, reads, schema, tags, writes
from lance_iceberg_ns.data.ipc import QueryAnswer
from lance_iceberg_ns.data.opening import OpenDatasets
from lance_iceberg_ns.errors import translated_errors
from lance_iceberg_ns.identifiers import (
    NamespaceId,
    TableId,
    parse_namespace_id,
    parse_table_id,
)
from lance_iceberg_ns.lifecycle import (
    TRASH_NAMESPACE,
    PurgableTable,
    TableStatus,
    Tombstone,
    tombstones_of,
    trash_path,
)
from lance_iceberg_ns.limits import check_request_bounds
from lance_iceberg_ns.listing import (
    TABLE_TYPE_KEY,
    TABLE_TYPE_LANCE,
    is_lance_table,
    page_after,
    parallel_map,
    shared_table_types,
    take_page,
)
from lance_iceberg_ns.locations import LocationPolicy, check_requested_properties, is_local, normalize_location

logger = logging.getLogger(__name__)

Request = TypeVar("Request")
T = TypeVar("T")
ID_DELIMITER = "$"  # joins a full identifier in string form (the Lance REST spec's default)


BOOKKEEPING_PREFIX = "lance-iceberg-ns."
# The property that tells, after a lost answer, whether a create landed (see _create_companion);
# the location's ownership marker names it too, until the catalog's table UUID is known.
CREATE_ID = BOOKKEEPING_PREFIX + "create-id"
# Failures after which a create may or may not have landed.
LOST_ANSWER = (
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,
    iceberg.CommitStateUnknownException,
    iceberg.ServerError,
)
TRASH_COMMENT = "soft-deleted Lance tables (lance-iceberg-ns)"
RECENT_TABLE_SECONDS = 2.0  # how long a table loaded for the latest version serves the next commit
# How long a describe_table answer also answers the request for the latest version that pylance
# sends right after it (as fresh as if that request had been sent a moment earlier).
DESCRIBED_JUST_NOW_SECONDS = 0.5


@dataclass(frozen=True)
class _Remembered:
    """A managed table's state kept for pylance's next request (see ``_remember_current``)."""

    at: float  # time.monotonic()
    table: Any  # pyiceberg's Table
    committed_here: bool  # this process committed it (else it was loaded)


def _shown(properties: Mapping[str, str]) -> dict[str, str]:
    """A companion table's properties as answered: without the bridge's own bookkeeping."""
    return {key: value for key, value in properties.items() if key != CREATE_ID}


def companion_table_schema() -> Schema:
    """The schema of every companion table: one nullable string column ``dummy``."""
    return Schema(NestedField(field_id=1, name="dummy", field_type=StringType(), required=False))


def _coerce(request: Any, request_type: type[Request]) -> Request:
    """Accept the request model, a plain dict (pylance calls back from Rust with dicts), or None."""
    if isinstance(request, request_type):
        return request
    if request is None:
        request = {}
    if isinstance(request, Mapping):
        try:
            return request_type.from_dict(dict(request))  # type: ignore[attr-defined,no-any-return]
        except Exception as exc:  # pydantic's ValidationError, with the offending field
            raise InvalidInputError(f"Invalid {request_type.__name__}: {exc}") from None
    raise InvalidInputError(f"Expected a {request_type.__name__} or a dict, got {type(request).__name__}")


def _operation(request_type: type[Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Wrap a namespace operation: coerce its request and check its bounds (``limits``), translate
    its errors, time it. A data operation's request body (Arrow IPC bytes) is passed through."""

    def decorate(method: Callable[..., Any]) -> Callable[..., Any]:
        name = method.__name__

        @functools.wraps(method)
        def run(self: IcebergLanceNamespace, request: Any = None, *request_data: bytes) -> Any:
            request = _coerce(request, request_type)
            check_request_bounds(request)
            target = ".".join(getattr(request, "id", None) or []) or "<root>"
            started = time.perf_counter()
            with translated_errors(f"{name} {target}", self._settings.redact):
                response = method(self, request, *request_data)
            logger.debug("%s %s took %.1f ms", name, target, (time.perf_counter() - started) * 1000)
            return response

        return run

    return decorate


def _mode(raw: str | None, default: str) -> str:
    """Lance modes are case-insensitive, in PascalCase or snake_case."""
    return (raw or default).replace("_", "").lower()


class IcebergLanceNamespace(LanceNamespace):
    """A Lance namespace whose tables are registered in an Iceberg REST catalog.

    Identifiers start with the warehouse: namespaces are ``[warehouse, ns...]``, tables
    ``[warehouse, ns..., table]``. See ``lance_iceberg_ns.config`` for the properties.
    Raises ``InvalidInputError`` for invalid properties.
    """

    def __init__(self, **properties: str) -> None:
        self._properties = dict(properties)
        self._settings = Settings.from_properties(self._properties)
        self._catalogs = acquire_warehouse_catalogs(self._settings)
        self._locations = LocationPolicy.of(self._settings.root, self._settings.allowed_locations)
        self._closed = False
        self._table_types = shared_table_types(
            self._settings.endpoint, self._settings.principal(), self._settings.table_type_cache_seconds
        )
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()
        self._recent_tables: dict[tuple[str, ...], _Remembered] = {}
        self._datasets = OpenDatasets(self)

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

    # --- identity, pickling, lifetime ---------------------------------------------------------

    def namespace_id(self) -> str:
        """Differs between endpoints, principals and storage configurations; shows no secret."""
        settings = self._settings
        fingerprint = hashlib.sha256(
            json.dumps(
                [settings.storage_options, settings.catalog_properties, settings.secrets()], sort_keys=True
            ).encode()
        ).hexdigest()[:12]
        return (
            f"IcebergLanceNamespace {{ endpoint: '{settings.redact(settings.endpoint)}', "
            f"principal: '{settings.principal()}', "
            f"config: '{fingerprint}' }}"
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
        """Release the catalog connections (closed when no other namespace object of the process
        shares them) and stop the lookup threads. The object stays usable: it reconnects."""
        with self._executor_lock:
            if not self._closed:
                self._closed = True
                release_warehouse_catalogs(self._settings)
            if self._executor is not None:
                self._executor.shutdown(wait=False)
                self._executor = None

    def __enter__(self) -> IcebergLanceNamespace:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def allowing(self, *locations: str) -> IcebergLanceNamespace:
        """A namespace like this one that also allows tables at ``locations`` (an import's source,
        for that run); close it when done."""
        allowed = ",".join([*self._locations.allowed, *locations])
        return IcebergLanceNamespace(**{**self._properties, "allowed_locations": allowed})

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def properties(self) -> dict[str, str]:
        """The properties the namespace was built from (secrets included: do not show them)."""
        return dict(self._properties)

    # --- shared steps -------------------------------------------------------------------------

    def _catalog(self, warehouse: str) -> BridgeRestCatalog:
        if self._closed:  # used again after close(): take the shared connections back
            with self._executor_lock:
                if self._closed:
                    self._catalogs = acquire_warehouse_catalogs(self._settings)
                    self._closed = False
        return self._catalogs.get(warehouse)

    def _lookup_executor(self) -> ThreadPoolExecutor:
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self._settings.lookup_threads, thread_name_prefix="lance-iceberg-ns-lookup"
                )
            return self._executor

    def _load_lance_table(self, table: TableId) -> TableSummary:
        """Load a companion table; a plain Iceberg table under that name is ``InvalidInputError``."""
        loaded = self._catalog(table.warehouse).load_table_summary(table.iceberg_identifier, refs_only=True)
        is_lance = is_lance_table(loaded.properties)
        self._table_types.remember((table.warehouse, table.iceberg_identifier), is_lance)
        if not is_lance:
            raise InvalidInputError(f"Table {table} is an Iceberg table, not a Lance table (no table_type=lance)")
        return loaded

    def _create_companion(self, table: TableId, location: str, properties: dict[str, str], create_id: str) -> Any:
        """Create the companion table, safely retried when the answer is lost.

        A create is not idempotent: if its answer is lost (a reset, a timeout, a 5xx from a
        gateway) the table may exist or not, and a plain retry would report TableAlreadyExists for
        the table it made itself. Every create therefore carries a one-off ``CREATE_ID``; after a
        lost answer the table is looked up, and it is ours if it carries that id.
        """
        catalog = self._catalog(table.warehouse)
        properties = {**properties, CREATE_ID: create_id}
        answer_lost = False
        for attempt in range(self._settings.max_retries + 1):
            try:
                created = catalog.create_table(
                    table.iceberg_identifier, schema=companion_table_schema(), location=location, properties=properties
                )
                break
            except iceberg.TableAlreadyExistsError:
                if answer_lost and self._created_by(catalog, table, create_id):
                    created = catalog.load_table(table.iceberg_identifier)
                    break
                raise
            except LOST_ANSWER as exc:
                answer_lost = True
                logger.debug("create %s: answer lost (%s); checking whether it landed", table, type(exc).__name__)
                if self._created_by(catalog, table, create_id):
                    created = catalog.load_table(table.iceberg_identifier)
                    break
                if attempt == self._settings.max_retries:
                    raise
                time.sleep(0.1 * 2**attempt)
        self._table_types.remember((table.warehouse, table.iceberg_identifier), True)
        return created

    @staticmethod
    def _created_by(catalog: BridgeRestCatalog, table: TableId, create_id: str) -> bool:
        try:
            summary = catalog.load_table_summary(table.iceberg_identifier, refs_only=True)
        except iceberg.NoSuchTableError:
            return False
        return summary.properties.get(CREATE_ID) == create_id

    def _storage_options(self, vended: Mapping[str, str] | None = None) -> dict[str, str]:
        """Static ``storage.*`` options, with vended values winning: what the bridge itself uses."""
        return {**self._settings.storage_options, **(vended or {})}

    def _answered_storage_options(self, vended: Mapping[str, str] | None = None) -> dict[str, str]:
        """The storage options a caller is given: without the secret static ones unless
        ``share_static_credentials`` (a REST server's clients get vended credentials, or none)."""
        static = self._settings.storage_options
        if not self._settings.share_static_credentials:
            static = {key: value for key, value in static.items() if not looks_secret(key, value)}
        return {**static, **(vended or {})}

    def _vended_storage_options(self, table: TableId, loaded: TableSummary) -> dict[str, str]:
        """Lance storage options from the catalog's vended credentials for a table: through the
        credentials endpoint where the server advertises one, else from the loadTable answer."""
        catalog = self._catalog(table.warehouse)
        if catalog.supports_credentials_endpoint():
            storage_credentials = catalog.load_table_credentials(table.iceberg_identifier)
        else:
            storage_credentials = loaded.storage_credentials
        return vended_storage_options(loaded.config, storage_credentials, loaded.location)

    def _catalog_table_properties(self, requested: Mapping[str, str] | None) -> dict[str, str]:
        """Request properties as stored on the companion table: never a secret, always the type.
        Raises InvalidInputError for properties that would move the catalog's or the bridge's files."""
        check_requested_properties(dict(requested or {}), BOOKKEEPING_PREFIX)
        properties = {}
        for key, value in (requested or {}).items():
            if looks_secret(key, value):
                logger.warning("Not storing property %r in the catalog: it looks like a secret", key)
                continue
            properties[key] = value
        properties[TABLE_TYPE_KEY] = TABLE_TYPE_LANCE  # always wins over a requested value
        return properties

    def _require_namespace_level(self, raw_id: Any, action: str) -> NamespaceId:
        namespace = parse_namespace_id(raw_id)
        if namespace is None or not namespace.path:
            raise InvalidInputError(
                f"Cannot {action} {namespace or 'the root'}: give [warehouse, namespace, ...]; "
                "warehouses themselves are managed by the catalog server"
            )
        return namespace

    # --- locations and ownership (see lance_iceberg_ns.locations, lance_iceberg_ns.ownership) -------

    def _create_owned(
        self, table: TableId, location: str, properties: dict[str, str], taking_over: bool = False
    ) -> Any:
        """Create the companion table at ``location`` (normalized and confined), which it then
        owns. A local location is claimed before the entry is made (a refused claim creates
        nothing) and the claim stamped with the entry's UUID after; an object store, which the
        bridge may reach only with the credentials the catalog vends for the new table, is claimed
        right after, and a refused claim drops the entry again. ``taking_over``: the location is
        owned by the entry this one replaces, and passes to it at once."""
        create_id = uuid.uuid4().hex
        top = self._locations.base_of(location) or location
        claimed = None
        if is_local(location) and not taking_over:
            owner = ownership.Owner(create_id, None, str(table))
            claimed = ownership.claim(location, top, owner, self._storage_options())
        elif not taking_over:  # look before the catalog writes its metadata there, if the bridge can
            with contextlib.suppress(OSError):
                ownership.check_free(location, top, self._storage_options())
        try:
            created = self._create_companion(table, location, properties, create_id)
        except BaseException:
            if claimed is not None:
                claimed.undo()
            raise
        owner = ownership.Owner(create_id, str(created.metadata.table_uuid), str(table))
        options = self._storage_options(lance_storage_options(dict(created.io.properties)))
        try:
            if claimed is not None or taking_over:
                ownership.stamp(location, owner, options)
            else:
                ownership.claim(location, top, owner, options)
        except BaseException:
            self._catalog(table.warehouse).drop_table(table.iceberg_identifier, purge_requested=False)
            self._forget_table(table)
            raise
        return created

    def _replace_owned(self, table: TableId, replaced: TableSummary, location: str, properties: dict[str, str]) -> Any:
        """Register ``location`` under a name that ``replaced`` holds: the old entry steps aside
        while the new one is made, comes back if that fails, and is deregistered once it worked.
        The same location passes from the old entry to the new one, which must then own it."""
        catalog = self._catalog(table.warehouse)
        same_place = normalize_location(replaced.location) == location
        if same_place:
            self._owned_location(replaced)
        aside = self._set_aside(table, replaced, "replaced")
        try:
            created = self._create_owned(table, location, properties, taking_over=same_place)
        except BaseException:
            catalog.rename_table(aside, table.iceberg_identifier)
            raise
        catalog.drop_table(aside, purge_requested=False)
        if not same_place:
            self._release(replaced)
        return created

    def _set_aside(self, table: TableId, expected: TableSummary, why: str | Tombstone) -> tuple[str, ...]:
        """Rename the entry into the trash namespace (as a tombstone, or out of every listing while
        it is ``why``), out of every client's reach, and check that it is still the one loaded:
        between the load and now, a rename and a new table could have given the name to another
        entry. Raises ConcurrentModificationError (the entry back in place)."""
        catalog = self._catalog(table.warehouse)
        trash = trash_path(table.namespace.path)
        with contextlib.suppress(iceberg.NamespaceAlreadyExistsError):
            catalog.create_namespace(trash, {"comment": TRASH_COMMENT})
        name = why.name if isinstance(why, Tombstone) else f"{table.name}~{why}~{uuid.uuid4().hex[:12]}"
        aside = (*trash, name)
        catalog.rename_table(table.iceberg_identifier, aside)
        self._forget_table(table)
        if catalog.load_table_summary(aside, refs_only=True).table_uuid != expected.table_uuid:
            catalog.rename_table(aside, table.iceberg_identifier)
            raise ConcurrentModificationError(f"Table {table} was replaced meanwhile; nothing was changed")
        return aside

    def _entry_storage_options(self, entry: TableSummary) -> dict[str, str]:
        """What the bridge reaches an entry's files with: its static options, and the credentials
        the catalog vended in the entry's loadTable answer, if any (no extra request)."""
        return self._storage_options(vended_storage_options(entry.config, entry.storage_credentials, entry.location))

    def _owned_location(self, entry: TableSummary) -> str:
        """The entry's location, once shown to be its own: confined, and named by its marker.
        Raises PermissionDeniedError, saying why, otherwise."""
        location = self._locations.confine(entry.location)
        claim_id = entry.properties.get(CREATE_ID)
        ownership.prove(location, entry.table_uuid, claim_id, self._entry_storage_options(entry))
        return location

    def _release(self, entry: TableSummary) -> None:
        """Give up the entry's claim on its location (its data then belongs to no entry)."""
        try:
            location = self._locations.confine(entry.location)
        except PermissionDeniedError:  # never ours to mark
            return
        claim_id = entry.properties.get(CREATE_ID)
        ownership.release(location, entry.table_uuid, claim_id, self._entry_storage_options(entry))

    def _require_free_directory(self, location: str) -> None:
        """A declare makes a new table, in a place that holds nothing yet: over existing files it
        would later delete what it never wrote, and over a dataset nobody owns it would adopt data
        that ``register_table`` is for (an owned place is refused by the claim)."""
        options = self._storage_options()
        if ownership.read_owner(location, options) is not None:
            return  # the claim says whose it is
        if datasets.dataset_exists(location, options):
            raise InvalidInputError(f"A Lance dataset is already at {location}: register it with register_table")
        if not datasets.is_empty_directory(location, options):
            raise InvalidInputError(f"{location} already holds files: a table is declared in an empty place")

    def _drop_now(self, table: TableId, loaded: TableSummary) -> None:
        """Once the entry has shown that it owns its location, remove it, then its own files."""
        location = self._owned_location(loaded)
        aside = self._set_aside(table, loaded, "dropped")
        self._catalog(table.warehouse).drop_table(aside, purge_requested=False)
        self._datasets.forget(location)
        datasets.delete_owned_files(location, self._entry_storage_options(loaded), ownership.MARKER)

    def _existing_lance_table(self, table: TableId) -> TableSummary | None:
        try:
            return self._load_lance_table(table)
        except iceberg.NoSuchTableError:
            return None

    # --- namespaces ---------------------------------------------------------------------------

    @_operation(CreateNamespaceRequest)
    def create_namespace(self, request: CreateNamespaceRequest) -> CreateNamespaceResponse:
        """Create a namespace. Raises NamespaceAlreadyExistsError (mode Create),
        NamespaceNotFoundError (missing parent or warehouse)."""
        namespace = self._require_namespace_level(request.id, "create")
        if TRASH_NAMESPACE in namespace.path:
            raise InvalidInputError(f"{TRASH_NAMESPACE} is reserved for soft-deleted tables")
        mode = _mode(request.mode, "create")
        if mode not in ("create", "existok", "overwrite"):
            raise InvalidInputError(f"Unknown create_namespace mode {request.mode!r}")
        catalog = self._catalog(namespace.warehouse)
        if len(namespace.path) > 1 and not catalog.namespace_exists(namespace.path[:-1]):
            raise NamespaceNotFoundError(f"Parent namespace of {namespace} does not exist")
        try:
            catalog.create_namespace(namespace.path, request.properties or {})
        except iceberg.NamespaceAlreadyExistsError:
            if mode == "create":
                raise
            if mode == "overwrite":
                catalog.drop_namespace(namespace.path)  # NamespaceNotEmpty when it holds anything
                catalog.create_namespace(namespace.path, request.properties or {})
        return CreateNamespaceResponse(properties=catalog.load_namespace_properties(namespace.path))

    @_operation(ListNamespacesRequest)
    def list_namespaces(self, request: ListNamespacesRequest) -> ListNamespacesResponse:
        """List the child namespaces of ``[warehouse, ns...]`` by name, sorted and paginated; at the
        root, the configured ``warehouses`` (Iceberg REST has no call that lists them).
        Raises NamespaceNotFoundError."""
        namespace = parse_namespace_id(request.id)
        if namespace is None:
            children = list(self._settings.warehouses)
        else:
            children = [
                ident[-1]
                for ident in self._catalog(namespace.warehouse).list_namespaces(namespace.path)
                if ident[-1] != TRASH_NAMESPACE
            ]
        page, token = take_page(page_after(children, request.page_token), request.limit, lambda names: names, 1000)
        return ListNamespacesResponse(namespaces=page, page_token=token)

    @_operation(DescribeNamespaceRequest)
    def describe_namespace(self, request: DescribeNamespaceRequest) -> DescribeNamespaceResponse:
        """Properties of a namespace (a warehouse has none). Raises NamespaceNotFoundError."""
        namespace = parse_namespace_id(request.id)
        if namespace is None:
            return DescribeNamespaceResponse(properties={})
        catalog = self._catalog(namespace.warehouse)
        if not namespace.path:
            return DescribeNamespaceResponse(properties={})
        return DescribeNamespaceResponse(properties=catalog.load_namespace_properties(namespace.path))

    @_operation(DropNamespaceRequest)
    def drop_namespace(self, request: DropNamespaceRequest) -> DropNamespaceResponse:
        """Drop an empty namespace (RESTRICT). A missing namespace is success unless mode is Fail.
        Raises NamespaceNotEmptyError; CASCADE is InvalidInputError."""
        if _mode(request.behavior, "restrict") != "restrict":
            raise InvalidInputError("Only RESTRICT is supported for drop_namespace; drop the tables first")
        namespace = self._require_namespace_level(request.id, "drop")
        catalog = self._catalog(namespace.warehouse)
        try:
            properties = catalog.load_namespace_properties(namespace.path)
            children = [ident[-1] for ident in catalog.list_namespaces(namespace.path)]
            # Not every server refuses to drop a namespace that still has child namespaces.
            if any(child != TRASH_NAMESPACE for child in children):
                raise NamespaceNotEmptyError(f"Namespace {namespace} has child namespaces")
            if TRASH_NAMESPACE in children:
                self._drop_empty_trash(catalog, namespace)
            catalog.drop_namespace(namespace.path)
        except iceberg.NoSuchNamespaceError:
            if _mode(request.mode, "skip") == "fail":
                raise
            properties = {}
        return DropNamespaceResponse(properties=properties)

    @_operation(NamespaceExistsRequest)
    def namespace_exists(self, request: NamespaceExistsRequest) -> None:
        """Return when the namespace exists. Raises NamespaceNotFoundError."""
        namespace = parse_namespace_id(request.id)
        if namespace is None:
            return
        catalog = self._catalog(namespace.warehouse)  # an unknown warehouse is NamespaceNotFound
        if namespace.path and not catalog.namespace_exists(namespace.path):
            raise NamespaceNotFoundError(f"Namespace {namespace} does not exist")

    # --- tables -------------------------------------------------------------------------------

    @_operation(ListTablesRequest)
    def list_tables(self, request: ListTablesRequest) -> ListTablesResponse:
        """Names of the Lance tables in a namespace, sorted and paginated (see ``listing``); the
        root and a warehouse hold namespaces, never tables. Raises NamespaceNotFoundError."""
        namespace = parse_namespace_id(request.id)
        if namespace is None:  # the root holds warehouses, never tables
            return ListTablesResponse(tables=[], page_token=None)
        catalog = self._catalog(namespace.warehouse)  # an unknown warehouse is NamespaceNotFound
        if not namespace.path:
            return ListTablesResponse(tables=[], page_token=None)
        names = [ident[-1] for ident in catalog.list_tables(namespace.path)]
        include_declared = request.include_declared is not False

        def keep(batch: list[str]) -> list[str]:
            found = self._lance_tables_among(catalog, namespace, batch, with_data_only=not include_declared)
            return [name for name in batch if name in found]

        batch_size = max(32, self._settings.lookup_threads * 8)
        page, token = take_page(page_after(names, request.page_token), request.limit, keep, batch_size)
        return ListTablesResponse(tables=page, page_token=token)

    @_operation(ListTablesRequest)
    def list_all_tables(self, request: ListTablesRequest) -> ListTablesResponse:
        """Every Lance table beneath a warehouse or namespace (or beneath every configured
        warehouse), as full identifiers joined by ``$``, sorted and paginated; one listing per
        namespace, and tables classified as ``list_tables`` does. Raises NamespaceNotFoundError."""
        top = parse_namespace_id(request.id)
        tops = [top] if top is not None else [NamespaceId(warehouse, ()) for warehouse in self._settings.warehouses]
        if not tops:
            raise InvalidInputError("Give the warehouse to list, or configure the property 'warehouses'")
        with_data_only = request.include_declared is False
        found = []
        for start in tops:
            catalog = self._catalog(start.warehouse)
            for namespace, _children in self._walk(start):
                if namespace.path:
                    names = [ident[-1] for ident in catalog.list_tables(namespace.path)]
                    lance_names = self._lance_tables_among(catalog, namespace, names, with_data_only)
                    found += [ID_DELIMITER.join([*namespace.parts, name]) for name in lance_names]
        page, token = take_page(page_after(found, request.page_token), request.limit, lambda names: names, 1000)
        return ListTablesResponse(tables=page, page_token=token)

    def _walk(self, top: NamespaceId) -> Iterator[tuple[NamespaceId, list[str]]]:
        """``top`` and every namespace beneath it (never into a trash), each with its children's names."""
        catalog = self._catalog(top.warehouse)
        pending = [top.path]
        while pending:
            path = pending.pop()
            children = sorted(ident[-1] for ident in catalog.list_namespaces(path))
            yield NamespaceId(top.warehouse, path), children
            pending += [(*path, child) for child in reversed(children) if child != TRASH_NAMESPACE]

    def _lance_tables_among(
        self, catalog: BridgeRestCatalog, namespace: NamespaceId, names: list[str], with_data_only: bool
    ) -> set[str]:
        """Which of ``names`` are Lance tables: remembered types first, the rest loaded in parallel."""

        def key(name: str) -> tuple[str, tuple[str, ...]]:
            return (namespace.warehouse, (*namespace.path, name))

        def load(name: str) -> TableSummary | None:
            try:
                return catalog.load_table_summary((*namespace.path, name), refs_only=True)
            except iceberg.NoSuchTableError:  # dropped since the listing
                return None

        is_lance = {name: self._table_types.get(key(name)) for name in names}
        unknown = [name for name, kind in is_lance.items() if kind is None]
        loaded = dict(zip(unknown, parallel_map(self._lookup_executor(), load, unknown), strict=True))
        for name, table in loaded.items():
            is_lance[name] = table is not None and is_lance_table(table.properties)
            if table is not None:
                self._table_types.remember(key(name), bool(is_lance[name]))
        lance_names = sorted(name for name in names if is_lance[name])
        if not with_data_only:
            return set(lance_names)

        def has_data(name: str) -> bool:
            table = loaded.get(name) or catalog.load_table_summary((*namespace.path, name))
            return datasets.dataset_exists(table.location, self._storage_options())

        checks = parallel_map(self._lookup_executor(), has_data, lance_names)
        return {name for name, ok in zip(lance_names, checks, strict=True) if ok}

    @_operation(DeclareTableRequest)
    def declare_table(self, request: DeclareTableRequest) -> DeclareTableResponse:
        """Register a companion table for a Lance table that is about to be written, at a location
        of its own: a new one under the root (``LocationPolicy.default_location``), or the requested
        one, which must lie under the root or an allowed location and hold no dataset. A name whose
        table was renamed or soft-deleted makes a new, independent table. Raises
        TableAlreadyExistsError, NamespaceNotFoundError, PermissionDeniedError (a location outside,
        or overlapping another table's)."""
        table = parse_table_id(request.id)
        properties = self._catalog_table_properties(request.properties)
        if self._settings.table_version_management:
            properties.setdefault(managed.MANAGED_PROPERTY, "true")
        if managed.is_managed(properties):
            properties = {**managed.METADATA_RETENTION, **properties}
        if request.location:
            location = self._locations.confine_requested(request.location)
            self._require_free_directory(location)
        else:
            location = self._locations.default_location(table.parts)
        created = self._create_owned(table, location, properties)
        vended = None
        if request.vend_credentials or self._settings.vend_credentials:
            # pyiceberg has merged the answer's config and best-matching storage credential
            vended = lance_storage_options(dict(created.io.properties))
        return DeclareTableResponse(
            location=created.metadata.location,
            properties=_shown(created.metadata.properties),
            storage_options=self._answered_storage_options(vended),
            managed_versioning=managed.is_managed(created.metadata.properties),
        )

    @_operation(DescribeTableRequest)
    def describe_table(self, request: DescribeTableRequest) -> DescribeTableResponse:
        """Location, properties and storage options of a Lance table; with
        ``load_detailed_metadata`` (or a version or tag) also its version and schema. For a managed
        table this process committed to less than ``commit_cache_seconds`` ago, from that commit.
        Raises TableNotFoundError, TableVersionNotFoundError; a plain Iceberg table is InvalidInputError."""
        table = parse_table_id(request.id)
        if request.branch:
            raise UnsupportedOperationError("Branches are not supported by describe_table here")
        if request.version is not None and request.tag:
            raise InvalidInputError("Give either a version or a tag, not both")
        vending = bool(request.vend_credentials or self._settings.vend_credentials)
        committed = None if vending else self._recently_loaded(table, 0, committed_here_only=True)
        if committed is not None:  # this process committed the table's latest version a moment ago
            location, properties, vended = committed.metadata.location, committed.properties, None
        else:
            loaded = self._load_lance_table(table)
            location, properties = loaded.location, loaded.properties
            vended = self._vended_storage_options(table, loaded) if vending else None
            if managed.is_managed(properties):  # pylance asks for the latest version next: answer from this
                self._remember_current(
                    table, self._catalog(table.warehouse).table_from_summary(table.iceberg_identifier, loaded)
                )
        response = DescribeTableResponse(
            location=location,
            properties=_shown(properties),
            storage_options=self._answered_storage_options(vended),
            managed_versioning=managed.is_managed(properties),
        )
        if request.with_table_uri:
            response.table_uri = datasets.table_uri(location)
        wanted_version = request.version if request.version is not None else request.tag
        if request.load_detailed_metadata or wanted_version is not None:
            location = self._locations.confine(location)
            dataset = datasets.open_dataset(location, self._storage_options(vended), wanted_version)
            response.version = dataset.version
            response.var_schema = datasets.arrow_schema_json(dataset)
            response.table = table.name
            response.namespace = table.namespace.parts
            response.is_only_declared = False
        elif request.check_declared:
            location = self._locations.confine(location)
            response.is_only_declared = not datasets.dataset_exists(location, self._storage_options(vended))
        return response

    @_operation(TableExistsRequest)
    def table_exists(self, request: TableExistsRequest) -> None:
        """Return when the Lance table (and the requested version) exists.
        Raises TableNotFoundError, TableVersionNotFoundError; a plain Iceberg table is InvalidInputError."""
        table = parse_table_id(request.id)
        loaded = self._load_lance_table(table)
        if request.version is not None:
            datasets.open_dataset(self._locations.confine(loaded.location), self._storage_options(), request.version)

    @_operation(DropTableRequest)
    def drop_table(self, request: DropTableRequest) -> DropTableResponse:
        """Soft-delete the table (see ``lance_iceberg_ns.lifecycle``): it is no longer listed or
        found, its data stays until purged, ``undrop_table`` brings it back. With
        ``soft_delete=false``: once the entry has shown that it owns its location, remove the
        catalog entry, then the dataset's own files. Raises TableNotFoundError,
        PermissionDeniedError (ownership not shown: nothing changed); a plain Iceberg table is
        InvalidInputError."""
        table = parse_table_id(request.id)
        loaded = self._load_lance_table(table)
        if self._settings.soft_delete:
            self._set_aside(table, loaded, Tombstone.new(table.name))
        else:
            self._drop_now(table, loaded)
        return DropTableResponse(id=table.parts, location=loaded.location, properties=_shown(loaded.properties))

    @_operation(DeregisterTableRequest)
    def deregister_table(self, request: DeregisterTableRequest) -> DeregisterTableResponse:
        """Remove the catalog entry and keep the Lance data, which then belongs to no entry (and can
        be registered again). Raises TableNotFoundError; a plain Iceberg table is InvalidInputError."""
        table = parse_table_id(request.id)
        loaded = self._load_lance_table(table)
        aside = self._set_aside(table, loaded, "deregistered")
        self._catalog(table.warehouse).drop_table(aside, purge_requested=False)
        self._release(loaded)
        return DeregisterTableResponse(id=table.parts, location=loaded.location, properties=_shown(loaded.properties))

    @_operation(RegisterTableRequest)
    def register_table(self, request: RegisterTableRequest) -> RegisterTableResponse:
        """Register an existing Lance dataset, under the root or an allowed location and owned by no
        other entry, under a table id. A location without a dataset is InvalidInputError, one
        outside or owned is PermissionDeniedError; an existing table is TableAlreadyExistsError
        unless mode is Overwrite, which replaces the entry only once the new one is made."""
        table = parse_table_id(request.id)
        mode = _mode(request.mode, "create")
        if mode not in ("create", "overwrite"):
            raise InvalidInputError(f"Unknown register_table mode {request.mode!r}")
        if not request.location:
            raise InvalidInputError("register_table needs the location of an existing Lance dataset")
        properties = self._catalog_table_properties(request.properties)
        if managed.is_managed(properties):
            raise InvalidInputError(
                f"{managed.MANAGED_PROPERTY} is set when a table is declared; "
                "a registered dataset keeps Lance's own versions"
            )
        location = self._locations.confine_requested(request.location)
        if not datasets.dataset_exists(location, self._storage_options()):
            raise InvalidInputError(f"No Lance dataset at {location}")
        replaced = self._existing_lance_table(table)
        if replaced is not None and mode != "overwrite":
            raise TableAlreadyExistsError(f"Table {table} already exists")
        if replaced is None:
            created = self._create_owned(table, location, properties)
        else:
            created = self._replace_owned(table, replaced, location, properties)
        return RegisterTableResponse(location=created.metadata.location, properties=_shown(created.metadata.properties))

    @_operation(RenameTableRequest)
    def rename_table(self, request: RenameTableRequest) -> RenameTableResponse:
        """Rename a Lance table within its warehouse (its data stays where it is).
        Raises TableNotFoundError, TableAlreadyExistsError, NamespaceNotFoundError."""
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
        self._load_lance_table(source)
        self._catalog(source.warehouse).rename_table(source.iceberg_identifier, target.iceberg_identifier)
        self._forget_table(source)
        self._table_types.remember((target.warehouse, target.iceberg_identifier), True)
        return RenameTableResponse()

    # --- the data half (lance_iceberg_ns.data): resolved through the catalog, opened in one place ---

    def _resolve(self, table_id: Any, writing: bool = False) -> ResolvedTable:
        """A live Lance table through the catalog, for a data operation: its confined location,
        what the bridge reaches it with, and whether the catalog manages its versions.
        ``writing``: the location must also be shown to be the entry's own (PermissionDeniedError).
        Soft-deleted or missing is TableNotFoundError; a plain Iceberg table InvalidInputError."""
        table = parse_table_id(table_id)
        loaded = self._load_lance_table(table)
        if not writing and managed.is_managed(loaded.properties):
            # pylance opens it through describe_table next: from the catalog, not from a commit
            # this process made a moment ago (another process may have committed since)
            self._forget_current(table)
        return ResolvedTable(
            id=tuple(table.parts),
            location=self._owned_location(loaded) if writing else self._locations.confine(loaded.location),
            storage_options=self._entry_storage_options(loaded),
            managed=managed.is_managed(loaded.properties),
            uuid=loaded.table_uuid,
            claim_id=loaded.properties.get(CREATE_ID),
        )

    def _read(self, table_id: Any, read: Callable[[lance.LanceDataset], T], version: int | str | None = None) -> T:
        """``read`` on a live table's dataset (at ``version``), while the catalog confirms where
        the table is (``OpenDatasets.read``)."""
        table = parse_table_id(table_id)
        return self._datasets.read(
            tuple(table.parts), lambda: self._resolve(table.parts), read, version, self._lookup_executor()
        )

    def _writable(self, table_id: Any, branch: str | None = None) -> ResolvedTable:
        """A table for an operation that commits a version: resolved and shown to own its
        location. Writing to a branch other than main is UnsupportedOperationError."""
        if branch and branch != "main":
            raise UnsupportedOperationError("Writes go to the main branch here; writing to a branch is not supported")
        return self._resolve(table_id, writing=True)

    def _dataset_to_tag(self, table_id: Any, branch: str | None, operation: str) -> lance.LanceDataset:
        """The dataset whose tags an operation changes: resolved as for a write (tags live in the
        dataset's own files); a tag on a branch is refused on a managed table."""
        table = self._resolve(table_id, writing=True)
        if branch:
            self._versions_on_main(table, f"{operation} on a branch")
        return self._datasets.open(table)

    def _versions_on_main(self, table: ResolvedTable, what: str) -> None:
        """Branches are refused on a managed table: the catalog keeps one line of its versions."""
        if table.managed:
            raise UnsupportedOperationError(
                f"{what}: the catalog keeps one line of versions for a managed table; Lance branches would "
                "commit outside it"
            )

    def _make_room(self, table: TableId, request: CreateTableRequest) -> bool:
        """Before a create writes: bring back the newest soft-deleted table of the name (its data
        is then overwritten as a new version, one lineage), else declare a new table at a new
        location of its own. True when a new table was declared."""
        tombstones = self._tombstones(table)
        if tombstones:
            self._restore(table, tombstones[0])
            return False
        self.declare_table(DeclareTableRequest(id=table.parts, properties=request.properties))
        return True

    def _undo_create(self, table: TableId, declared: bool) -> None:
        """A create whose write failed: a table it declared goes; one it brought back is
        soft-deleted again."""
        loaded = self._load_lance_table(table)
        if declared:
            self._drop_now(table, loaded)
        else:
            self._set_aside(table, loaded, Tombstone.new(table.name))

    @_operation(CreateTableRequest)
    def create_table(self, request: CreateTableRequest, request_data: bytes | None = None) -> CreateTableResponse:
        """Create a table from an Arrow IPC stream: a new table is declared (a new location of its
        own) and written; over a soft-deleted one, the newest is brought back and overwritten.
        Modes (any case): Create (a live table is TableAlreadyExistsError, nothing changes),
        ExistOk (a live table is answered as it is), Overwrite (a live table gets the data as a
        new version). Raises InvalidInputError (a bad body or mode)."""
        table = parse_table_id(request.id)
        mode = _mode(request.mode, "create")
        if mode not in ("create", "existok", "overwrite"):
            raise InvalidInputError(
                f"Unsupported create_table mode {request.mode!r}. Supported modes are: 'Create', 'ExistOk', 'Overwrite'"
            )
        data = ipc.read_arrow_stream(request_data, "create_table")
        live = self._existing_lance_table(table)
        if live is not None and mode == "create":
            raise TableAlreadyExistsError(f"Table {table} already exists")
        if live is not None and mode == "existok":
            return CreateTableResponse(location=live.location, properties=_shown(live.properties))
        declared = live is None and self._make_room(table, request)
        resolved = self._resolve(table.parts, writing=True)
        try:
            dataset = writes.overwrite(self._datasets, resolved, data)
        except BaseException:
            if live is None:
                self._undo_create(table, declared)
            raise
        entry = self._load_lance_table(table)
        return CreateTableResponse(
            location=entry.location, version=dataset.version, properties=_shown(entry.properties)
        )

    @_operation(InsertIntoTableRequest)
    def insert_into_table(
        self, request: InsertIntoTableRequest, request_data: bytes | None = None
    ) -> InsertIntoTableResponse:
        """Append the rows of an Arrow IPC stream (mode ``append``) or replace the table's rows
        with them (``overwrite``), as a new version. Raises TableSchemaValidationError, InvalidInputError."""
        table = self._writable(request.id, request.branch)
        mode = writes.insert_mode(request.mode)
        data = ipc.read_arrow_stream(request_data, "insert_into_table")
        return writes.insert(self._datasets, table, data, mode)

    @_operation(MergeInsertIntoTableRequest)
    def merge_insert_into_table(
        self, request: MergeInsertIntoTableRequest, request_data: bytes | None = None
    ) -> MergeInsertIntoTableResponse:
        """Upsert the rows of an Arrow IPC stream on the ``on`` columns (see ``writes.merge_insert``)."""
        table = self._writable(request.id, request.branch)
        data = ipc.read_arrow_stream(request_data, "merge_insert_into_table")
        return writes.merge_insert_into(self._datasets, table, request, data)

    @_operation(UpdateTableRequest)
    def update_table(self, request: UpdateTableRequest) -> UpdateTableResponse:
        """Set columns to SQL expressions in the rows matching ``predicate``. Raises InvalidInputError."""
        table = self._writable(request.id, request.branch)
        return writes.update(self._datasets.open(table), request)

    @_operation(DeleteFromTableRequest)
    def delete_from_table(self, request: DeleteFromTableRequest) -> DeleteFromTableResponse:
        """Delete the rows matching ``predicate``. Raises InvalidInputError."""
        table = self._writable(request.id, request.branch)
        return writes.delete(self._datasets.open(table), request.predicate)

    # --- tags and branches (lance_iceberg_ns.data.tags) ----------------------------------------

    @_operation(ListTableTagsRequest)
    def list_table_tags(self, request: ListTableTagsRequest) -> ListTableTagsResponse:
        """A page of the table's tags, sorted by name."""
        return self._read(request.id, lambda dataset: tags.list_tags(dataset, request.page_token, request.limit))

    @_operation(GetTableTagVersionRequest)
    def get_table_tag_version(self, request: GetTableTagVersionRequest) -> GetTableTagVersionResponse:
        """The version a tag names. Raises TableTagNotFoundError."""
        return self._read(request.id, lambda dataset: tags.tag_version(dataset, request.tag))

    @_operation(CreateTableTagRequest)
    def create_table_tag(self, request: CreateTableTagRequest) -> CreateTableTagResponse:
        """Name a version. Raises TableTagAlreadyExistsError, TableVersionNotFoundError."""
        dataset = self._dataset_to_tag(request.id, request.branch, "create_table_tag")
        tags.create_tag(dataset, request.tag, request.version, request.branch)
        return CreateTableTagResponse()

    @_operation(UpdateTableTagRequest)
    def update_table_tag(self, request: UpdateTableTagRequest) -> UpdateTableTagResponse:
        """Move a tag to another version. Raises TableTagNotFoundError, TableVersionNotFoundError."""
        dataset = self._dataset_to_tag(request.id, request.branch, "update_table_tag")
        tags.update_tag(dataset, request.tag, request.version, request.branch)
        return UpdateTableTagResponse()

    @_operation(DeleteTableTagRequest)
    def delete_table_tag(self, request: DeleteTableTagRequest) -> DeleteTableTagResponse:
        """Remove a tag (its version stays). Raises TableTagNotFoundError."""
        tags.delete_tag(self._datasets.open(self._resolve(request.id, writing=True)), request.tag)
        return DeleteTableTagResponse()

    @_operation(ListTableBranchesRequest)
    def list_table_branches(self, request: ListTableBranchesRequest) -> ListTableBranchesResponse:
        """A page of the table's branches, sorted by name (a managed table has none)."""
        return self._read(request.id, lambda dataset: tags.list_branches(dataset, request.page_token, request.limit))

    @_operation(CreateTableBranchRequest)
    def create_table_branch(self, request: CreateTableBranchRequest) -> CreateTableBranchResponse:
        """Start a branch at a version. Raises TableBranchAlreadyExistsError,
        TableVersionNotFoundError; on a managed table UnsupportedOperationError."""
        table = self._resolve(request.id, writing=True)
        self._versions_on_main(table, "create_table_branch")
        tags.create_branch(self._datasets.open(table), request.name, request.from_branch, request.from_version)
        return CreateTableBranchResponse()

    @_operation(DeleteTableBranchRequest)
    def delete_table_branch(self, request: DeleteTableBranchRequest) -> DeleteTableBranchResponse:
        """Remove a branch. Raises TableBranchNotFoundError; on a managed table UnsupportedOperationError."""
        table = self._resolve(request.id, writing=True)
        self._versions_on_main(table, "delete_table_branch")
        tags.delete_branch(self._datasets.open(table), request.name)
        return DeleteTableBranchResponse()

    # --- schema (lance_iceberg_ns.data.schema) -------------------------------------------------

    @_operation(AlterTableAddColumnsRequest)
    def alter_table_add_columns(self, request: AlterTableAddColumnsRequest) -> AlterTableAddColumnsResponse:
        """Add columns computed by SQL expressions. Raises InvalidInputError."""
        table = self._writable(request.id, request.branch)
        return AlterTableAddColumnsResponse(version=schema.add_columns(self._datasets.open(table), request.new_columns))

    @_operation(AlterTableAlterColumnsRequest)
    def alter_table_alter_columns(self, request: AlterTableAlterColumnsRequest) -> AlterTableAlterColumnsResponse:
        """Rename, cast or change the nullability of columns. Raises InvalidInputError."""
        table = self._writable(request.id, request.branch)
        version = schema.alter_columns(self._datasets.open(table), request.alterations)
        return AlterTableAlterColumnsResponse(version=version)

    @_operation(AlterTableDropColumnsRequest)
    def alter_table_drop_columns(self, request: AlterTableDropColumnsRequest) -> AlterTableDropColumnsResponse:
        """Drop columns. Raises InvalidInputError."""
        table = self._writable(request.id, request.branch)
        return AlterTableDropColumnsResponse(version=schema.drop_columns(self._datasets.open(table), request.columns))

    @_operation(UpdateTableSchemaMetadataRequest)
    def update_table_schema_metadata(
        self, request: UpdateTableSchemaMetadataRequest
    ) -> UpdateTableSchemaMetadataResponse:
        """Merge keys into the schema's metadata; answers the metadata after."""
        table = self._writable(request.id, request.branch)
        metadata = schema.update_schema_metadata(self._datasets.open(table), request.metadata or {})
        return UpdateTableSchemaMetadataResponse(metadata=metadata)

    @_operation(AlterTableBackfillColumnsRequest)
    def alter_table_backfill_columns(self, request: AlterTableBackfillColumnsRequest) -> Any:
        """Unsupported: backfilling runs a column's UDF over the table (Geneva's job runner)."""
        raise UnsupportedOperationError(
            "alter_table_backfill_columns runs a virtual column's UDF, which needs a job runner this namespace "
            "does not have"
        )

    @_operation(UpdateFieldMetadataRequest)
    def update_field_metadata(self, request: UpdateFieldMetadataRequest) -> Any:
        """Unsupported, as in the reference: pylance has no per-field metadata update to commit."""
        raise UnsupportedOperationError("update_field_metadata is not supported (nor by the directory namespace)")

    @_operation(CountTableRowsRequest)
    def count_table_rows(self, request: CountTableRowsRequest) -> CountTableRowsResponse:
        """Rows of a table (at ``version``), those matching ``predicate`` if given.
        Raises TableNotFoundError, TableVersionNotFoundError, InvalidInputError (a bad predicate)."""
        count = self._read(request.id, lambda dataset: reads.count_rows(dataset, request.predicate), request.version)
        return CountTableRowsResponse(count=count)

    @_operation(QueryTableRequest)
    def query_table(self, request: QueryTableRequest) -> QueryAnswer:
        """The rows a query (scan, vector or full-text search) selects, as Arrow IPC file bytes
        (with the ``data`` of a QueryTableResponse).
        Raises TableNotFoundError, TableVersionNotFoundError, InvalidInputError."""
        return self._read(request.id, lambda dataset: reads.query(dataset, request), request.version)

    @_operation(ExplainTableQueryPlanRequest)
    def explain_table_query_plan(self, request: ExplainTableQueryPlanRequest) -> str:
        """The physical plan of a query, without running it."""
        query, verbose = request.query, bool(request.verbose)
        return self._read(request.id, lambda dataset: reads.explain(dataset, query, verbose), query.version)

    @_operation(AnalyzeTableQueryPlanRequest)
    def analyze_table_query_plan(self, request: AnalyzeTableQueryPlanRequest) -> str:
        """The plan of a query, run, with its metrics."""
        query = QueryTableRequest.model_validate(request.model_dump(exclude={"id"}))
        return self._read(request.id, lambda dataset: reads.analyze(dataset, query), request.version)

    @_operation(GetTableStatsRequest)
    def get_table_stats(self, request: GetTableStatsRequest) -> GetTableStatsResponse:
        """Bytes on disk, rows, indices and fragment sizes of a table."""
        return self._read(request.id, reads.table_stats)

    @_operation(CreateTableIndexRequest)
    def create_table_index(self, request: CreateTableIndexRequest) -> CreateTableIndexResponse:
        """Build and commit a vector, scalar or full-text index. Raises InvalidInputError,
        TableColumnNotFoundError, TableIndexAlreadyExistsError."""
        return indices.create(self._datasets.open(self._resolve(request.id, writing=True)), request)

    @_operation(CreateTableIndexRequest)
    def create_table_scalar_index(self, request: CreateTableIndexRequest) -> CreateTableScalarIndexResponse:
        """``create_table_index`` for scalar and full-text index types only."""
        created = indices.create(
            self._datasets.open(self._resolve(request.id, writing=True)), request, scalar_only=True
        )
        return CreateTableScalarIndexResponse(transaction_id=created.transaction_id)

    @_operation(ListTableIndicesRequest)
    def list_table_indices(self, request: ListTableIndicesRequest) -> ListTableIndicesResponse:
        """A table's indices (at ``version``) by name, a page at a time."""
        page_token, limit = request.page_token, request.limit
        return self._read(request.id, lambda dataset: indices.list_indices(dataset, page_token, limit), request.version)

    @_operation(DescribeTableIndexStatsRequest)
    def describe_table_index_stats(self, request: DescribeTableIndexStatsRequest) -> DescribeTableIndexStatsResponse:
        """An index's type and rows indexed. Raises TableIndexNotFoundError."""
        return self._read(request.id, lambda dataset: indices.stats(dataset, request.index_name), request.version)

    @_operation(DropTableIndexRequest)
    def drop_table_index(self, request: DropTableIndexRequest) -> DropTableIndexResponse:
        """Drop an index and commit. Raises TableIndexNotFoundError."""
        return indices.drop(self._datasets.open(self._resolve(request.id, writing=True)), request.index_name)

    # --- table versions: on the Lance dataset (lance_iceberg_ns.versions), or in the catalog for
    # tables whose versions it manages (lance_iceberg_ns.managed) ----------------------------------

    def _dataset_location(self, table: TableId, branch: str | None) -> tuple[TableSummary, dict[str, str]]:
        """A Lance table's summary and the storage options to read its files with."""
        if branch:
            raise UnsupportedOperationError("Branches are not supported here")
        loaded = self._load_lance_table(table)
        self._locations.confine(loaded.location)
        vended = self._vended_storage_options(table, loaded) if self._settings.vend_credentials else None
        return loaded, self._storage_options(vended)

    def _versioned_table(self, table: TableId, branch: str | None, history: bool) -> tuple[Any, dict[str, str]]:
        """The companion table as pyiceberg loads it (with every snapshot when ``history``, else
        only the current ones: one cheap request), and the storage options for its files."""
        if branch:
            raise UnsupportedOperationError("Branches are not supported here")
        catalog = self._catalog(table.warehouse)
        loaded = (
            catalog.load_table(table.iceberg_identifier)
            if history
            else catalog.load_table_refs(table.iceberg_identifier)
        )
        if not is_lance_table(loaded.properties):
            raise InvalidInputError(f"Table {table} is an Iceberg table, not a Lance table (no table_type=lance)")
        self._locations.confine(loaded.metadata.location)
        if self._settings.vend_credentials:
            return loaded, self._dataset_location(table, None)[1]
        return loaded, self._storage_options()

    def _managed_table(self, table: TableId, history: bool = False) -> Any:
        """The companion table of a table with managed versions (see ``_versioned_table``)."""
        loaded, _options = self._versioned_table(table, None, history)
        self._require_managed(table, loaded.properties)
        return loaded

    @staticmethod
    def _require_managed(table: TableId, properties: Mapping[str, str]) -> None:
        if not managed.is_managed(properties):
            raise UnsupportedOperationError(
                f"The versions of {table} are Lance's own; the catalog manages them only for tables declared "
                f"with {managed.MANAGED_PROPERTY}=true"
            )

    def _remember_current(self, table: TableId, loaded: Any, committed_here: bool = False) -> None:
        """Keep the table just loaded (or just committed by this process) for the commit pylance
        makes next; a stale copy only makes that commit's compare-and-swap fail, and pylance retry."""
        with self._executor_lock:
            self._recent_tables[(table.warehouse, *table.iceberg_identifier)] = _Remembered(
                time.monotonic(), loaded, committed_here
            )

    def _forget_current(self, table: TableId) -> None:
        with self._executor_lock:
            self._recent_tables.pop((table.warehouse, *table.iceberg_identifier), None)

    def _forget_table(self, table: TableId) -> None:
        """Forget what is remembered of a name whose table this process just dropped or moved."""
        self._table_types.forget((table.warehouse, table.iceberg_identifier))
        self._forget_current(table)

    def _recently_loaded(self, table: TableId, max_age: float, committed_here_only: bool = False) -> Any | None:
        """The remembered table if younger than ``max_age`` or, when this process committed it,
        than ``commit_cache_seconds``."""
        with self._executor_lock:
            remembered = self._recent_tables.get((table.warehouse, *table.iceberg_identifier))
        if remembered is None or (committed_here_only and not remembered.committed_here):
            return None
        if remembered.committed_here:
            max_age = max(max_age, self._settings.commit_cache_seconds)
        return remembered.table if time.monotonic() - remembered.at < max_age else None

    def _current_for_commit(self, table: TableId, version: int) -> Any:
        loaded = self._recently_loaded(table, RECENT_TABLE_SECONDS)
        if loaded is not None and managed.latest_version(loaded) == version - 1:
            return loaded
        return self._managed_table(table)

    @_operation(ListTableVersionsRequest)
    def list_table_versions(self, request: ListTableVersionsRequest) -> ListTableVersionsResponse:
        """A page of a Lance table's versions (oldest first, or newest with ``descending``).
        Raises TableNotFoundError; a table with no data yet is InvalidInputError."""
        table = parse_table_id(request.id)
        latest_only = bool(request.descending) and request.limit == 1 and not request.page_token
        just_described = self._recently_loaded(table, DESCRIBED_JUST_NOW_SECONDS) if latest_only else None
        if just_described is not None and not request.branch:
            loaded, options = just_described, self._storage_options()
        else:
            loaded, options = self._versioned_table(table, request.branch, history=not latest_only)
            if latest_only and managed.is_managed(loaded.properties):
                self._remember_current(table, loaded)
        if managed.is_managed(loaded.properties):
            found = managed.managed_versions(loaded, options)
        else:
            found = versions.table_versions(loaded.metadata.location, options)
        page, token = versions.page_of_versions(found, bool(request.descending), request.page_token, request.limit)
        return ListTableVersionsResponse(versions=page, page_token=token)

    @_operation(DescribeTableVersionRequest)
    def describe_table_version(self, request: DescribeTableVersionRequest) -> DescribeTableVersionResponse:
        """One version of a Lance table (the latest when none is given).
        Raises TableNotFoundError, TableVersionNotFoundError."""
        table = parse_table_id(request.id)
        loaded, options = self._versioned_table(table, request.branch, history=False)
        if managed.is_managed(loaded.properties):
            if request.version is not None and request.version != managed.latest_version(loaded):
                loaded, options = self._versioned_table(table, request.branch, history=True)
            version = managed.describe_managed_version(loaded, options, request.version)
        elif request.version is None:
            version = versions.table_versions(loaded.metadata.location, options)[-1]
        else:
            version = versions.describe_version(loaded.metadata.location, options, request.version)
        return DescribeTableVersionResponse(version=version)

    @_operation(RestoreTableRequest)
    def restore_table(self, request: RestoreTableRequest) -> RestoreTableResponse:
        """Make an older version the latest again, as a new version (later versions are kept);
        for a managed table the new version is committed through the catalog.
        Raises TableNotFoundError, TableVersionNotFoundError."""
        table = parse_table_id(request.id)
        loaded, options = self._dataset_location(table, request.branch)
        if request.version is None:
            raise InvalidInputError("restore_table needs the version to restore")
        self._owned_location(loaded)  # it writes a new version: only into data the entry owns
        if not datasets.dataset_exists(loaded.location, options):
            raise TableNotFoundError(f"Table {table} is declared but has no data yet")
        if managed.is_managed(loaded.properties):
            versions.restore_through_namespace(self, table.parts, request.version)
        else:
            versions.restore_version(loaded.location, options, request.version)
        return RestoreTableResponse()

    @_operation(CreateTableVersionRequest)
    def create_table_version(self, request: CreateTableVersionRequest) -> CreateTableVersionResponse:
        """Commit a Lance version of a managed table to the catalog, as a compare-and-swap on its
        latest version. Raises ConcurrentModificationError when that version exists (another
        writer won), UnsupportedOperationError for a table whose versions Lance manages itself."""
        table = parse_table_id(request.id)
        if request.branch:
            raise UnsupportedOperationError("Branches are not supported here")
        current = self._current_for_commit(table, request.version)
        commit = managed.plan_version(current, request)
        self._forget_current(table)  # whatever happens next, the remembered state is past
        try:
            self._catalog(table.warehouse).commit_changes([(commit.identifier, commit.requirements, commit.updates)])
        except BaseException:
            commit.discard()
            raise
        if self._settings.commit_cache_seconds:  # the next write's describe and latest version
            self._remember_current(table, managed.committed(current, commit), committed_here=True)
        return CreateTableVersionResponse(version=commit.version)

    @_operation(BatchCreateTableVersionsRequest)
    def batch_create_table_versions(self, request: BatchCreateTableVersionsRequest) -> BatchCreateTableVersionsResponse:
        """Commit Lance versions of several managed tables of one warehouse in one atomic catalog
        commit: all of them, or (ConcurrentModificationError) none."""
        entries = list(request.entries or [])
        if not entries:
            raise InvalidInputError("batch_create_table_versions needs at least one entry")
        tables = [parse_table_id(entry.id) for entry in entries]
        warehouses = {table.warehouse for table in tables}
        if len(warehouses) != 1:
            raise InvalidInputError("An atomic commit covers tables of one warehouse (one catalog)")
        if len({tuple(table.parts) for table in tables}) != len(tables):
            raise InvalidInputError("An atomic commit takes one version per table")
        commits: list[managed.VersionCommit] = []
        try:
            for table, entry in zip(tables, entries, strict=True):
                if entry.branch:
                    raise UnsupportedOperationError("Branches are not supported here")
                commits.append(managed.plan_version(self._managed_table(table), entry))
                self._forget_current(table)
            self._catalog(tables[0].warehouse).commit_changes(
                [(c.identifier, c.requirements, c.updates) for c in commits]
            )
        except BaseException:
            for commit in commits:
                commit.discard()
            raise
        return BatchCreateTableVersionsResponse(versions=[commit.version for commit in commits])

    @_operation(BatchDeleteTableVersionsRequest)
    def batch_delete_table_versions(self, request: BatchDeleteTableVersionsRequest) -> BatchDeleteTableVersionsResponse:
        """Forget versions of a managed table in the catalog (never the latest); Lance's cleanup
        deletes their files. Raises ConcurrentModificationError if a version landed meanwhile."""
        table = parse_table_id(request.id)
        if request.branch:
            raise UnsupportedOperationError("Branches are not supported here")
        loaded = self._managed_table(table, history=True)
        latest = managed.latest_version(loaded)
        wanted = sorted(  # ranges are [start, end); an end of -1 reaches the latest version
            {
                v
                for r in request.ranges or []
                for v in range(r.start_version, latest + 1 if r.end_version == -1 else r.end_version)
            }
        )
        requirements, updates, count = managed.plan_removal(loaded, wanted)
        if updates:
            self._catalog(table.warehouse).commit_changes([(tuple(loaded.name()), requirements, updates)])
        return BatchDeleteTableVersionsResponse(deleted_count=count)

    # --- soft delete: undrop, purge, status (see lance_iceberg_ns.lifecycle) -------------------

    def _tombstones(self, table: TableId) -> list[Tombstone]:
        """The table's tombstones, newest first: one listing of the trash namespace."""
        try:
            names = [
                ident[-1] for ident in self._catalog(table.warehouse).list_tables(trash_path(table.namespace.path))
            ]
        except iceberg.NoSuchNamespaceError:
            return []
        return tombstones_of(names, table.name)

    def _restore(self, table: TableId, tombstone: Tombstone) -> None:
        """Rename the tombstone back: the one catalog call an undrop and a purge contend on."""
        catalog = self._catalog(table.warehouse)
        try:
            catalog.rename_table((*trash_path(table.namespace.path), tombstone.name), table.iceberg_identifier)
        except iceberg.NoSuchTableError:
            raise TableNotFoundError(f"Table {table} was purged before it could be restored") from None
        self._table_types.remember((table.warehouse, table.iceberg_identifier), True)

    def _drop_empty_trash(self, catalog: BridgeRestCatalog, namespace: NamespaceId) -> None:
        held = catalog.list_tables(trash_path(namespace.path))
        if held:
            raise NamespaceNotEmptyError(
                f"Namespace {namespace} holds {len(held)} soft-deleted table(s); purge them first"
            )
        catalog.drop_namespace(trash_path(namespace.path))

    def undrop_table(self, table_id: list[str]) -> TableStatus:
        """Bring back the most recently soft-deleted table of this name, with its data and history.
        Raises TableNotFoundError (nothing to restore, or purged meanwhile) and
        TableAlreadyExistsError (a live table has the name)."""
        table = parse_table_id(table_id)
        with translated_errors(f"undrop_table {table}", self._settings.redact):
            tombstones = self._tombstones(table)
            if not tombstones:
                raise TableNotFoundError(f"Table {table} has no soft-deleted version to restore")
            self._restore(table, tombstones[0])
        return TableStatus("exists")

    def purge_table(self, table_id: list[str]) -> int:
        """Physically delete every soft-deleted version of a table: the catalog entry, then the
        Lance data. Returns how many were purged. A live table is never touched:
        InvalidTableStateError if the table is live and has nothing soft-deleted,
        TableNotFoundError if there is nothing at all."""
        table = parse_table_id(table_id)
        with translated_errors(f"purge_table {table}", self._settings.redact):
            tombstones = self._tombstones(table)
            if not tombstones:
                if self._catalog(table.warehouse).table_exists(table.iceberg_identifier):
                    raise InvalidTableStateError(f"Table {table} is live; only soft-deleted tables can be purged")
                raise TableNotFoundError(f"Table {table} has nothing soft-deleted to purge")
            return sum(self._purge_tombstone(table, tombstone) for tombstone in tombstones)

    def _purge_tombstone(self, table: TableId, tombstone: Tombstone) -> bool:
        """Once the tombstone has shown that it owns its location, drop it (the race's arbiter),
        then, only if that drop won, delete the dataset's own files. Raises PermissionDeniedError
        (nothing deleted) when ownership cannot be shown."""
        catalog = self._catalog(table.warehouse)
        identifier = (*trash_path(table.namespace.path), tombstone.name)
        try:
            tombstone_entry = catalog.load_table_summary(identifier)
            location = self._owned_location(tombstone_entry)
            catalog.drop_table(identifier, purge_requested=False)
        except iceberg.NoSuchTableError:
            return False  # restored or purged by someone else first
        datasets.delete_owned_files(location, self._entry_storage_options(tombstone_entry), ownership.MARKER)
        return True

    def list_purgable_tables(
        self, namespace_id: list[str], deleted_before: datetime | None = None
    ) -> list[PurgableTable]:
        """Soft-deleted tables of a namespace or a whole warehouse and every namespace beneath it
        (deleted before ``deleted_before``, if given), oldest first. Costs one listing per
        namespace, and one more per namespace holding soft-deleted tables; no per-table request."""
        namespace = parse_namespace_id(namespace_id)
        if namespace is None:
            raise InvalidInputError("Give the warehouse or namespace whose soft-deleted tables to list")
        cutoff_ms = None if deleted_before is None else int(deleted_before.timestamp() * 1000)
        found = []
        with translated_errors(f"list_purgable_tables {namespace}", self._settings.redact):
            for holder, names in self._trash_contents(namespace):
                found += [
                    PurgableTable(id=[*holder.parts, t.table_name], deleted_at=t.deleted_at, tombstone=t.name)
                    for t in tombstones_of(names)
                    if cutoff_ms is None or t.deleted_at_ms < cutoff_ms
                ]
        return sorted(found, key=lambda purgable: purgable.deleted_at)

    def _trash_contents(self, top: NamespaceId) -> Iterator[tuple[NamespaceId, list[str]]]:
        """(namespace, names in its trash) for ``top`` and every namespace beneath it."""
        catalog = self._catalog(top.warehouse)
        for namespace, children in self._walk(top):
            if TRASH_NAMESPACE in children:
                yield namespace, [ident[-1] for ident in catalog.list_tables(trash_path(namespace.path))]

    def purge_tables(
        self,
        ids: list[list[str]] | None = None,
        *,
        namespace_id: list[str] | None = None,
        deleted_before: datetime | None = None,
    ) -> list[list[str]]:
        """Purge the given tables, or (``ids=None``) every soft-deleted table of ``namespace_id``
        (a namespace or a whole warehouse, and everything beneath it) deleted before
        ``deleted_before`` (default: now minus ``soft_delete_ttl``). Returns the ids of what was
        purged; a tombstone that cannot show it owns its location is left whole, with a warning
        saying why."""
        if ids is not None:
            return [table_id for table_id in ids if self.purge_table(table_id)]
        if namespace_id is None:
            raise InvalidInputError("purge_tables needs ids, or the namespace whose expired tables to purge")
        if deleted_before is None:
            deleted_before = datetime.now(timezone.utc) - timedelta(seconds=self._settings.soft_delete_ttl_seconds)
        purged = []
        for purgable in self.list_purgable_tables(namespace_id, deleted_before):
            table = parse_table_id(purgable.id)
            tombstone = Tombstone.parse(purgable.tombstone)
            try:
                with translated_errors(f"purge_tables {table}", self._settings.redact):
                    if tombstone is not None and self._purge_tombstone(table, tombstone):
                        purged.append(purgable.id)
            except PermissionDeniedError as refused:
                logger.warning("Not purging %s (%s): %s", table, purgable.tombstone, refused)
        return purged

    def table_status(self, table_id: list[str]) -> TableStatus:
        """``exists``, ``soft_deleted`` (with ``deleted_at`` of the newest soft-deleted version) or
        ``not_found`` (never existed, or purged)."""
        table = parse_table_id(table_id)
        with translated_errors(f"table_status {table}", self._settings.redact):
            if self._catalog(table.warehouse).table_exists(table.iceberg_identifier):
                return TableStatus("exists")
            tombstones = self._tombstones(table)
        if tombstones:
            return TableStatus("soft_deleted", tombstones[0].deleted_at)
        return TableStatus("not_found")


def as_namespace(namespace: IcebergLanceNamespace | Mapping[str, str]) -> IcebergLanceNamespace:
    """The bridge itself, or one built from its properties (as executors and helpers receive it)."""
    if isinstance(namespace, IcebergLanceNamespace):
        return namespace
    return IcebergLanceNamespace(**dict(namespace))
