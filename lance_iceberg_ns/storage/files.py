"""The files of a table's location, on a local disk or an object store: the one module through
which the bridge reads, writes, lists, moves, copies and deletes them (Lance's own files are
read and written by pylance; the catalog's metadata by pyiceberg).

A location is local when ``locations.is_local`` says so: a path, or a ``file://`` URI (read as
``locations.local_path`` reads it). Local files are handled with the operating system's own
calls, where a check and a change can be one step (``O_EXCL``, a hard link, a rename over).
On an object store every object is read, written, listed and deleted through obstore (Lance's own object_store,
configured with Lance's option names as Lance reads them): a create is a conditional put
(``If-None-Match: *``) and a replace a put on the e-tag it read, each one request the store
decides, never a look followed by a write, and nothing is ever renamed. Listings are of one
prefix at a time (a table's own directory, or one level of a tree), never of a whole root.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
import shutil
import stat
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, cast

import obstore
import obstore.exceptions as obstore_errors
from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    NotFoundError,
    PreconditionError,
)

from lance_iceberg_ns.errors.storage import StoreRefused, StoreRejected, StoreUnavailable
from lance_iceberg_ns.storage.locations import is_local, local_path
from lance_iceberg_ns.storage.stores import object_store

ICEBERG_METADATA_DIRECTORY = "metadata"  # where the catalog writes the companion table's metadata
VERSIONS_DIRECTORY = "_versions"  # Lance's manifests (``versions.manifests`` names what is inside)
# What a table's location holds of its own: Lance's directories, then its manifests (a dataset
# exists while they do: deleted last, a declare racing the deletion is refused rather than given a
# location whose new files this deletion would remove), the catalog's metadata, the owner's marker.
LANCE_ENTRIES = ("data", "_deletions", "_indices", "_transactions", "_refs", "tree")
OWNED_ENTRIES = (*LANCE_ENTRIES, VERSIONS_DIRECTORY, ICEBERG_METADATA_DIRECTORY)


def key_under(key: str, name: str) -> str:
    return f"{key}/{name}" if key else name


_MISSING = (FileNotFoundError, NotFoundError)


@contextlib.contextmanager
def store_failures() -> Iterator[None]:
    """The store's other failures as ``OSError``, as the local calls raise them, so that callers
    handle one kind: refused credentials as ``StoreRefused``, a request the store turned down as
    ``StoreRejected``, a missing object as ``FileNotFoundError``, anything else (unreachable,
    misconfigured) as ``StoreUnavailable``. The
    message is the first line only: the rest is the request in debug form."""
    try:
        yield
    except (BaseError, FileNotFoundError) as exc:
        first = f"{type(exc).__name__}: {exc}".splitlines()[0]
        text = str(exc)
        if isinstance(exc, (obstore_errors.PermissionDeniedError, obstore_errors.UnauthenticatedError)):
            raise StoreRefused(first) from None
        if _REFUSED_STATUS.search(text):
            raise StoreRefused(first) from None
        if isinstance(exc, FileNotFoundError):  # obstore's not found: let callers tell it apart
            raise FileNotFoundError(first) from None
        if isinstance(exc, obstore_errors.InvalidPathError) or _REJECTED_STATUS.search(text):
            raise StoreRejected(first) from None
        if "builder error" in text:  # what reqwest says of an http:// URL it was not allowed
            first += " (an http:// endpoint needs the storage option allow_http=true)"
        raise StoreUnavailable(first) from None


_REFUSED_STATUS = re.compile(r"status code: 40[13]\b")
_REJECTED_STATUS = re.compile(r"status code: 4\d\d\b")


class NotOpened(OSError):
    """A local file that is there but was not opened: a symbolic link in its place is never followed."""


def move_unless_taken(location: str, source: str, target: str, storage_options: Mapping[str, str]) -> bool:
    """Move the file ``source`` to ``target`` (both relative to ``location``) unless ``target``
    exists: False, nothing moved. The check and the move are one step: a hard link on a local disk
    (as Lance commits there), a conditional put of the bytes on an object store (as Lance commits
    there too), then the source deleted. A reader never sees the target half written."""
    return _publish_unless_taken(location, source, target, storage_options, keep_source=False)


def copy_unless_taken(location: str, source: str, target: str, storage_options: Mapping[str, str]) -> bool:
    """Copy the file ``source`` to ``target`` (both relative to ``location``) unless ``target``
    exists (False: nothing copied), in one step as ``move_unless_taken`` moves."""
    return _publish_unless_taken(location, source, target, storage_options, keep_source=True)


def _publish_unless_taken(
    location: str, source: str, target: str, storage_options: Mapping[str, str], keep_source: bool
) -> bool:
    if is_local(location):
        base = local_path(location)
        source_path, target_path = _under(base, source), _under(base, target)
        if keep_source:  # a copy under a name of its own, then linked into place
            interim = f"{target_path}.{uuid.uuid4().hex}.copying"
            shutil.copyfile(source_path, interim)
            try:
                return _link_unless_taken(interim, target_path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(interim)
        moved = _link_unless_taken(source_path, target_path)
        if moved:
            os.unlink(source_path)
        return moved
    with store_failures():
        store, key = object_store(location, storage_options)
        data = bytes(obstore.get(store, key_under(key, source)).bytes())
        try:
            obstore.put(store, key_under(key, target), data, mode="create")
        except AlreadyExistsError:
            return False
        if not keep_source:
            with contextlib.suppress(*_MISSING):
                obstore.delete(store, key_under(key, source))
    return True


def _link_unless_taken(source: str, target: str) -> bool:
    try:
        os.link(source, target)
    except FileExistsError:
        return False
    except OSError:  # a file system without hard links: a look, then a copy renamed into place
        if os.path.lexists(target):
            return False
        interim = f"{target}.{uuid.uuid4().hex}.copying"
        shutil.copyfile(source, interim)
        os.replace(interim, target)
    return True


# --- one file directly under a location (the ownership marker) -------------------------------------


def read_file(location: str, name: str, storage_options: Mapping[str, str]) -> bytes | None:
    """The bytes of the file ``name`` directly under ``location``; None when there is none.
    Raises ``NotOpened`` for a local file that cannot be opened as one (a symbolic link in its
    place, never followed)."""
    found = read_tagged(location, name, storage_options)
    return None if found is None else found[0]


def read_tagged(location: str, name: str, storage_options: Mapping[str, str]) -> tuple[bytes, Written] | None:
    """``read_file``, with the tag of what was read: a replace given it writes only over those bytes."""
    if is_local(location):
        try:
            fd = os.open(_under(local_path(location), name), os.O_RDONLY | os.O_NOFOLLOW)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise NotOpened(exc.errno, exc.strerror) from exc
        with os.fdopen(fd, "rb") as handle:
            return handle.read(), _local_tag(os.fstat(handle.fileno()))
    with store_failures():
        store, key = object_store(location, storage_options)
        try:
            got = obstore.get(store, key_under(key, name))
        except _MISSING:
            return None
        return bytes(got.bytes()), _tag(got.meta)


def _local_tag(status: os.stat_result) -> Written:
    """A local file's tag: its inode and last write (a replace puts a new inode in its place)."""
    return Written(f"{status.st_ino}-{status.st_mtime_ns}")


