"""Listing Lance tables cheaply.

The Iceberg REST ``listTables`` answer holds only identifiers; whether a table is a Lance table
is in its properties, which only ``loadTable`` returns. The reference implementation loads every
table on every listing. Here:

* each listing still asks the server for the current names, so a table another client created
  appears at once and a dropped table disappears at once;
* the type of a name (Lance or not) is remembered for ``table_type_cache_seconds``, so a repeated
  listing costs one request; only names not seen before are loaded, in parallel;
* this namespace's own declare, register, rename, drop and deregister update what it remembers
  immediately;
* what is remembered is shared by every namespace object of the process that talks to the same
  endpoint as the same principal (``shared_table_types``): Spark and Ray rebuild the namespace
  in every task, lancedb reconnects, and none of them should pay the lookups again.

The one thing a remembered type can miss is another client replacing a table with one of the
other type under the same name; such a change shows once the remembered type expires.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from lance_namespace import ListTablesRequest, ListTablesResponse
from lance_namespace.errors import InvalidInputError
from pydantic import ValidationError
from pyiceberg import exceptions as iceberg

from lance_iceberg_ns.cache import RecentlyUsed
from lance_iceberg_ns.catalog.warehouses import BridgeRestCatalog, TableSummary
from lance_iceberg_ns.identifiers import TRASH_NAMESPACES, NamespaceId, parse_namespace_id
from lance_iceberg_ns.paging import page_after, take_page

TABLE_TYPE_KEY = "table_type"
TABLE_TYPE_LANCE = "lance"
ID_DELIMITER = "$"  # joins a full identifier in string form (the Lance REST spec's default)
_REMEMBERED_TYPES = 100_000  # table names whose type one process remembers

CacheKey = tuple[str, tuple[str, ...]]  # (warehouse, identifier inside the warehouse)
TableTypes = RecentlyUsed[CacheKey, bool]  # is the name a Lance table


def is_lance_table(properties: dict[str, str] | None) -> bool:
    """True when a table's properties mark it as a Lance table (``table_type=lance``, any case)."""
    return (properties or {}).get(TABLE_TYPE_KEY, "").lower() == TABLE_TYPE_LANCE


_shared_types: dict[tuple[str, str, float], TableTypes] = {}
_shared_types_lock = threading.Lock()


def shared_table_types(endpoint: str, principal: str, ttl_seconds: float) -> TableTypes:
    """The process-wide memory of table types for one endpoint and principal."""
    key = (endpoint, principal, ttl_seconds)
    with _shared_types_lock:
        types = _shared_types.get(key)
        if types is None:
            types = _shared_types[key] = RecentlyUsed(_REMEMBERED_TYPES, ttl_seconds=ttl_seconds)
        return types


def parallel_map(executor: Executor | None, function: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    """``map`` on the executor when there is more than one item."""
    if executor is None or len(items) <= 1:
        return [function(item) for item in items]
    return list(executor.map(function, items))


def walk(catalog: BridgeRestCatalog, top: NamespaceId) -> Iterator[tuple[NamespaceId, list[str]]]:
    """``top`` and every namespace beneath it (never into a trash), each with its children's names."""
    pending = [top.path]
    while pending:
        path = pending.pop()
        children = sorted(ident[-1] for ident in catalog.list_namespaces(path))
        yield NamespaceId(top.warehouse, path), children
        pending += [(*path, child) for child in reversed(children) if child not in TRASH_NAMESPACES]


@dataclass(frozen=True)
class TableListing:
    """Lance tables by name: the catalog lists the names, and what each is comes from the
    remembered types first, then from lookups in parallel (see the module docstring).
    ``has_data`` tells whether a location holds a dataset yet (for listings without declared
    tables); ``lookup_threads`` sizes the batches a page is looked up in; ``warehouses`` are those
    a listing of every table covers when it names none."""

    catalog: Callable[[str], BridgeRestCatalog]
    types: TableTypes
    lookups: Callable[[], Executor]
    has_data: Callable[[str], bool]
    lookup_threads: int
    warehouses: tuple[str, ...]

    def list_tables(self, request: ListTablesRequest) -> ListTablesResponse:
        """A page of the Lance tables of a namespace, by name (the root and a warehouse hold
        namespaces, never tables). Raises NoSuchNamespaceError."""
        namespace = parse_namespace_id(request.id)
        if namespace is None:
            return ListTablesResponse(tables=[], page_token=None)
        catalog = self.catalog(namespace.warehouse)  # an unknown warehouse is NamespaceNotFound
        if not namespace.path:
            return ListTablesResponse(tables=[], page_token=None)
        names = [ident[-1] for ident in catalog.list_tables(namespace.path)]
        with_data_only = request.include_declared is False

        def keep(batch: list[str]) -> list[str]:
            found = self.lance_tables_among(catalog, namespace, batch, with_data_only)
            return [name for name in batch if name in found]

        page, token = take_page(
            page_after(names, request.page_token), request.limit, keep, max(32, self.lookup_threads * 8)
        )
        return ListTablesResponse(tables=page, page_token=token)

    def list_all_tables(self, request: ListTablesRequest) -> ListTablesResponse:
        """A page of every Lance table beneath a warehouse or namespace (or every one of
        ``warehouses``), as full identifiers joined by ``$``."""
        top = parse_namespace_id(request.id)
        tops = [top] if top is not None else [NamespaceId(warehouse, ()) for warehouse in self.warehouses]
        if not tops:
            raise InvalidInputError("Give the warehouse to list, or configure the property 'warehouses'")
        include_declared = request.include_declared is not False
        found = []
        for top in tops:
            catalog = self.catalog(top.warehouse)
            for namespace, _children in walk(catalog, top):
                if namespace.path:
                    names = [ident[-1] for ident in catalog.list_tables(namespace.path)]
                    lance_names = self.lance_tables_among(catalog, namespace, names, not include_declared)
                    found += [ID_DELIMITER.join([*namespace.parts, name]) for name in lance_names]
        page, token = take_page(page_after(found, request.page_token), request.limit, lambda names: names, 1000)
        return ListTablesResponse(tables=page, page_token=token)

    def lance_tables_among(
        self, catalog: BridgeRestCatalog, namespace: NamespaceId, names: list[str], with_data_only: bool
    ) -> set[str]:
        """Which of ``names`` are Lance tables: remembered types first, the rest loaded in parallel."""

        def key(name: str) -> CacheKey:
            return (namespace.warehouse, (*namespace.path, name))

        def load(name: str) -> TableSummary | None:
            try:
                return catalog.load_table_summary((*namespace.path, name), refs_only=True)
            except iceberg.NoSuchTableError:  # dropped since the listing
                return None
            except ValidationError:  # metadata pyiceberg cannot read: not a companion the bridge made
                return None

        is_lance = {name: self.types.get(key(name)) for name in names}
        unknown = [name for name, kind in is_lance.items() if kind is None]
        loaded = dict(zip(unknown, parallel_map(self.lookups(), load, unknown), strict=True))
        for name, table in loaded.items():
            is_lance[name] = table is not None and is_lance_table(table.properties)
            if table is not None:
                self.types.keep(key(name), bool(is_lance[name]))
        lance_names = sorted(name for name in names if is_lance[name])
        if not with_data_only:
            return set(lance_names)

        def has_data(name: str) -> bool:
            table = loaded.get(name) or catalog.load_table_summary((*namespace.path, name))
            return self.has_data(table.location)

        checks = parallel_map(self.lookups(), has_data, lance_names)
        return {name for name, ok in zip(lance_names, checks, strict=True) if ok}
