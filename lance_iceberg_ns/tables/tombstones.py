"""Soft delete for Lance tables in an Iceberg catalog: DROP (reversible), UNDROP, PURGE.

A soft-deleted table is its companion table **renamed** into its warehouse's trash, the namespace
``lance_iceberg_ns_trash`` at the warehouse's top, as ``<label>_<deleted_at_ms>_<nonce>_<digest>``
(a *tombstone*): ``label`` is the table's name in lowercase letters, digits and underscores (for
people), ``digest`` a hash of where the table was (its namespace and name). So every name the trash
holds is one the strictest catalogs accept (S3 Tables: lowercase letters, digits and underscores,
starting and ending with a letter or digit), whatever the table's name. The digest is the
authority on where a tombstone comes from: the ownership marker names the tombstone, name and all.
Where the table was is also written whole, for listings, in the property
``lance-iceberg-ns.soft-deleted-from`` just before the rename (on an entry that owns its location,
so that a drop never has the catalog write into another table's place); a listing believes it only
when the digest agrees, and otherwise tries the namespaces it lists with the label as the name. The
Lance data stays where it is. Because the state is in the name:

* ``list_tables`` of the namespace never sees a tombstone, at no extra request, and plain Iceberg
  clients (Spark's ``SHOW TABLES``) do not either: they see one namespace, named for what it is;
* the trash is no namespace's child: a namespace whose tables were all dropped is empty and can be
  dropped, and its tables stay restorable (into a namespace of that name, once it exists again) and
  purgeable;
* a table's tombstones are found by one listing of the trash, by the digest of its identifier;
  ``list_purgable_tables`` loads each entry once, to read where it was and to tell the bridge's
  tombstones from foreign ones (see ``trash``);
* every transition is **one atomic catalog call on one identifier**, which is the race guard:
  UNDROP (and re-create) rename the tombstone back, PURGE drops the tombstone. Whichever call the
  catalog takes first wins; the other finds no tombstone and aborts. PURGE deletes the Lance data
  only after its drop succeeded, so it never deletes data that an UNDROP revived, and an UNDROP
  never reports success for a table a PURGE has taken. The nonce makes every tombstone name new, so
  a purge aimed at an old tombstone cannot take a later one.

Earlier versions kept a namespace's tombstones in its child namespace ``__lance_trash__``, named
``<table>~<deleted_at_ms>~<nonce>``. Those are still listed, restored and purged where they are, and
moved into the warehouse's trash by the next drop in their namespace, by ``drop_namespace`` and by a
purge of expired tables.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from lance_iceberg_ns.catalog.companions import BOOKKEEPING_PREFIX
from lance_iceberg_ns.identifiers import legacy_trash_path, trash_path

# Where a tombstone's table was: a JSON list of its identifier inside the warehouse's catalog.
ORIGIN_PROPERTY = BOOKKEEPING_PREFIX + "soft-deleted-from"
_LABEL_CHARACTERS = 64  # of the table's name, in a tombstone's name: the name stays far below 255
_DIGEST_CHARACTERS = 20  # 80 bits of SHA-256: the name alone picks a table's tombstones
_NAME = re.compile(
    r"(?P<label>[a-z0-9](?:[a-z0-9_]*[a-z0-9])?)_(?P<ms>[0-9]{1,16})_(?P<nonce>[a-z0-9]{1,32})"
    rf"_(?P<digest>[0-9a-f]{{{_DIGEST_CHARACTERS}}})"
)
_LEGACY_SEPARATOR = "~"


def origin_digest(origin: tuple[str, ...]) -> str:
    """The hash of a table's identifier that the names of its tombstones carry."""
    text = json.dumps(list(origin), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:_DIGEST_CHARACTERS]


def origin_property(origin: tuple[str, ...]) -> str:
    """``ORIGIN_PROPERTY``'s value for a table's identifier."""
    return json.dumps(list(origin), ensure_ascii=False)


def recorded_origin(properties: Mapping[str, str]) -> tuple[str, ...] | None:
    """Where an entry says it was soft-deleted from (``ORIGIN_PROPERTY``); None when it does not
    say, or says something that is no table's identifier."""
    try:
        origin = json.loads(properties.get(ORIGIN_PROPERTY, ""))
    except ValueError:
        return None
    if not isinstance(origin, list) or len(origin) < 2 or not all(isinstance(p, str) and p for p in origin):
        return None
    return tuple(origin)