@dataclass(frozen=True)
class Written:
    """A file as the store tags it when written or read: its e-tag (S3, Azure) and generation
    (GCS); on a local disk its inode and last write. A replace given it writes only over that file."""

    e_tag: str | None = None
    version: str | None = None


def create_file(location: str, name: str, data: bytes, storage_options: Mapping[str, str]) -> Written | None:
    """Create the file ``name`` under ``location`` (and, on a local disk, the directories to it)
    only if there is none: None, nothing written, when there is one. The check and the write are
    one step: ``O_EXCL`` on a local disk (links not followed), a conditional put on an object store
    (of two creates in the same instant, exactly one succeeds)."""
    if is_local(location):
        os.makedirs(local_path(location), exist_ok=True)
        try:
            flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_CREAT | os.O_EXCL
            fd = os.open(_under(local_path(location), name), flags, 0o644)
        except FileExistsError:
            return None
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            return _local_tag(os.fstat(fd))
    with store_failures():
        store, key = object_store(location, storage_options)
        try:
            put = obstore.put(store, key_under(key, name), data, mode="create")
        except AlreadyExistsError:
            return None
        except _MISSING as exc:  # not found, answering a write: the bucket (or container)
            raise StoreUnavailable(f"No bucket or container for {location}: {str(exc).splitlines()[0]}") from None
    return Written(put["e_tag"], put["version"])


