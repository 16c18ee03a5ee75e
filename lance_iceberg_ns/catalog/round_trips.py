"""Who hears of each HTTP request the bridge sends to the Iceberg catalog.

Every catalog request leaves through one transport (``catalogs._TransportAdapter``, either through
pyiceberg's session or straight through its connection pool); it reports each one here, once
however many times urllib3 retried it, so that the REST server can count the catalog round trips
its operations cost (``server/observability.py``) without the bridge knowing of any server.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

# method, HTTP status (None: no answer came), seconds
Observer = Callable[[str, "int | None", float], None]

_observers: list[Observer] = []


def observe(observer: Observer) -> None:
    """Tell ``observer`` of every catalog request from now on (once, however often it is given)."""
    if observer not in _observers:
        _observers.append(observer)


def stop_observing(observer: Observer) -> None:
    if observer in _observers:
        _observers.remove(observer)


@dataclass
class RoundTrip:
    method: str
    status: int | None = None  # set by the sender once the answer is in


@contextmanager
def round_trip(method: str) -> Iterator[RoundTrip]:
    """Time one catalog request; the sender sets ``status`` when an answer came."""
    trip = RoundTrip(method)
    if not _observers:
        yield trip
        return
    started = time.perf_counter()
    try:
        yield trip
    finally:
        elapsed = time.perf_counter() - started
        for observer in list(_observers):
            observer(trip.method, trip.status, elapsed)
