"""Namespaces: Iceberg namespaces under a warehouse, created, listed, described and dropped.

The root lists the configured warehouses (Iceberg REST has no call that lists them); a warehouse
itself is managed by the catalog server. The trash of soft-deleted tables (``tables.trash``) is a
namespace at the top of the warehouse, hidden from listings and no namespace's child, so a
namespace whose tables were all dropped is dropped like any empty one; the old trash that earlier
versions kept inside a namespace is emptied into it first. Answers leave out the properties that
say where the catalog keeps files (``answered``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping

from lance_namespace import (
    CreateNamespaceRequest,
    CreateNamespaceResponse,
    DescribeNamespaceRequest,
    DescribeNamespaceResponse,
    DropNamespaceRequest,
    DropNamespaceResponse,
    ListNamespacesRequest,
    ListNamespacesResponse,
    NamespaceExistsRequest,
)
from lance_namespace.errors import InvalidInputError, NamespaceNotEmptyError, NamespaceNotFoundError
from pyiceberg import exceptions as iceberg

from lance_iceberg_ns.catalog.companions import BOOKKEEPING_PREFIX, Companions
from lance_iceberg_ns.catalog.property_rules import (
    RESERVED_LOCATION_PROPERTIES,
    check_requested_properties,
    plain_property_key,
)
from lance_iceberg_ns.catalog.warehouses import BridgeRestCatalog
from lance_iceberg_ns.identifiers import (
    LEGACY_TRASH_NAMESPACE,
    TRASH_NAMESPACES,
    NamespaceId,
    legacy_trash_path,
    parse_namespace_id,
)
from lance_iceberg_ns.paging import page_after, take_page
from lance_iceberg_ns.request_rules import parse_mode


def namespace_below_warehouse(raw_id: list[str] | None, action: str) -> NamespaceId:
    """A namespace inside a warehouse (``[warehouse, namespace, ...]``); InvalidInputError else."""
    namespace = parse_namespace_id(raw_id)
    if namespace is None or not namespace.path:
        raise InvalidInputError(
            f"Cannot {action} {namespace or 'the root'}: give [warehouse, namespace, ...]; "
            "warehouses themselves are managed by the catalog server"
        )
    return namespace


def answered(properties: Mapping[str, str]) -> dict[str, str]:
    """A namespace's properties as a caller is answered: without those that say where files go,
    such as the ``location`` a catalog adds, which names its own directories; the rest stay."""
    where_files_go = RESERVED_LOCATION_PROPERTIES
    return {key: value for key, value in properties.items() if plain_property_key(key) not in where_files_go}


# Moves the tombstones of a namespace's old trash into the warehouse's trash; the names it left.
EmptyLegacyTrash = Callable[[NamespaceId], list[str]]


class Namespaces:
    """The namespace operations of one bridge. ``empty_legacy_trash`` (``Trash.move_legacy_trash``)
    empties the old trash of a namespace being dropped; without it, an old trash that holds
    anything keeps its namespace from being dropped."""

    def __init__(
        self, companions: Companions, warehouses: tuple[str, ...], empty_legacy_trash: EmptyLegacyTrash | None = None
    ) -> None:
        self._companions = companions
        self._warehouses = warehouses
        self._empty_legacy_trash = empty_legacy_trash

    def create_namespace(self, request: CreateNamespaceRequest) -> CreateNamespaceResponse:
        namespace = namespace_below_warehouse(request.id, "create")
        mode = parse_mode(request.mode, "create", ("create", "existok", "overwrite"), "create_namespace")
        check_requested_properties(dict(request.properties or {}), BOOKKEEPING_PREFIX)  # as a table's
        catalog = self._companions.catalog(namespace.warehouse)
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
        return CreateNamespaceResponse(properties=answered(catalog.load_namespace_properties(namespace.path)))

    def list_namespaces(self, request: ListNamespacesRequest) -> ListNamespacesResponse:
        namespace = parse_namespace_id(request.id)
        if namespace is None:
            children = list(self._warehouses)
        else:
            listed = self._companions.catalog(namespace.warehouse).list_namespaces(namespace.path)
            children = [ident[-1] for ident in listed if ident[-1] not in TRASH_NAMESPACES]
        page, token = take_page(page_after(children, request.page_token), request.limit, lambda names: names, 1000)
        return ListNamespacesResponse(namespaces=page, page_token=token)

    def describe_namespace(self, request: DescribeNamespaceRequest) -> DescribeNamespaceResponse:
        namespace = parse_namespace_id(request.id)
        if namespace is None:
            return DescribeNamespaceResponse(properties={})
        catalog = self._companions.catalog(namespace.warehouse)  # an unknown warehouse is NamespaceNotFound
        if not namespace.path:
            return DescribeNamespaceResponse(properties={})
        return DescribeNamespaceResponse(properties=answered(catalog.load_namespace_properties(namespace.path)))

    def drop_namespace(self, request: DropNamespaceRequest) -> DropNamespaceResponse:
        """Drop an empty namespace (``Restrict``, the only behaviour: drop its tables first). Its
        soft-deleted tables are in the warehouse's trash, so they never keep it; an old trash inside
        it is emptied into the warehouse's first."""
        parse_mode(request.behavior, "restrict", ("restrict",), "drop_namespace behavior (drop the tables first)")
        missing_ok = parse_mode(request.mode, "skip", ("skip", "fail"), "drop_namespace") == "skip"
        namespace = namespace_below_warehouse(request.id, "drop")
        catalog = self._companions.catalog(namespace.warehouse)
        try:
            properties = catalog.load_namespace_properties(namespace.path)
            children = [ident[-1] for ident in catalog.list_namespaces(namespace.path)]
            # Not every server refuses to drop a namespace that still has child namespaces.
            if any(child != LEGACY_TRASH_NAMESPACE for child in children):
                raise NamespaceNotEmptyError(f"Namespace {namespace} has child namespaces")
            if LEGACY_TRASH_NAMESPACE in children:
                self._drop_legacy_trash(catalog, namespace)
            catalog.drop_namespace(namespace.path)
        except iceberg.NoSuchNamespaceError:
            if not missing_ok:
                raise
            properties = {}
        return DropNamespaceResponse(properties=answered(properties))

    def _drop_legacy_trash(self, catalog: BridgeRestCatalog, namespace: NamespaceId) -> None:
        """Empty the namespace's old trash into the warehouse's and drop it; NamespaceNotEmptyError
        when entries stay in it (foreign ones, or all of them when nothing can move them)."""
        if self._empty_legacy_trash is not None:
            self._empty_legacy_trash(namespace)
        legacy = legacy_trash_path(namespace.path)
        try:
            held = catalog.list_tables(legacy)
        except iceberg.NoSuchNamespaceError:  # emptied and dropped
            return
        if held:
            raise NamespaceNotEmptyError(
                f"Namespace {namespace} holds {len(held)} entr(ies) in {LEGACY_TRASH_NAMESPACE}, the trash of "
                "earlier versions: `tables purge` of the namespace moves its tombstones to the warehouse's trash, "
                "and `tables purgable` says why any other entry stays"
            )
        with contextlib.suppress(iceberg.NoSuchNamespaceError):
            catalog.drop_namespace(legacy)

    def namespace_exists(self, request: NamespaceExistsRequest) -> None:
        namespace = parse_namespace_id(request.id)
        if namespace is None:
            return
        catalog = self._companions.catalog(namespace.warehouse)  # an unknown warehouse is NamespaceNotFound
        if namespace.path and not catalog.namespace_exists(namespace.path):
            raise NamespaceNotFoundError(f"Namespace {namespace} does not exist")
