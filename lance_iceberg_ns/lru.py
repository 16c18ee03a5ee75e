"""A small thread-safe map that keeps only its most recently used entries."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class RecentlyUsed(Generic[K, V]):
    """Entries by key; beyond ``capacity`` the least recently used are let go."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def keep(self, key: K, value: V) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)

    def forget(self, key: K) -> V | None:
        with self._lock:
            return self._entries.pop(key, None)

    def forget_where(self, matches: Callable[[K, V], bool]) -> None:
        with self._lock:
            for key in [key for key, value in self._entries.items() if matches(key, value)]:
                del self._entries[key]
