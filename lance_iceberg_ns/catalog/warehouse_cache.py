"""Which warehouses' catalogs are kept: one per warehouse, with the API prefix decided for it
(``resolve_prefix``, see ``warehouses``), for good for the warehouses of the ``warehouses``
setting and for the most recently used others (``KEPT_UNLISTED_WAREHOUSES``); shared by every
namespace object of the process with the same connection settings."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from pyiceberg import exceptions as iceberg
from pyiceberg.catalog.rest import PREFIX, RestCatalog

from lance_iceberg_ns.cache import RecentlyUsed
from lance_iceberg_ns.catalog.client_properties import catalog_properties
from lance_iceberg_ns.catalog.warehouses import BridgeRestCatalog
from lance_iceberg_ns.config.settings import Settings
from lance_iceberg_ns.errors.translation import http_status, translated_errors

logger = logging.getLogger(__name__)


def resolve_prefix(catalog: RestCatalog, warehouse: str) -> str:
    """Decide the API prefix for a warehouse whose config named none; see the module docstring.

    Returns the prefix in use ('' for unprefixed paths) and leaves it in the catalog's properties.
    """
    announced = catalog.properties.get(PREFIX)
    if announced:
        return announced
    catalog.properties[PREFIX] = warehouse
    try:
        catalog.list_namespaces()
        return warehouse
    except iceberg.NoSuchNamespaceError as exc:  # pyiceberg's name for a 404 here
        logger.debug("warehouse %r: /v1/%s/ answered %s; using unprefixed paths", warehouse, warehouse, exc)
    except iceberg.RESTError as exc:
        if not isinstance(exc, iceberg.BadRequestError) and http_status(exc) not in (404, 405):
            raise  # 401, 403, 5xx: a real failure, not a missing route
        logger.debug("warehouse %r: /v1/%s/ answered %s; using unprefixed paths", warehouse, warehouse, exc)
    catalog.properties.pop(PREFIX, None)
    catalog.list_namespaces()  # fails loudly (and is translated) if the server routes neither
    return ""


# Catalogs kept for warehouses the settings do not name. Clients name warehouses, and each catalog
# holds open connections: beyond this many the least recently used is closed and let go.
KEPT_UNLISTED_WAREHOUSES = 64


@dataclass(frozen=True)
class _Warehouse:
    """A warehouse's catalog and the API prefix decided for it, kept and let go together."""

    catalog: BridgeRestCatalog
    prefix: str


