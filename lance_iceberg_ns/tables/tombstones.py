"""Soft delete for Lance tables in an Iceberg catalog: DROP (reversible), UNDROP, PURGE.

A soft-deleted table is its companion table **renamed** into the child namespace ``__lance_trash__``
of its namespace, as ``<table>~<deleted_at_ms>~<nonce>`` (a *tombstone*). Its Lance data stays where
it is. Because the state is in the name:

* ``list_tables`` of the namespace never sees a tombstone, at no extra request, and plain Iceberg
  clients (Spark's ``SHOW TABLES``) do not either: they see one child namespace, named for what it is;
* ``list_purgable_tables`` lists the trash namespace, ``deleted_at`` read from the names (and each
  entry loaded once, to tell the bridge's tombstones from foreign ones: see ``trash``);
* every transition is **one atomic catalog call on one identifier**, which is the race guard:
  UNDROP (and re-create) rename the tombstone back, PURGE drops the tombstone. Whichever call the
  catalog takes first wins; the other finds no tombstone and aborts. PURGE deletes the Lance data
  only after its drop succeeded, so it never deletes data that an UNDROP revived, and an UNDROP
  never reports success for a table a PURGE has taken. The nonce makes every tombstone name new, so
  a purge aimed at an old tombstone cannot take a later one.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

_SEPARATOR = "~"


@dataclass(frozen=True)
class Tombstone:
    """A soft-deleted table: its original name, when it was dropped, and its name in the trash."""

    table_name: str
    deleted_at_ms: int
    nonce: str

    @property
    def name(self) -> str:
        return _SEPARATOR.join([self.table_name, str(self.deleted_at_ms), self.nonce])

    @property
    def deleted_at(self) -> datetime:
        return datetime.fromtimestamp(self.deleted_at_ms / 1000, tz=timezone.utc)

    @classmethod
    def new(cls, table_name: str) -> Tombstone:
        return cls(table_name, int(time.time() * 1000), uuid.uuid4().hex[:12])

    @classmethod
    def parse(cls, name: str) -> Tombstone | None:
        """The tombstone a trash table name stands for; ``None`` for anything else."""
        parts = name.rsplit(_SEPARATOR, 2)
        if len(parts) != 3 or not parts[0] or not parts[1].isdigit() or not parts[2]:
            return None
        return cls(parts[0], int(parts[1]), parts[2])


def tombstones_of(trash_table_names: list[str], table_name: str | None = None) -> list[Tombstone]:
    """Tombstones among the trash's table names (of one table, if given), newest first."""
    found = [t for t in map(Tombstone.parse, trash_table_names) if t is not None]
    if table_name is not None:
        found = [t for t in found if t.table_name == table_name]
    return sorted(found, key=lambda t: (t.deleted_at_ms, t.nonce), reverse=True)


@dataclass(frozen=True)
class TableStatus:
    """What ``table_status`` answers: ``"exists"``, ``"soft_deleted"`` (with ``deleted_at``) or
    ``"not_found"`` (never existed, or purged: the two are not told apart)."""

    state: str
    deleted_at: datetime | None = None


@dataclass(frozen=True)
class PurgableTable:
    """A soft-deleted table that ``purge_table`` can reclaim; or, with ``foreign`` saying why, an
    entry in a trash namespace that this bridge did not make, which it never purges nor brings
    back (``deleted_at`` is None when its name is not even a tombstone's)."""

    id: list[str]
    deleted_at: datetime | None
    tombstone: str
    foreign: str | None = None

    @property
    def deleted_at_ms(self) -> int:
        return 0 if self.deleted_at is None else round(self.deleted_at.timestamp() * 1000)


NOT_DUE = "too young"  # how a reason starts when the table was only not due yet: kept, not refused


@dataclass(frozen=True)
class SkippedPurge:
    """A soft-deleted table a purge left whole, and why (too young, foreign, ownership not proved)."""

    id: list[str]
    tombstone: str
    reason: str

    @property
    def due(self) -> bool:
        """Whether the purge should have taken it: a table only too young was never due."""
        return not self.reason.startswith(NOT_DUE)


class PurgeReport(list[list[str]]):
    """The ids a purge of a namespace took (it is the list ``purge_tables`` always returned), and
    in ``skipped`` what it left whole and why, so that a caller can tell nothing-to-do from refused."""

    def __init__(self, purged: Iterable[list[str]] = (), skipped: Iterable[SkippedPurge] = ()) -> None:
        super().__init__(purged)
        self.skipped: list[SkippedPurge] = list(skipped or [])