def replace_file(
    location: str, name: str, data: bytes, storage_options: Mapping[str, str], written: Written | None = None
) -> bool:
    """Write the file ``name`` under ``location`` over the one there, whole or not at all (a reader
    meanwhile sees the old bytes or the new), only while it is there: False, nothing written, once
    it or the location is gone (a purge that deleted the location meanwhile must not see it made
    again). With ``written`` (a create's or a read's tag), only over the file so tagged. On an
    object store the write is a put on that tag (or on the e-tag read just before), which the store
    decides: a file deleted or replaced in between is not written over."""
    if is_local(location):
        target = _under(local_path(location), name)
        try:
            status = os.lstat(target)
        except FileNotFoundError:
            return False
        if written is not None and written.e_tag and _local_tag(status) != written:
            return False  # replaced since it was read
        staged = f"{target}.{uuid.uuid4().hex}"
        try:
            with open(staged, "xb") as handle:
                handle.write(data)
        except FileNotFoundError:  # the location is gone
            return False
        os.replace(staged, target)
        return True
    with store_failures():
        store, key = object_store(location, storage_options)
        target = key_under(key, name)
        try:
            seen = written if written is not None and written.e_tag else _tag(obstore.head(store, target))
            # the e-tag for S3 and Azure, the generation (version) for GCS
            update = {"e_tag": seen.e_tag, **({"version": seen.version} if seen.version else {})}
            obstore.put(store, target, data, mode=update)  # type: ignore[arg-type]
        except (*_MISSING, PreconditionError):
            return False
    return True


def _tag(meta: Any) -> Written:
    return Written(meta["e_tag"], meta["version"])


def delete_file(location: str, name: str, storage_options: Mapping[str, str]) -> None:
    """Delete the file ``name`` under ``location`` if it is there (on an object store, a failing
    delete is let be)."""
    if is_local(location):
        with contextlib.suppress(FileNotFoundError):
            os.remove(_under(local_path(location), name))
        return
    with contextlib.suppress(OSError), store_failures():
        store, key = object_store(location, storage_options)
        with contextlib.suppress(*_MISSING):
            obstore.delete(store, key_under(key, name))


def _under(path: str, name: str) -> str:
    return f"{path.rstrip('/')}/{name}"


# --- any file of a location, by its path relative to it ---------------------------------------------


@dataclass(frozen=True)
class StoredFile:
    """A file found under a location: its path relative to what was listed (``/``-separated), its
    size and when it was last written (seconds since the epoch)."""

    path: str
    size: int
    modified: float

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


