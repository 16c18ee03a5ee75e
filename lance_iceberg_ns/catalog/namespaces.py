"""Namespaces: Iceberg namespaces under a warehouse, created, listed, described and dropped.

The root lists the configured warehouses (Iceberg REST has no call that lists them); a warehouse
itself is managed by the catalog server. Each namespace's trash (``lifecycle``) is hidden from
listings and keeps a namespace from being dropped while it holds soft-deleted tables. Answers leave
out the properties that say where the catalog keeps files (``answered``).
"""

from __future__ import annotations

from collections.abc import Mapping

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

from lance_iceberg_ns.catalog.companions import Companions
from lance_iceberg_ns.catalog.property_rules import RESERVED_LOCATION_PROPERTIES, plain_property_key
from lance_iceberg_ns.catalog.warehouses import BridgeRestCatalog
from lance_iceberg_ns.identifiers import TRASH_NAMESPACE, NamespaceId, parse_namespace_id, trash_path
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


class Namespaces:
    """The namespace operations of one bridge."""

    def __init__(self, companions: Companions, warehouses: tuple[str, ...]) -> None:
        self._companions = companions
        self._warehouses = warehouses

    def create_namespace(self, request: CreateNamespaceRequest) -> CreateNamespaceResponse:
        namespace = namespace_below_warehouse(request.id, "create")
        mode = parse_mode(request.mode, "create", ("create", "existok", "overwrite"), "create_namespace")
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
            children = [ident[-1] for ident in listed if ident[-1] != TRASH_NAMESPACE]
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
        parse_mode(request.behavior, "restrict", ("restrict",), "drop_namespace behavior (drop the tables first)")
        missing_ok = parse_mode(request.mode, "skip", ("skip", "fail"), "drop_namespace") == "skip"
        namespace = namespace_below_warehouse(request.id, "drop")
        catalog = self._companions.catalog(namespace.warehouse)
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
            if not missing_ok:
                raise
            properties = {}
        return DropNamespaceResponse(properties=answered(properties))

    @staticmethod
    def _drop_empty_trash(catalog: BridgeRestCatalog, namespace: NamespaceId) -> None:
        held = catalog.list_tables(trash_path(namespace.path))
        if held:
            raise NamespaceNotEmptyError(
                f"Namespace {namespace} holds {len(held)} soft-deleted table(s); purge them first"
            )
        catalog.drop_namespace(trash_path(namespace.path))

    def namespace_exists(self, request: NamespaceExistsRequest) -> None:
        namespace = parse_namespace_id(request.id)
        if namespace is None:
            return
        catalog = self._companions.catalog(namespace.warehouse)  # an unknown warehouse is NamespaceNotFound
        if namespace.path and not catalog.namespace_exists(namespace.path):
            raise NamespaceNotFoundError(f"Namespace {namespace} does not exist")
