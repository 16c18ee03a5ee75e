"""Who owns a table location: an ownership marker at the location names the catalog entry.

Every location the bridge declares or registers gets a small file, ``.lance-iceberg-ns-owner.json``,
naming the companion table that owns it: the one-off claim id it was created with, once created its
Iceberg table UUID, and the entry's name in the catalog (warehouse and identifier). An object store
that takes no file at the top of a table, only in the directories a table format keeps there
(SeaweedFS's table buckets: ``metadata/``, ``data/`` and ``_<lowercase>/``), holds it as
``_lance_iceberg_ns/owner.json`` instead: the claim writes it there when the store refuses the top,
and every proof looks there when the top holds none. A claim looks at its location for a marker
in the other place, and takes its own back if there is one. Such a store refuses the top throughout
(a table bucket takes no file outside a table's own directories), so a claim at the top looks above
and below it only for markers at the top, as it always did; a claim in the directory looks for both.

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

from lance_iceberg_ns.errors.storage import StoreRefused
from lance_iceberg_ns.storage import files, trees
from lance_iceberg_ns.storage.locations import is_local

MARKER = ".lance-iceberg-ns-owner.json"
# Where the marker is on a store that refuses a file at a table's top (see the module docstring):
# a directory name of the form table buckets leave to a format (``_`` and lowercase letters).
MARKER_DIRECTORY = "_lance_iceberg_ns"
MARKER_IN_DIRECTORY = f"{MARKER_DIRECTORY}/owner.json"
MARKER_ENTRIES = (MARKER, MARKER_DIRECTORY)  # what a listing of a location shows of its marker


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
    return None if found is None else found.owner


@dataclass(frozen=True)
class _Held:
    """A marker as read or written: what it says, its tag (a rewrite on it writes over exactly that
    marker), and where it is under its location (``MARKER`` or ``MARKER_IN_DIRECTORY``)."""

    owner: Owner
    written: files.Written | None
    name: str = MARKER


def marker_names(location: str) -> tuple[str, ...]:
    """Where a marker may be under ``location``: at its top, and on an object store also in
    ``MARKER_DIRECTORY``."""
    return (MARKER,) if is_local(location) else (MARKER, MARKER_IN_DIRECTORY)


def _read_marker(
    location: str, storage_options: Mapping[str, str], names: tuple[str, ...] | None = None
) -> _Held | None:
    """The marker at ``location``: at its top, else in ``MARKER_DIRECTORY`` (of ``names``, when
    given). A store that takes no file at the top refuses a read there too (403, not 404): only
    when it refuses every place is that the credentials' refusal, and raised (``StoreRefused``)."""
    refused: StoreRefused | None = None
    answered = False
    for name in marker_names(location) if names is None else names:
        try:
            found = _read_one(location, name, storage_options)
        except StoreRefused as exc:
            refused = refused or exc
            continue
        if found is not None:
            return found
        answered = True  # the credentials reach the location: a refused place holds no marker
    if refused is not None and not answered:
        raise refused
    return None


def _read_one(location: str, name: str, storage_options: Mapping[str, str]) -> _Held | None:
    try:
        found = files.read_tagged(location, name, storage_options)
    except files.NotOpened:  # a symbolic link where the marker should be: nobody's valid claim
        return _Held(Owner("", None, (), "(a symbolic link in place of the ownership marker)"), None, name)
    return None if found is None else _Held(Owner.from_json(found[0]), found[1], name)


def _create_marker(location: str, owner: Owner, storage_options: Mapping[str, str]) -> _Held | None:
    """Write a new marker, only if there is none (None if there was one): at the top of the
    location, or in ``MARKER_DIRECTORY`` where the store refuses the top. A claim that finds the
    other place taken takes its own marker back: of two claims one in each place, neither wins."""
    data = owner.to_json()
    try:
        written, name = files.create_file(location, MARKER, data, storage_options), MARKER
    except StoreRefused:
        if is_local(location):
            raise
        written, name = files.create_file(location, MARKER_IN_DIRECTORY, data, storage_options), MARKER_IN_DIRECTORY
    if written is None:
        return None
    others = tuple(other for other in marker_names(location) if other != name)
    if others and _marker_in(location, others, storage_options):
        _remove_marker(location, name, storage_options)
        return None
    return _Held(owner, written, name)


def _looked_for(held: _Held) -> tuple[str, ...]:
    """The places a claim whose marker is ``held`` looks for other tables' markers around it."""
    return (MARKER,) if held.name == MARKER else (MARKER, MARKER_IN_DIRECTORY)


def _marker_in(location: str, names: tuple[str, ...], storage_options: Mapping[str, str]) -> bool:
    """Whether a marker is at one of ``names`` under ``location``; a place the store refuses to
    read (where it takes no file) holds none."""
    try:
        return _read_marker(location, storage_options, names) is not None
    except StoreRefused:
        return False


def _replace_marker(location: str, held: _Held, owner: Owner, storage_options: Mapping[str, str]) -> bool:
    """Write ``owner`` over the marker ``held``, whole or not at all: a proof reading it meanwhile
    sees the old or the new (False if it is gone: a purge that deleted the location meanwhile must
    not see it made again; on an object store, also if it changed since ``held`` was read or written)."""
    return files.replace_file(location, held.name, owner.to_json(), storage_options, held.written)


