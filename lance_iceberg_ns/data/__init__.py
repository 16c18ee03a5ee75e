"""The data half of the namespace: writes, reads and search, indices, tags and schema.

These modules speak pylance and Arrow, never the catalog. The namespace resolves a table id
through the catalog into a ``ResolvedTable`` (its location, the storage options to reach it, and
whether the catalog manages its versions), opens its dataset through ``data.opening`` (which keeps it
open; ``data.datasets`` alone opens one), and hands the dataset and the request to the module that
owns the operation.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field

from lance_iceberg_ns.storage.ownership import Entry

# When the request a read serves arrived (``time.monotonic()``). The server sets it before the
# request waits for a data thread; unset, a read arrives as it starts. The catalog's answer to a
# question asked since then is as fresh as the read's own question would be (``data.opening``).
request_arrived: ContextVar[float | None] = ContextVar("lance_iceberg_ns_request_arrived", default=None)


@dataclass(frozen=True)
class ResolvedTable:
    """A live Lance table, as the catalog says it is right now."""

    id: tuple[str, ...]
    location: str
    storage_options: dict[str, str] = field(repr=False)  # may hold credentials
    managed: bool = False  # every commit goes through the catalog's compare-and-swap
    entry: Entry = Entry((), None, None)  # the catalog entry, as its location's ownership marker names it
    # the catalog's metadata file as loaded: any change to the entry (a commit, a snapshot expired) moves it
    metadata_location: str | None = field(default=None, compare=False)

    @property
    def place(self) -> tuple[str, Entry]:
        """Where the table is and which entry it is: an explicit location can be used again by a
        new table after a hard drop, and a catalog copy of an entry (same UUID, same location) is
        another entry: a dataset kept for one must never answer for the other."""
        return (self.location, self.entry)