def list_files(
    location: str, directory: str, storage_options: Mapping[str, str], recursive: bool = False
) -> list[StoredFile]:
    """The files directly under ``location/directory`` (with ``recursive``, anywhere under it),
    paths relative to that directory; none when it is not there. Links are not followed, and a
    file moved or deleted while the directory is read (a manifest finalized by another writer) is
    not listed. On an object store, one paged listing of that prefix alone."""
    if is_local(location):
        top = _under(local_path(location), directory) if directory else local_path(location)
        found = []
        for folder, subfolders, names in os.walk(top, followlinks=False):
            relative = os.path.relpath(folder, top)
            for name in names:
                try:
                    status = os.lstat(os.path.join(folder, name))
                except (FileNotFoundError, NotADirectoryError):  # moved or deleted since it was listed
                    continue
                if stat.S_ISREG(status.st_mode):
                    path = name if relative == "." else f"{relative}/{name}"
                    found.append(StoredFile(path, status.st_size, status.st_mtime))
            if not recursive:
                subfolders.clear()
        return found
    with store_failures():
        store, key = object_store(location, storage_options)
        prefix = key_under(key, directory.strip("/")) if directory else key
        if recursive:
            listed: Sequence[Any] = [meta for batch in obstore.list(store, prefix=prefix) for meta in batch]
        else:
            listed = obstore.list_with_delimiter(store, prefix=prefix)["objects"]
        return [_stored(meta, prefix) for meta in listed]


def _stored(meta: Any, prefix: str) -> StoredFile:
    relative = meta["path"][len(prefix) :].lstrip("/") if prefix else meta["path"]
    return StoredFile(relative, int(meta["size"]), meta["last_modified"].timestamp())


def stat_files(location: str, paths: Sequence[str], storage_options: Mapping[str, str]) -> list[StoredFile | None]:
    """For each of ``paths`` (relative to ``location``), the file there, or None when there is
    none (or something that is not a file: a directory, a link)."""
    if is_local(location):
        found: list[StoredFile | None] = []
        for path in paths:
            try:
                status = os.lstat(_under(local_path(location), path))
            except (FileNotFoundError, NotADirectoryError):
                found.append(None)
                continue
            regular = stat.S_ISREG(status.st_mode)
            found.append(StoredFile(path, status.st_size, status.st_mtime) if regular else None)
        return found
    with store_failures():
        store, key = object_store(location, storage_options)
        looked: list[StoredFile | None] = []
        for path in paths:
            try:
                meta = obstore.head(store, key_under(key, path))
            except _MISSING:
                looked.append(None)
                continue
            looked.append(StoredFile(path, int(meta["size"]), meta["last_modified"].timestamp()))
        return looked


def delete_files(location: str, paths: Sequence[str], storage_options: Mapping[str, str]) -> None:
    """Delete the files ``paths`` (relative to ``location``); those not there are let be. On an
    object store, in bulk requests (up to a thousand keys each)."""
    if is_local(location):
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.remove(_under(local_path(location), path))
        return
    with store_failures():
        store, key = object_store(location, storage_options)
        keys = [key_under(key, path) for path in paths]
        for start in range(0, len(keys), _BULK_DELETE):
            with contextlib.suppress(*_MISSING):
                obstore.delete(store, keys[start : start + _BULK_DELETE])


_BULK_DELETE = 1000  # S3's limit of keys per DeleteObjects request