def _label(table_name: str) -> str:
    """The table's name as far as it is lowercase letters and digits, other runs as one ``_``."""
    label = re.sub(r"[^a-z0-9]+", "_", table_name.lower())[:_LABEL_CHARACTERS].strip("_")
    return label or "table"


@dataclass(frozen=True)
class Tombstone:
    """A soft-deleted table: where it was (``origin``: its namespace's path and its name inside the
    warehouse's catalog), when it was dropped, and where it is in the trash."""

    origin: tuple[str, ...]
    deleted_at_ms: int
    nonce: str
    legacy: bool = False  # in its namespace's ``__lance_trash__``, as earlier versions kept it

    @property
    def table_name(self) -> str:
        return self.origin[-1]

    @property
    def name(self) -> str:
        """Its name in the trash."""
        if self.legacy:
            return _LEGACY_SEPARATOR.join([self.table_name, str(self.deleted_at_ms), self.nonce])
        return f"{_label(self.table_name)}_{self.deleted_at_ms}_{self.nonce}_{origin_digest(self.origin)}"

    @property
    def identifier(self) -> tuple[str, ...]:
        """Where it is, inside the warehouse's catalog."""
        holder = legacy_trash_path(self.origin[:-1]) if self.legacy else trash_path(self.origin[:-1])
        return (*holder, self.name)

    @property
    def deleted_at(self) -> datetime:
        return datetime.fromtimestamp(self.deleted_at_ms / 1000, tz=timezone.utc)

    def moved(self) -> Tombstone:
        """The same tombstone in the warehouse's trash."""
        return Tombstone(self.origin, self.deleted_at_ms, self.nonce)

    @classmethod
    def new(cls, origin: tuple[str, ...]) -> Tombstone:
        return cls(tuple(origin), int(time.time() * 1000), uuid.uuid4().hex[:12])

    @classmethod
    def in_legacy_trash(cls, namespace_path: tuple[str, ...], name: str) -> Tombstone | None:
        """The tombstone an entry of a namespace's ``__lance_trash__`` stands for, by its name;
        None for any other name."""
        parts = name.rsplit(_LEGACY_SEPARATOR, 2)
        if len(parts) != 3 or not parts[0] or not parts[1].isdigit() or not parts[2]:
            return None
        return cls((*namespace_path, parts[0]), int(parts[1]), parts[2], legacy=True)


@dataclass(frozen=True)
class TrashName:
    """What the name of an entry of the warehouse's trash says: when it was dropped, its nonce and
    the digest of where it was (where it was itself is in the entry's properties)."""

    label: str
    deleted_at_ms: int
    nonce: str
    digest: str

    @classmethod
    def parse(cls, name: str) -> TrashName | None:
        """None for a name that is not a tombstone's."""
        found = _NAME.fullmatch(name)
        if found is None:
            return None
        return cls(found["label"], int(found["ms"]), found["nonce"], found["digest"])

    def tombstone(self, origin: tuple[str, ...] | None) -> Tombstone | None:
        """The tombstone this name stands for if it was dropped from ``origin``; None when the
        digest says otherwise (or no origin is known)."""
        if origin is None or origin_digest(origin) != self.digest:
            return None
        return Tombstone(origin, self.deleted_at_ms, self.nonce)

    def found_in(self, properties: Mapping[str, str], namespaces: Iterable[tuple[str, ...]]) -> Tombstone | None:
        """The tombstone of an entry with this name and ``properties``: where its property says it
        was dropped from, or else one of ``namespaces`` with the label as the table's name (a table
        whose name is its own label), when the digest agrees; None when neither does."""
        recorded = self.tombstone(recorded_origin(properties))
        if recorded is not None:
            return recorded
        guesses = (self.tombstone((*namespace, self.label)) for namespace in namespaces)
        return next((guess for guess in guesses if guess is not None), None)


def newest_first(tombstones: Iterable[Tombstone]) -> list[Tombstone]:
    return sorted(tombstones, key=lambda t: (t.deleted_at_ms, t.nonce), reverse=True)


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
    back (``deleted_at`` is None when its name is not even a tombstone's); or, with ``unreadable``
    saying why, one whose location this client cannot read now (the store refused it, or could not
    be reached): not purged while it cannot be shown to be the table's own, and brought back by a
    client the store lets in."""

    id: list[str]
    deleted_at: datetime | None
    tombstone: str
    foreign: str | None = None
    unreadable: str | None = None

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