def _remove_marker(location: str, name: str, storage_options: Mapping[str, str]) -> None:
    files.delete_file(location, name, storage_options)


def _markers_above(
    location: str, top: str, storage_options: Mapping[str, str], names: tuple[str, ...] = (MARKER,)
) -> str | None:
    """The nearest directory strictly between ``top`` and ``location`` that holds a marker at one
    of ``names``. Looking in ``MARKER_DIRECTORY`` too, a directory where the store refuses to read
    a marker holds none (SeaweedFS's table buckets take files only inside a table's own directory)."""
    tolerant = MARKER_IN_DIRECTORY in names
    parent = location.rsplit("/", 1)[0]
    while len(parent) > len(top.rstrip("/")) and parent.startswith(top.rstrip("/")):
        found = _marker_in(parent, names, storage_options) if tolerant else _read_marker(parent, storage_options, names)
        if found:
            return parent
        parent = parent.rsplit("/", 1)[0]
    return None


def _markers_below(location: str, storage_options: Mapping[str, str], names: tuple[str, ...] = (MARKER,)) -> bool:
    """Whether a directory strictly under ``location`` holds a marker at one of ``names`` (links
    are not followed)."""
    folder = MARKER_DIRECTORY if MARKER_IN_DIRECTORY in names else ""
    return trees.holds_below(location, MARKER, storage_options, folder)


def check_free(location: str, top: str, storage_options: Mapping[str, str]) -> None:
    """What ``claim`` checks, without writing: raises ``PermissionDeniedError`` when an entry owns
    ``location``, a place above it or below it."""
    names = marker_names(location)
    held = read_owner(location, storage_options)
    conflict = _markers_above(location, top, storage_options, names)
    inside = None if held or conflict else _markers_below(location, storage_options, names)
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
    name: str = MARKER  # where the marker is under the location

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
        around = _looked_for(written)
        conflict = _markers_above(location, top, storage_options, around)
        inside = None if conflict else _markers_below(location, storage_options, around)
    except BaseException:
        made.undo()
        raise
    if conflict or inside:
        made.undo()
        where = "inside the location of another table" if conflict else "around the location of another table"
        raise PermissionDeniedError(f"The location {location!r} lies {where}; table locations must not overlap")
    return replace(made, written=written.written, name=written.name)


def stamp(location: str, owner: Owner, storage_options: Mapping[str, str], claimed: Claim | None = None) -> bool:
    """Complete a claim (``claimed``, when made by this process: its marker is then written over
    on the tag it was created with, without a look) with the table UUID the catalog gave the entry.
    False when the marker is no longer the claim's (taken meanwhile): the claim is lost."""
    if claimed is not None:
        return _replace_marker(location, _Held(claimed.owner, claimed.written, claimed.name), owner, storage_options)
    found = _read_marker(location, storage_options)
    return found is not None and _replace_marker(location, found, owner, storage_options)


def still_claimed(claimed: Claim) -> bool:
    """Whether the marker at a claim's location is still the one the claim wrote."""
    return read_owner(claimed.location, claimed.storage_options) == claimed.owner


def let_go(location: str, entry: Entry, storage_options: Mapping[str, str]) -> bool:
    """Before the files of an entry that was dropped from the catalog are deleted: the marker,
    if it still names the entry, marked as releasing (on the tag it was read with), so that no
    register adopts the location meanwhile. False (delete nothing) when it no longer names the
    entry: another entry claimed the location since."""
    found = _read_marker(location, storage_options)
    if found is None or not found.owner.names(entry) or found.owner.releasing:
        return False  # another's now, or another removal has it
    return _replace_marker(location, found, replace(found.owner, releasing=uuid.uuid4().hex), storage_options)


def release(location: str, entry: Entry, storage_options: Mapping[str, str]) -> None:
    """Remove the marker if it names this entry (a deregistered table's data belongs to nobody):
    marked as being let go first, on the marker read, so that a register that adopted the
    location meanwhile keeps its own marker."""
    found = _read_marker(location, storage_options)
    if found is not None and found.owner.names(entry):
        _remove_over(location, found, storage_options)


def _remove_over(location: str, found: _Held, storage_options: Mapping[str, str]) -> bool:
    """Remove the marker ``found`` (and its tag) if it is still there and nobody else is letting
    it go: marked with a token of this removal first, on the tag, then deleted. A stamp, a
    let-go or another removal racing this one then fails, and no marker is removed that another
    claim wrote since."""
    if found.owner.releasing:
        return False  # another removal or deletion has it
    if not _replace_marker(location, found, replace(found.owner, releasing=uuid.uuid4().hex), storage_options):
        return False
    _remove_marker(location, found.name, storage_options)
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
    if found is None or found.owner != expected:
        return False
    if new is None:
        return _remove_over(location, replace(found, owner=replace(found.owner, releasing="")), storage_options)
    return _replace_marker(location, found, new, storage_options)


def markers_under(top: str, storage_options: Mapping[str, str]) -> Iterator[tuple[str, Owner]]:
    """(location, marker) for every ownership marker under ``top`` (links are not followed; on a
    local disk not inside a location that holds one: a table's location holds no other table)."""
    for location in trees.directories_holding(top, MARKER, storage_options, MARKER_DIRECTORY):
        owner = read_owner(location, storage_options)
        if owner is not None:
            yield location, owner