def write_file(location: str, path: str, data: BinaryIO | Iterator[bytes], storage_options: Mapping[str, str]) -> None:
    """Write a new file ``path`` under ``location``, a place the writer has claimed (an import's
    copy): a local file is created exclusively (``FileExistsError`` over one that is there), with
    the directories to it; an object is written whole (in parts, when large) or not at all."""
    if is_local(location):
        target = _under(local_path(location), path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as writing:
            if hasattr(data, "read"):  # a file (itself iterable, but by lines)
                shutil.copyfileobj(cast(BinaryIO, data), writing, COPY_CHUNK_BYTES)
            else:
                for chunk in data:
                    writing.write(chunk)
        return
    with store_failures():
        store, key = object_store(location, storage_options)
        obstore.put(store, key_under(key, path), data, chunk_size=COPY_CHUNK_BYTES)


COPY_CHUNK_BYTES = 8 * 1024 * 1024


def copy_file(
    source: str, path: str, source_options: Mapping[str, str], target: str, target_options: Mapping[str, str]
) -> None:
    """Copy the file ``path`` under ``source`` to the same path under ``target`` (as ``write_file``
    writes), streamed: an object is never held whole in memory."""
    if is_local(source):
        with open(_under(local_path(source), path), "rb") as reading:
            write_file(target, path, reading, target_options)
        return
    with store_failures():
        store, key = object_store(source, source_options)
        if is_local(target):
            chunks = obstore.get(store, key_under(key, path)).stream(min_chunk_size=COPY_CHUNK_BYTES)
            write_file(target, path, (bytes(chunk) for chunk in chunks), target_options)
            return
        into, target_key = object_store(target, target_options)

        async def stream() -> None:  # one store's download fed to another's upload, in one runtime
            got = await obstore.get_async(store, key_under(key, path))
            await obstore.put_async(into, key_under(target_key, path), got, chunk_size=COPY_CHUNK_BYTES)

        asyncio.run(stream())


def same_contents(location: str, first: str, second: str, storage_options: Mapping[str, str]) -> bool:
    """Whether two small files (manifests) under ``location`` hold the same bytes."""
    one = read_file(location, first, storage_options)
    return one is not None and one == read_file(location, second, storage_options)


# --- local directories a claim makes and takes back --------------------------------------------


def is_link(location: str) -> bool:
    """Whether a local location is a symbolic link (never so on an object store)."""
    return is_local(location) and os.path.islink(local_path(location))


def has_entry(location: str, name: str) -> bool:
    """Whether ``name`` is directly under ``location``, a link included (always so on an object
    store, whose directories are not made or removed)."""
    return not is_local(location) or os.path.lexists(os.path.join(local_path(location), name))


def first_missing_directory(location: str) -> str | None:
    """The topmost directory of a local location that is not there yet (None when the location is,
    or is not local)."""
    if not is_local(location) or os.path.exists(local_path(location)):
        return None
    missing = local_path(location)
    while not os.path.exists(missing.rsplit("/", 1)[0] or "/"):
        missing = missing.rsplit("/", 1)[0]
    return missing


def remove_empty_directories(location: str, up_to: str) -> None:
    """Remove the local directory ``location`` and those above it up to ``up_to`` (included), each
    only while empty: a directory someone else put something in stays, and so do those above it."""
    folder = local_path(location)
    while len(folder) >= len(up_to):
        try:
            os.rmdir(folder)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):  # someone else's now
                return
            # never made (missing, or a name too long): its parent may have been
        folder = folder.rsplit("/", 1)[0]


def remove_empty_entries(location: str, names: Sequence[str]) -> None:
    """Remove the directories ``names`` directly under a local location, each only while empty
    (another writer's files may be in one); nothing on an object store, whose directories are not
    made or removed."""
    if not is_local(location):
        return
    for name in names:
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(local_path(location), name))


def delete_catalog_metadata(location: str) -> None:
    """Delete the Iceberg metadata files (compressed or not) under a local location's ``metadata/``,
    and the directory once empty."""
    metadata = os.path.join(local_path(location), ICEBERG_METADATA_DIRECTORY)
    with contextlib.suppress(OSError):
        for name in os.listdir(metadata):
            if ".metadata.json" in name:
                os.remove(os.path.join(metadata, name))
        os.rmdir(metadata)


# --- a table's location as a whole -----------------------------------------------------------------


def may_hold_dataset(location: str) -> bool:
    """False when a local location certainly holds no Lance dataset (no ``_versions/``): an
    answer that opens nothing. True otherwise (an object store's location is not looked at)."""
    return not is_local(location) or os.path.isdir(os.path.join(local_path(location), VERSIONS_DIRECTORY))


