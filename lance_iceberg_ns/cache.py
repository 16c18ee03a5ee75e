"""The one small cache of the package: a thread-safe map that keeps its most recently used
entries, each for a limited time if asked to.

Everything the bridge remembers between calls is one of these: the types of table names a listing
learnt, the catalog's last answer per table (with its ETag), datasets kept open and where each
table was last found, what this process last knew of a managed table's latest version, and the
REST server's namespace per forwarded bearer token.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class RecentlyUsed(Generic[K, V]):
    """Entries by key: beyond ``capacity`` the least recently used are let go, and with
    ``ttl_seconds`` an entry is forgotten that long after it was kept (0: nothing is kept).

    ``on_evict`` is called, outside the lock, with each value let go for want of room (a value
    that holds connections can close them)."""

    def __init__(
        self,
        capacity: int,
        ttl_seconds: float | None = None,
        on_evict: Callable[[V], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._capacity = capacity
        self._ttl = ttl_seconds
        self._on_evict = on_evict
        self._clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()  # key → (kept at, value)
        self._lock = threading.Lock()

    def get(self, key: K, max_age: float | None = None) -> V | None:
        """The value kept for ``key``, or None when there is none, it expired, or it was kept
        more than ``max_age`` seconds ago."""
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            kept_at, value = entry
            if self._ttl is not None and now - kept_at >= self._ttl:
                del self._entries[key]
                return None
            if max_age is not None and now - kept_at >= max_age:
                return None
            self._entries.move_to_end(key)
            return value

    def now(self) -> float:
        """The moment, on the clock entries are aged by."""
        return self._clock()

    def keep(self, key: K, value: V, as_of: float | None = None) -> None:
        """Keep ``value`` for ``key`` (as the most recently used), its age starting now, or at
        ``as_of`` (a moment from ``now``) when it was learnt earlier."""
        if self._ttl is not None and self._ttl <= 0:
            return
        with self._lock:
            self._entries[key] = (self._clock() if as_of is None else as_of, value)
            self._entries.move_to_end(key)
            evicted = []
            while len(self._entries) > self._capacity:
                evicted.append(self._entries.popitem(last=False)[1][1])
        if self._on_evict is not None:
            for value_let_go in evicted:
                self._on_evict(value_let_go)

    def forget(self, key: K) -> V | None:
        """Let go of ``key``; the value it had, if any."""
        with self._lock:
            entry = self._entries.pop(key, None)
        return None if entry is None else entry[1]

    def forget_where(self, matches: Callable[[K, V], bool]) -> None:
        """Let go of every entry that ``matches``."""
        with self._lock:
            for key in [key for key, (_at, value) in self._entries.items() if matches(key, value)]:
                del self._entries[key]

    def values(self) -> list[V]:
        """The values kept, least recently used first (expired ones included until looked up)."""
        with self._lock:
            return [value for _at, value in self._entries.values()]

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
