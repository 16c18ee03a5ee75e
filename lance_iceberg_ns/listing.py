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
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

TABLE_TYPE_KEY = "table_type"
TABLE_TYPE_LANCE = "lance"

CacheKey = tuple[str, tuple[str, ...]]  # (warehouse, identifier inside the warehouse)


def is_lance_table(properties: dict[str, str] | None) -> bool:
    """True when a table's properties mark it as a Lance table (``table_type=lance``, any case)."""
    return (properties or {}).get(TABLE_TYPE_KEY, "").lower() == TABLE_TYPE_LANCE


class TableTypeCache:
    """Remembers, for a while, which table names are Lance tables."""

    _PRUNE_EVERY = 4096  # entries added between sweeps of expired ones

    def __init__(self, ttl_seconds: float) -> None:
        self._ttl = ttl_seconds
        self._entries: dict[CacheKey, tuple[bool, float]] = {}
        self._lock = threading.Lock()
        self._added_since_prune = 0

    def get(self, key: CacheKey) -> bool | None:
        """The remembered type, or ``None`` when unknown or expired."""
        entry = self._entries.get(key)
        if entry is None or entry[1] < time.monotonic():
            return None
        return entry[0]

    def remember(self, key: CacheKey, is_lance: bool) -> None:
        if self._ttl <= 0:
            return
        with self._lock:
            now = time.monotonic()
            self._entries[key] = (is_lance, now + self._ttl)
            self._added_since_prune += 1
            if self._added_since_prune >= self._PRUNE_EVERY:
                self._entries = {k: v for k, v in self._entries.items() if v[1] >= now}
                self._added_since_prune = 0

    def forget(self, key: CacheKey) -> None:
        with self._lock:
            self._entries.pop(key, None)


_shared_caches: dict[tuple[str, str, float], TableTypeCache] = {}
_shared_caches_lock = threading.Lock()


def shared_table_types(endpoint: str, principal: str, ttl_seconds: float) -> TableTypeCache:
    """The process-wide memory of table types for one endpoint and principal."""
    key = (endpoint, principal, ttl_seconds)
    with _shared_caches_lock:
        cache = _shared_caches.get(key)
        if cache is None:
            cache = _shared_caches[key] = TableTypeCache(ttl_seconds)
        return cache


def page_after(names: Sequence[str], page_token: str | None) -> list[str]:
    """The sorted names that come after ``page_token`` (the last name of the previous page)."""
    ordered = sorted(set(names))
    if page_token:
        return [name for name in ordered if name > page_token]
    return ordered


def take_page(
    candidates: list[str],
    limit: int | None,
    keep: Callable[[list[str]], Iterable[str]],
    batch_size: int,
) -> tuple[list[str], str | None]:
    """Walk sorted ``candidates`` in batches, keeping what ``keep`` keeps, until ``limit`` names.

    Returns the page and the token for the next one (``None`` when nothing is left), so that a
    small page costs lookups only for the names it had to look at.
    """
    page: list[str] = []
    position = 0
    while position < len(candidates) and (limit is None or len(page) < limit):
        wanted = batch_size if limit is None else max(batch_size, limit - len(page))
        batch = candidates[position : position + wanted]
        position += len(batch)
        page.extend(keep(batch))
    if limit is not None and len(page) > limit:
        page = page[:limit]
        return page, page[-1]
    if limit is not None and len(page) == limit and position < len(candidates):
        return page, page[-1]
    return page, None


def parallel_map(executor: ThreadPoolExecutor | None, function: Callable, items: list) -> list:  # type: ignore[type-arg]
    """``map`` on the executor when there is more than one item."""
    if executor is None or len(items) <= 1:
        return [function(item) for item in items]
    return list(executor.map(function, items))