def entries_at(location: str, storage_options: Mapping[str, str]) -> set[str] | None:
    """The names directly under ``location`` (files and directories); None when nothing is there.
    On an object store, those of the first page of its objects (one request: enough to tell an
    empty place, and the ownership marker, which sorts first); a prefix holding no object is not
    an entry, though some stores list one left behind by deleted objects."""
    if is_local(location):
        path = local_path(location)
        return set(os.listdir(path)) if os.path.isdir(path) and not os.path.islink(path) else None
    with store_failures():
        store, key = object_store(location, storage_options)
        first = next(iter(obstore.list(store, prefix=key or None, chunk_size=_PAGE)), [])
    prefix = f"{key}/" if key else ""
    return {meta["path"][len(prefix) :].split("/", 1)[0] for meta in first} - {""} or None


_PAGE = 1000  # objects an S3 listing answers in one request


def files_missing(location: str, storage_options: Mapping[str, str], paths: Sequence[str]) -> list[str]:
    """Which of ``paths`` (relative to ``location``, ``..`` resolved) are not files there: a look
    at each of a few, one listing of each directory holding them for more."""
    relative = [os.path.normpath(path) for path in paths]
    if len(relative) <= _FEW or is_local(location):
        looked = stat_files(location, relative, storage_options)
        return [path for path, found in zip(relative, looked, strict=True) if found is None]
    present: set[str] = set()
    for directory in sorted({path.rpartition("/")[0] for path in relative}):
        held = list_files(location, directory, storage_options)
        present |= {f"{directory}/{found.path}" if directory else found.path for found in held}
    return [path for path in relative if path not in present]


_FEW = 4  # looks at single files cost less than listings up to about this many


def is_empty_directory(location: str, storage_options: Mapping[str, str]) -> bool:
    """True when nothing is at ``location`` yet, or an empty directory (a file there is not); on
    an object store, when no object is under it (one listing)."""
    if is_local(location):
        path = local_path(location)
        if not os.path.lexists(path):
            return True
        return os.path.isdir(path) and not os.path.islink(path) and not os.listdir(path)
    return entries_at(location, storage_options) is None


def delete_owned_files(location: str, storage_options: Mapping[str, str], *markers: str) -> None:
    """Delete what a table's location holds of its own (``OWNED_ENTRIES`` in order, then
    ``markers``, wherever its marker may be), and the location itself once empty. Anything else
    under it is left alone, and
    symbolic links are removed as links, never followed. On an object store: one paged listing of
    the location, bulk deletes, and nothing left behind (no placeholder of an empty directory).
    The caller has proved that the entry owns the location."""
    if not is_local(location):
        held = list_files(location, "", storage_options, recursive=True)
        for entry in OWNED_ENTRIES:
            delete_files(location, [found.path for found in held if found.path.split("/")[0] == entry], storage_options)
        _delete_catalog_files_as_spelled(location, storage_options)
        delete_files(location, list(markers), storage_options)
        return
    root = local_path(location)
    for entry in (*OWNED_ENTRIES, *markers):
        path = os.path.join(root, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)  # removes links inside as links
        else:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                os.remove(path)
    with contextlib.suppress(OSError):  # only when nothing else is left
        os.rmdir(root)


def _delete_catalog_files_as_spelled(location: str, storage_options: Mapping[str, str]) -> None:
    """pyiceberg writes a table's metadata under its location as spelled, where Lance (and this
    module) decode it once: for a location with an escaped character, the catalog's ``metadata/``
    lies under a key prefix of its own, deleted here too."""
    spelled = location.split("://", 1)[1].partition("/")[2].strip("/")
    with store_failures():
        store, key = object_store(location, storage_options)
        if spelled == key:
            return
        prefix = key_under(spelled, ICEBERG_METADATA_DIRECTORY)
        keys = [meta["path"] for batch in obstore.list(store, prefix=prefix) for meta in batch]
        for start in range(0, len(keys), _BULK_DELETE):
            with contextlib.suppress(*_MISSING):
                obstore.delete(store, keys[start : start + _BULK_DELETE])