class WarehouseCatalogs:
    """Warehouse name → its pyiceberg catalog, created lazily, shared safely between threads.

    The warehouses of the ``warehouses`` setting are kept for good; of the others, the
    ``KEPT_UNLISTED_WAREHOUSES`` most recently used, so that clients naming ever new warehouses
    cannot exhaust the process's connections and files. A warehouse the catalog refuses is not
    kept at all. A catalog let go is closed; a request still using it finishes on fresh
    connections, which close when it is dropped.
    """

    def __init__(self, settings: Settings, kept_unlisted: int = KEPT_UNLISTED_WAREHOUSES) -> None:
        self._settings = settings
        self._listed: frozenset[str] = frozenset()
        self._pinned: dict[str, _Warehouse] = {}  # the listed warehouses
        self._recent: RecentlyUsed[str, _Warehouse] = RecentlyUsed(kept_unlisted, on_evict=_close_warehouse)
        self._lock = threading.Lock()
        # one lock per warehouse being connected, held by its builder and waiters only
        self._connecting: dict[str, tuple[threading.Lock, list[int]]] = {}
        self.keep_for_good(settings.warehouses)

    def keep_for_good(self, warehouses: Iterable[str]) -> None:
        """Keep these warehouses' catalogs however many others clients name (the ``warehouses``
        of every namespace object that shares these catalogs)."""
        with self._lock:
            self._listed |= frozenset(warehouses)
            for name in self._listed - self._pinned.keys():
                if (recent := self._recent.forget(name)) is not None:
                    self._pinned[name] = recent

    def get(self, warehouse: str) -> BridgeRestCatalog:
        """The catalog for ``warehouse``; raises ``NamespaceNotFoundError`` for a warehouse the
        server does not know."""
        return self._warehouse(warehouse).catalog

    def prefix(self, warehouse: str) -> str:
        """The API prefix decided for a warehouse ('' for unprefixed paths)."""
        return self._warehouse(warehouse).prefix

    def connected(self, warehouse: str) -> tuple[BridgeRestCatalog, str]:
        """``get`` and ``prefix`` in one look: the catalog and the API prefix decided for it."""
        known = self._warehouse(warehouse)
        return known.catalog, known.prefix

    def kept(self) -> int:
        """How many warehouse catalogs are open."""
        return len(self._pinned) + len(self._recent)

    def kept_unlisted(self) -> int:
        """How many catalogs of warehouses the settings do not name are open (at most the bound)."""
        return len(self._recent)

    def _known(self, warehouse: str) -> _Warehouse | None:
        if warehouse in self._listed:
            return self._pinned.get(warehouse)
        return self._recent.get(warehouse)

    def _warehouse(self, warehouse: str) -> _Warehouse:
        known = self._known(warehouse)
        if known is not None:
            return known
        with self._lock:
            lock, waiters = self._connecting.setdefault(warehouse, (threading.Lock(), [0]))
            waiters[0] += 1
        try:
            with lock:  # one connection attempt per warehouse, others wait for it
                known = self._known(warehouse)
                if known is None:
                    known = self._connect(warehouse)
                    self._keep(warehouse, known)
                return known
        finally:
            with self._lock:
                waiters[0] -= 1
                if not waiters[0]:
                    del self._connecting[warehouse]

    def _connect(self, warehouse: str) -> _Warehouse:
        with translated_errors(f"Warehouse '{warehouse}'", self._settings.redact):
            catalog = BridgeRestCatalog(warehouse, self._settings, **catalog_properties(self._settings, warehouse))
            try:
                prefix = resolve_prefix(catalog, warehouse)
            except BaseException:
                catalog.close()
                raise
        logger.debug("warehouse %r uses API prefix %r", warehouse, prefix)
        return _Warehouse(catalog, prefix)

    def _keep(self, warehouse: str, connected: _Warehouse) -> None:
        if warehouse in self._listed:
            with self._lock:
                self._pinned[warehouse] = connected
        else:
            self._recent.keep(warehouse, connected)

    def close(self) -> None:
        """Close every catalog's pooled connections."""
        with self._lock:
            kept, self._pinned = [*self._pinned.values()], {}

        def taken(_name: str, recent: _Warehouse) -> bool:
            kept.append(recent)
            return True

        self._recent.forget_where(taken)  # every entry, in one step under the cache's lock
        for warehouse in kept:
            _close_warehouse(warehouse)


def _close_warehouse(warehouse: _Warehouse) -> None:
    """Close a catalog that is let go (its session and pooled connections)."""
    try:
        warehouse.catalog.close()
    except Exception:  # closing sockets must not fail the request whose warehouse pushed this one out
        logger.warning("closing the catalog of warehouse %r failed", warehouse.catalog.name, exc_info=True)


_shared: dict[str, tuple[WarehouseCatalogs, int]] = {}
_shared_lock = threading.Lock()


def acquire_warehouse_catalogs(settings: Settings) -> WarehouseCatalogs:
    """The warehouse catalogs for these connection settings, shared by every namespace object of
    the process that has the same ones (Spark and Ray rebuild the namespace in every task;
    without sharing each would fetch the config and open connections again)."""
    key = settings.connection_key()
    with _shared_lock:
        catalogs, users = _shared.get(key, (None, 0))
        if catalogs is None:
            catalogs = WarehouseCatalogs(settings)
        else:
            catalogs.keep_for_good(settings.warehouses)
        _shared[key] = (catalogs, users + 1)
        return catalogs


def release_warehouse_catalogs(settings: Settings) -> None:
    """Give back what ``acquire_warehouse_catalogs`` handed out; the last user closes them."""
    key = settings.connection_key()
    with _shared_lock:
        catalogs, users = _shared.get(key, (None, 0))
        if catalogs is None:
            return
        if users > 1:
            _shared[key] = (catalogs, users - 1)
            return
        del _shared[key]
    catalogs.close()
