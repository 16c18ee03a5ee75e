"""Who owns a table location: an ownership marker at the location names the catalog entry.

Every location the bridge declares or registers gets a small file, ``.lance-iceberg-ns-owner.json``,
naming the companion table that owns it: the one-off claim id it was created with, once created its
Iceberg table UUID, and the entry's name in the catalog (warehouse and identifier).

The name is what makes the marker unforgeable from the catalog. Iceberg's ``register_table``
copies a table's UUID, properties and location from any metadata file into a new entry, and many
catalogs ask no credentials for it; the copy's name is its own. So an entry owns a location only
when the marker names its UUID *and* its name. The bridge's own renames (rename, soft delete,
undrop) rewrite the marker to the new name right after the catalog's rename (whole or not at all:
a proof reading meanwhile sees the old marker or the new one). A marker left behind (a crash in
between, a rename by an Iceberg engine) is never trusted by its old name alone, since a copy
cannot be told from the renamed original that way: ``placement`` asks the whole catalog instead.

* **Claiming** writes the marker exclusively (``O_EXCL`` on a local disk, a conditional put,
  ``If-None-Match: *``, on an object store: of two claims of one location exactly one wins), and
  only then checks the neighbourhood: no marker in a directory above the location (it would be
  inside another table) nor below it (another table would be inside it; a dataset's own
  directories are not looked into). Two overlapping claims racing each other both see the other
  and both give up, which is safe.
* **Proving** ownership before reading, writing or deleting compares the marker with the entry.
  No marker, or another entry's, and the step reads, deletes and changes nothing, and says so
  without naming the other table.
* **Releasing** (deregister) removes the marker when it names the entry: the data then belongs to
  nobody, and can be registered again. So can data whose entry an Iceberg engine dropped.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from lance_namespace.errors import InvalidInputError, PermissionDeniedError

from lance_iceberg_ns.storage import files, trees
from lance_iceberg_ns.storage.locations import is_local

MARKER = ".lance-iceberg-ns-owner.json"


EntryName = tuple[str, ...]  # where the catalog holds an entry: (warehouse, *identifier)


@dataclass(frozen=True)
class Entry:
    """A catalog entry as ownership sees it: where the catalog holds it, its table UUID, and the
    claim id its create carried. Of these only the name cannot be copied: Iceberg's
    ``register_table`` gives a copy the same UUID and properties, but a name of its own."""

    name: EntryName
    table_uuid: str | None
    claim: str | None


@dataclass(frozen=True)
class Owner:
    """What a marker says: the claim id, the table UUID (once stamped) and the entry's name."""

    claim: str
    table_uuid: str | None
    entry: EntryName
    table: str = field(default="", compare=False)  # the name as text, for people; markers before names were kept
    releasing: str = ""  # who is letting the location go (its entry gone), and deleting its files

    def to_json(self) -> bytes:
        fields = {
            "claim": self.claim,
            "table-uuid": self.table_uuid,
            "entry": list(self.entry),
            "table": ".".join(self.entry) or self.table,
        }
        return json.dumps({**fields, **({"releasing": self.releasing} if self.releasing else {})}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Owner:
        try:
            fields = json.loads(data)
            entry = tuple(str(part) for part in fields.get("entry") or ())
            table = str(fields.get("table", ""))
            return cls(str(fields["claim"]), fields.get("table-uuid"), entry, table, str(fields.get("releasing") or ""))
        except (ValueError, KeyError, TypeError, AttributeError):
            return cls("", None, (), "(unreadable ownership marker)")

    @property
    def in_flight(self) -> bool:
        """A claim whose entry is still being made (an import copying), or whose files are being
        deleted: not a marker left behind, though no entry holds it."""
        return self.table_uuid is None or bool(self.releasing)

    def same_table(self, entry: Entry) -> bool:
        """Whether the entry has the table UUID the marker names (or, before the create's answer
        stamped one, its claim id). A catalog copy has them too: see ``names``."""
        if self.table_uuid is not None:
            return self.table_uuid == entry.table_uuid
        return bool(entry.claim) and self.claim == entry.claim

    def names(self, entry: Entry) -> bool:
        """Whether the marker names this very catalog entry: the table and the entry's name."""
        if not self.same_table(entry):
            return False
        if self.entry:
            return entry.name == self.entry
        return bool(entry.name) and self.table == ".".join(entry.name)  # a marker of before names were kept


def read_owner(location: str, storage_options: Mapping[str, str]) -> Owner | None:
    """The marker at ``location``, or ``None`` when there is none."""
    found = _read_marker(location, storage_options)
    return None if found is None else found[0]


def _read_marker(location: str, storage_options: Mapping[str, str]) -> tuple[Owner, files.Written | None] | None:
    """The marker at ``location`` and its tag (a rewrite on it writes over exactly that marker)."""
    try:
        found = files.read_tagged(location, MARKER, storage_options)
    except files.NotOpened:  # a symbolic link where the marker should be: nobody's valid claim
        return Owner("", None, (), "(a symbolic link in place of the ownership marker)"), None
    return None if found is None else (Owner.from_json(found[0]), found[1])


def _create_marker(location: str, owner: Owner, storage_options: Mapping[str, str]) -> files.Written | None:
    """Write a new marker, only if there is none (None if there was one)."""
    return files.create_file(location, MARKER, owner.to_json(), storage_options)


def _replace_marker(
    location: str, owner: Owner, storage_options: Mapping[str, str], written: files.Written | None = None
) -> bool:
    """Write the marker over the one there, whole or not at all: a proof reading it meanwhile sees
    the old or the new (False if it is gone: a purge that deleted the location meanwhile must not
    see it made again; on an object store, also if it changed since ``written``)."""
    return files.replace_file(location, MARKER, owner.to_json(), storage_options, written)


def _remove_marker(location: str, storage_options: Mapping[str, str]) -> None:
    files.delete_file(location, MARKER, storage_options)


def _markers_above(location: str, top: str, storage_options: Mapping[str, str]) -> str | None:
    """The nearest directory strictly between ``top`` and ``location`` that holds a marker."""
    parent = location.rsplit("/", 1)[0]
    while len(parent) > len(top.rstrip("/")) and parent.startswith(top.rstrip("/")):
        if read_owner(parent, storage_options) is not None:
            return parent
        parent = parent.rsplit("/", 1)[0]
    return None


def _markers_below(location: str, storage_options: Mapping[str, str]) -> bool:
    """Whether a directory strictly under ``location`` holds a marker (links are not followed)."""
    return trees.holds_below(location, MARKER, storage_options)


def check_free(location: str, top: str, storage_options: Mapping[str, str]) -> None:
    """What ``claim`` checks, without writing: raises ``PermissionDeniedError`` when an entry owns
    ``location``, a place above it or below it."""
    held = read_owner(location, storage_options)
    conflict = _markers_above(location, top, storage_options)
    inside = None if held or conflict else _markers_below(location, storage_options)
    if held or conflict or inside:
        raise PermissionDeniedError(
            f"The location {location!r} is owned by, inside or around another table's; table locations must not overlap"
        )


@dataclass(frozen=True)
class Claim:
    """A claim just made, which ``undo`` takes back: the marker, and the directories it made."""

    location: str
    owner: Owner
    storage_options: Mapping[str, str]
    made_from: str | None  # the topmost directory the claim created (local file systems)
    metadata_was_there: bool = True  # whether the location held a metadata/ directory when claimed
    written: files.Written | None = None  # the marker as the store tagged it when created

    def undo(self) -> None:
        with contextlib.suppress(OSError):
            entry = Entry(self.owner.entry, self.owner.table_uuid, self.owner.claim)
            release(self.location, entry, self.storage_options)
        if self.made_from is not None:
            files.remove_empty_directories(self.location, self.made_from)

    def undo_create(self) -> None:
        """``undo`` after the catalog failed to make the entry (a missing namespace, say): the
        metadata files the catalog writes before it checks go too, from a ``metadata/`` directory
        that was not there when the location was claimed (while claimed, no one else writes there)."""
        if not self.metadata_was_there:
            files.delete_catalog_metadata(self.location)
        self.undo()


def claim(location: str, top: str, owner: Owner, storage_options: Mapping[str, str]) -> Claim:
    """Claim ``location`` (under ``top``, the root or allowed location holding it) for ``owner``.
    Raises ``PermissionDeniedError`` when another entry owns it, or a location above or below it;
    then nothing is left behind. ``OSError`` when an object store refuses the write itself (the
    bridge may reach it only with credentials the catalog vends for the table)."""
    if files.is_link(location):
        raise PermissionDeniedError(f"The location {location!r} is a symbolic link; a table owns a real directory")
    metadata_was_there = files.has_entry(location, files.ICEBERG_METADATA_DIRECTORY)
    missing = files.first_missing_directory(location)
    made = Claim(location, owner, storage_options, missing, metadata_was_there)
    try:
        written = _create_marker(location, owner, storage_options)
    except OSError as exc:  # a file in the way, a name too long, a loop of links
        if not is_local(location):  # the store refused or was not reached: the caller may retry otherwise
            raise
        made.undo()
        raise InvalidInputError(f"Cannot make a table directory at {location!r}: {exc.strerror or exc}") from None
    if written is None:
        raise PermissionDeniedError(f"The location {location!r} belongs to another table")
    try:
        conflict = _markers_above(location, top, storage_options)
        inside = None if conflict else _markers_below(location, storage_options)
    except BaseException:
        made.undo()
        raise
    if conflict or inside:
        made.undo()
        where = "inside the location of another table" if conflict else "around the location of another table"
        raise PermissionDeniedError(f"The location {location!r} lies {where}; table locations must not overlap")
    return replace(made, written=written)


def stamp(location: str, owner: Owner, storage_options: Mapping[str, str], claimed: Claim | None = None) -> bool:
    """Complete a claim (``claimed``, when made by this process: its marker is then written over
    on the tag it was created with, without a look) with the table UUID the catalog gave the entry.
    False when the marker is no longer the claim's (taken meanwhile): the claim is lost."""
    return _replace_marker(location, owner, storage_options, None if claimed is None else claimed.written)


def still_claimed(claimed: Claim) -> bool:
    """Whether the marker at a claim's location is still the one the claim wrote."""
    return read_owner(claimed.location, claimed.storage_options) == claimed.owner


def let_go(location: str, entry: Entry, storage_options: Mapping[str, str]) -> bool:
    """Before the files of an entry that was dropped from the catalog are deleted: the marker,
    if it still names the entry, marked as releasing (on the tag it was read with), so that no
    register adopts the location meanwhile. False (delete nothing) when it no longer names the
    entry: another entry claimed the location since."""
    found = _read_marker(location, storage_options)
    if found is None or not found[0].names(entry) or found[0].releasing:
        return False  # another's now, or another removal has it
    marked = replace(found[0], releasing=uuid.uuid4().hex)
    return _replace_marker(location, marked, storage_options, found[1])


def release(location: str, entry: Entry, storage_options: Mapping[str, str]) -> None:
    """Remove the marker if it names this entry (a deregistered table's data belongs to nobody):
    marked as being let go first, on the marker read, so that a register that adopted the
    location meanwhile keeps its own marker."""
    found = _read_marker(location, storage_options)
    if found is not None and found[0].names(entry):
        _remove_over(location, found, storage_options)


def _remove_over(location: str, found: tuple[Owner, files.Written | None], storage_options: Mapping[str, str]) -> bool:
    """Remove the marker ``found`` (and its tag) if it is still there and nobody else is letting
    it go: marked with a token of this removal first, on the tag, then deleted. A stamp, a
    let-go or another removal racing this one then fails, and no marker is removed that another
    claim wrote since."""
    held, tag = found
    if held.releasing:
        return False  # another removal or deletion has it
    if not _replace_marker(location, replace(held, releasing=uuid.uuid4().hex), storage_options, tag):
        return False
    _remove_marker(location, storage_options)
    return True


def prove(location: str, entry: Entry, storage_options: Mapping[str, str]) -> Owner:
    """The marker at ``location``, when it names this entry. Raises ``PermissionDeniedError``
    (saying why) otherwise: the caller reads, deletes and changes nothing."""
    if files.is_link(location):
        raise PermissionDeniedError(
            f"The location {location!r} is a symbolic link: nothing was read, deleted or changed"
        )
    held = read_owner(location, storage_options)
    if held is None:
        raise PermissionDeniedError(
            f"The location {location!r} carries no ownership marker, so this entry cannot show that the data is "
            "its own: nothing was read, deleted or changed (deregister the table, then register it again to adopt it)"
        )
    if not held.names(entry):
        raise PermissionDeniedError(
            f"The location {location!r} belongs to another table: nothing was read, deleted or changed"
        )
    return held


def rewrite(location: str, expected: Owner, new: Owner | None, storage_options: Mapping[str, str]) -> bool:
    """Replace the marker with ``new`` (or remove it, with None) if it still says what
    ``expected`` says; False otherwise. Carries a marker along a rename of its entry, and lets go
    of a location whose entry is gone from the catalog."""
    found = _read_marker(location, storage_options)
    if found is None or found[0] != expected:
        return False
    if new is None:
        return _remove_over(location, (replace(found[0], releasing=""), found[1]), storage_options)
    return _replace_marker(location, new, storage_options, found[1])


def markers_under(top: str, storage_options: Mapping[str, str]) -> Iterator[tuple[str, Owner]]:
    """(location, marker) for every ownership marker under ``top`` (links are not followed; on a
    local disk not inside a location that holds one: a table's location holds no other table)."""
    for location in trees.directories_holding(top, MARKER, storage_options):
        owner = read_owner(location, storage_options)
        if owner is not None:
            yield location, owner
