"""What this process last knew of each managed table's latest state, kept briefly.

pylance asks for a managed table's latest version right after it describes the table, and a
writer commits right after that: answering those from the state loaded (or committed) a moment
earlier saves a catalog round trip each, and is as fresh as if the request had come a moment
sooner. A stale state can only make a commit's compare-and-swap fail, and pylance then retries.

Reads through the data plane never use what this process committed itself: another process may
have committed since. They ask through a namespace whose ``commit_cache_seconds`` is 0, so the
rule does not depend on the order in which pylance calls back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lance_iceberg_ns.cache import RecentlyUsed
from lance_iceberg_ns.identifiers import TableId

# How long a table loaded for the latest version serves the commit that follows it.
LOADED_FOR_COMMIT_SECONDS = 2.0
# How long a describe_table answer also answers the request for the latest version that pylance
# sends right after it.
DESCRIBED_JUST_NOW_SECONDS = 0.5
# How many of the final manifest names this process moved into place it keeps with a state.
KEPT_FINALIZED_NAMES = 4


@dataclass(frozen=True)
class _Known:
    table: Any  # pyiceberg's Table
    committed_here: bool  # this process committed it (else it was loaded)
    finalized: tuple[str, ...] = ()  # final manifest names this process moved into place, newest first


class ManagedState:
    """Managed tables as last loaded or committed by this process (pyiceberg ``Table`` objects),
    each answered only while younger than the age its use allows."""

    def __init__(self, commit_cache_seconds: float, capacity: int = 1024) -> None:
        self._commit_cache_seconds = commit_cache_seconds
        longest = max(LOADED_FOR_COMMIT_SECONDS, DESCRIBED_JUST_NOW_SECONDS, commit_cache_seconds)
        self._known: RecentlyUsed[tuple[str, ...], _Known] = RecentlyUsed(capacity, ttl_seconds=longest)

    @staticmethod
    def _key(table: TableId) -> tuple[str, ...]:
        return (table.warehouse, *table.iceberg_identifier)

    def loaded(self, table: TableId, loaded: Any) -> None:
        """Keep a state just loaded from the catalog."""
        self._known.keep(self._key(table), _Known(loaded, committed_here=False))

    def committed(self, table: TableId, committed: Any | None, finalized: Sequence[str] = ()) -> None:
        """Keep the state this process just committed (when ``commit_cache_seconds`` allows; None:
        the catalog's answer could not be read, nothing is kept), with the final manifest names it
        moved into place lately, newest first (no look needed to answer them, or to let their
        versions go: the few latest are enough)."""
        if committed is None:
            self.forget(table)
        elif self._commit_cache_seconds:
            kept = tuple(finalized[:KEPT_FINALIZED_NAMES])
            self._known.keep(self._key(table), _Known(committed, committed_here=True, finalized=kept))

    def forget(self, table: TableId) -> None:
        self._known.forget(self._key(table))

    def own_commit(self, table: TableId) -> Any | None:
        """The state this process committed less than ``commit_cache_seconds`` ago, if any."""
        known = self._known.get(self._key(table), max_age=self._commit_cache_seconds)
        return known.table if known is not None and known.committed_here else None

    def finalized(self, table: TableId) -> tuple[str, ...]:
        """The final manifest names this process moved into place with the state it keeps of
        ``table`` (names of other versions simply do not match a later state's)."""
        known = self._known.get(self._key(table), max_age=self._commit_cache_seconds)
        return known.finalized if known is not None and known.committed_here else ()

    def recent(self, table: TableId, max_age: float) -> Any | None:
        """The state loaded less than ``max_age`` ago, or committed here less than
        ``commit_cache_seconds`` ago."""
        key = self._key(table)
        known = self._known.get(key, max_age=max(max_age, self._commit_cache_seconds))
        if known is None:
            return None
        if not known.committed_here and self._known.get(key, max_age=max_age) is None:
            return None
        return known.table
