"""The files of a table's location, on a local disk or an object store: the one module through
which the bridge reads, writes, lists, moves, copies and deletes them (Lance's own files are
read and written by pylance; the catalog's metadata by pyiceberg).

A location is local when ``locations.is_local`` says so: a path, or a ``file://`` URI (read as
``locations.local_path`` reads it). Local files are handled with the operating system's own
calls, where a check and a change can be one step (``O_EXCL``, a hard link, a rename over). On an
object store, the one file directly under a location (the ownership marker) is read, created and
replaced through obstore (Lance's own object_store): a create is a conditional put
(``If-None-Match: *``) and a replace a put on the e-tag it read, each one request the store
decides, never a look followed by a write. Listings and copies still go through pyarrow's file
systems.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import shutil
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import unquote

import obstore
import pyarrow.fs as pafs
from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    GenericError,
    NotFoundError,
    PreconditionError,
    UnknownConfigurationKeyError,
)
from obstore.store import ObjectStore, from_url

from lance_iceberg_ns.storage.locations import is_local, local_path

ICEBERG_METADATA_DIRECTORY = "metadata"  # where the catalog writes the companion table's metadata
VERSIONS_DIRECTORY = "_versions"  # Lance's manifests (``versions.manifests`` names what is inside)
# What a table's location holds of its own: Lance's directories, then its manifests (a dataset
# exists while they do: deleted last, a declare racing the deletion is refused rather than given a
# location whose new files this deletion would remove), the catalog's metadata, the owner's marker.
LANCE_ENTRIES = ("data", "_deletions", "_indices", "_transactions", "_refs", "tree")
OWNED_ENTRIES = (*LANCE_ENTRIES, VERSIONS_DIRECTORY, ICEBERG_METADATA_DIRECTORY)

# Lance (object_store) storage option → pyarrow S3FileSystem argument.
_S3_ARGUMENTS = {
    "aws_access_key_id": "access_key",
    "aws_secret_access_key": "secret_key",
    "aws_session_token": "session_token",
    "aws_region": "region",
    "aws_endpoint": "endpoint_override",
}


# Lance storage options that object_store takes as client options; the rest are the store's own
# configuration (the same names in Lance and in object_store), but for Lance's own bookkeeping.
_CLIENT_OPTIONS = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "connect_timeout",
        "timeout",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_url",
        "user_agent",
        "http1_only",
        "http2_only",
    }
)
_LANCE_ONLY_OPTIONS = frozenset({"expires_at_millis", "client_max_retries", "client_retry_timeout"})
DEFAULT_MAX_RETRIES = 3  # as Lance's client_max_retries: an unreachable store fails in seconds
DEFAULT_RETRY_TIMEOUT_SECONDS = 30.0


def object_store(location: str, storage_options: Mapping[str, str]) -> tuple[ObjectStore, str]:
    """An obstore store for the bucket (or container) of ``location``, and the key of ``location``
    in it, configured with the Lance storage options as Lance reads them: an option the store
    does not know is left out, an alias given beside its name is taken once, Lance's retry options
    bound the retries, and an S3 store without keys finds them as boto3 does (profiles, SSO)."""
    scheme, rest = location.split("://", 1)
    bucket, _, key = rest.partition("/")
    client = {k: v for k, v in storage_options.items() if k in _CLIENT_OPTIONS}
    config = {k: v for k, v in storage_options.items() if k not in _CLIENT_OPTIONS | _LANCE_ONLY_OPTIONS}
    retry = {
        "max_retries": int(storage_options.get("client_max_retries") or DEFAULT_MAX_RETRIES),
        "retry_timeout": timedelta(
            seconds=float(storage_options.get("client_retry_timeout") or DEFAULT_RETRY_TIMEOUT_SECONDS)
        ),
    }
    extra: dict[str, Any] = {}
    keys_given = {_plain_option(name) for name in config} & {"access_key_id", "skip_signature"}
    if scheme in ("s3", "s3a") and not keys_given and not os.environ.get("AWS_ACCESS_KEY_ID"):
        extra["credential_provider"] = _boto3_credentials()
    for _ in range(len(config) + 1):
        try:
            store = from_url(  # type: ignore[call-overload]
                f"{scheme}://{bucket}", config=config, client_options=client, retry_config=retry, **extra
            )
            return store, unquote(key).strip("/")
        except UnknownConfigurationKeyError as exc:  # another store's option, or Lance's alone
            unknown = _UNKNOWN_KEY.search(str(exc))
            if unknown is None or unknown[1] not in config:
                raise
            config.pop(unknown[1])
        except GenericError as exc:  # an option given by its name and by an alias
            duplicate = _DUPLICATE_KEY.search(str(exc))
            twins = [k for k in config if duplicate and _plain_option(k) == _plain_option(duplicate[1])]
            if len(twins) < 2:
                raise
            config.pop(twins[-1])
    raise AssertionError("unreachable: every pass drops an option or returns")


_UNKNOWN_KEY = re.compile(r"Configuration key: '([^']+)' is not valid")
_DUPLICATE_KEY = re.compile(r"Duplicate key (\S+) provided")


def _plain_option(name: str) -> str:
    """An option's name without its store prefix or ``_url`` (``aws_endpoint_url`` is ``endpoint``)."""
    for prefix in ("aws_", "google_", "azure_storage_", "azure_"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    return name.removesuffix("_url")


@functools.lru_cache(maxsize=1)
def _boto3_credentials() -> Any:
    """boto3's credential chain (profiles, SSO, containers), as Lance finds credentials; None
    without boto3, and obstore then reads the environment and the instance's metadata."""
    try:
        from obstore.auth.boto3 import Boto3CredentialProvider

        return Boto3CredentialProvider()
    except (ImportError, ValueError):  # no boto3, or no credentials it can find
        return None


def _key_under(key: str, name: str) -> str:
    return f"{key}/{name}" if key else name


_MISSING = (FileNotFoundError, NotFoundError)


@contextlib.contextmanager
def _store_failures() -> Iterator[None]:
    """The store's other failures (unreachable, refused, no credentials) as ``OSError``, as
    pyarrow's file systems raise them, so that callers handle one kind."""
    try:
        yield
    except BaseError as exc:
        # the first line only, and not the error itself as the cause: its debug text shows the request
        raise OSError(f"{type(exc).__name__}: {exc}".splitlines()[0]) from None


class NotOpened(OSError):
    """A local file that is there but was not opened: a symbolic link in its place is never followed."""


def filesystem_for(location: str, storage_options: Mapping[str, str]) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and the path of ``location`` on it, for listing a dataset's files
    (local paths, S3 with the Lance storage options, other stores through pyarrow)."""
    if is_local(location):
        return pafs.LocalFileSystem(), local_path(location)
    scheme, path = location.split("://", 1)
    if scheme in ("s3", "s3a"):
        arguments = {
            argument: storage_options[option] for option, argument in _S3_ARGUMENTS.items() if option in storage_options
        }
        if str(storage_options.get("allow_http", "")).lower() == "true":
            arguments["scheme"] = "http"
        return pafs.S3FileSystem(**arguments), unquote(path)  # keys as Lance decodes the URI
    filesystem, path = pafs.FileSystem.from_uri(location)
    return filesystem, path


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
    with _store_failures():
        store, key = object_store(location, storage_options)
        data = bytes(obstore.get(store, _key_under(key, source)).bytes())
        try:
            obstore.put(store, _key_under(key, target), data, mode="create")
        except AlreadyExistsError:
            return False
        if not keep_source:
            with contextlib.suppress(*_MISSING):
                obstore.delete(store, _key_under(key, source))
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


def same_contents(filesystem: pafs.FileSystem, first: str, second: str) -> bool:
    """Whether two small files (manifests) hold the same bytes."""
    sizes = [info.size for info in filesystem.get_file_info([first, second])]
    if sizes[0] is None or sizes[0] != sizes[1]:
        return False
    with filesystem.open_input_stream(first) as one, filesystem.open_input_stream(second) as other:
        return bool(one.read() == other.read())


# --- one file directly under a location (the ownership marker) -------------------------------------


def read_file(location: str, name: str, storage_options: Mapping[str, str]) -> bytes | None:
    """The bytes of the file ``name`` directly under ``location``; None when there is none.
    Raises ``NotOpened`` for a local file that cannot be opened as one (a symbolic link in its
    place, never followed)."""
    if is_local(location):
        try:
            fd = os.open(_under(local_path(location), name), os.O_RDONLY | os.O_NOFOLLOW)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise NotOpened(exc.errno, exc.strerror) from exc
        with os.fdopen(fd, "rb") as handle:
            return handle.read()
    with _store_failures():
        store, key = object_store(location, storage_options)
        try:
            return bytes(obstore.get(store, _key_under(key, name)).bytes())
        except _MISSING:
            return None


def create_file(location: str, name: str, data: bytes, storage_options: Mapping[str, str]) -> bool:
    """Create the file ``name`` under ``location`` (and, on a local disk, the directories to it)
    only if there is none: False, nothing written, when there is one. The check and the write are
    one step: ``O_EXCL`` on a local disk (links not followed), a conditional put on an object store
    (of two creates in the same instant, exactly one succeeds)."""
    if is_local(location):
        os.makedirs(local_path(location), exist_ok=True)
        try:
            flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_CREAT | os.O_EXCL
            fd = os.open(_under(local_path(location), name), flags, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return True
    with _store_failures():
        store, key = object_store(location, storage_options)
        try:
            obstore.put(store, _key_under(key, name), data, mode="create")
        except AlreadyExistsError:
            return False
    return True


def replace_file(location: str, name: str, data: bytes, storage_options: Mapping[str, str]) -> bool:
    """Write the file ``name`` under ``location`` over the one there, whole or not at all (a reader
    meanwhile sees the old bytes or the new), only while it is there: False, nothing written, once
    it or the location is gone (a purge that deleted the location meanwhile must not see it made
    again). On an object store the write is a put on the e-tag read just before: a file deleted or
    replaced in between is not written over."""
    if is_local(location):
        target = _under(local_path(location), name)
        if not os.path.lexists(target):
            return False
        staged = f"{target}.{uuid.uuid4().hex}"
        try:
            with open(staged, "xb") as handle:
                handle.write(data)
        except FileNotFoundError:  # the location is gone
            return False
        os.replace(staged, target)
        return True
    with _store_failures():
        store, key = object_store(location, storage_options)
        target = _key_under(key, name)
        try:
            seen = obstore.head(store, target)
            # the e-tag for S3 and Azure, the generation (version) for GCS
            update = {"e_tag": seen["e_tag"], **({"version": seen["version"]} if seen["version"] else {})}
            obstore.put(store, target, data, mode=update)  # type: ignore[arg-type]
        except (*_MISSING, PreconditionError):
            return False
    return True


def delete_file(location: str, name: str, storage_options: Mapping[str, str]) -> None:
    """Delete the file ``name`` under ``location`` if it is there (on an object store, a failing
    delete is let be)."""
    if is_local(location):
        with contextlib.suppress(FileNotFoundError):
            os.remove(_under(local_path(location), name))
        return
    with contextlib.suppress(OSError), _store_failures():
        store, key = object_store(location, storage_options)
        with contextlib.suppress(*_MISSING):
            obstore.delete(store, _key_under(key, name))


def holds_below(location: str, name: str, storage_options: Mapping[str, str]) -> bool:
    """Whether a directory strictly under ``location`` holds a file ``name`` (links are not followed)."""
    if is_local(location):
        top = local_path(location).rstrip("/")
        for folder, _subfolders, names in os.walk(top, followlinks=False):
            if name in names and folder.rstrip("/") != top:
                return True
        return False
    filesystem, path = filesystem_for(location, storage_options)
    listed = filesystem.get_file_info(pafs.FileSelector(path.rstrip("/"), recursive=True, allow_not_found=True))
    return any(info.base_name == name and info.path.rsplit("/", 1)[0] != path.rstrip("/") for info in listed)


def directories_holding(top: str, name: str, storage_options: Mapping[str, str]) -> Iterator[str]:
    """The locations under ``top`` (itself included) that hold a file ``name``, links not
    followed; on a local disk, none inside one that does."""
    if is_local(top):
        for folder, subfolders, names in os.walk(local_path(top), followlinks=False):
            if name in names:
                subfolders.clear()
                yield folder
        return
    filesystem, path = filesystem_for(top, storage_options)
    scheme = top.split("://", 1)[0]
    listed = filesystem.get_file_info(pafs.FileSelector(path.rstrip("/"), recursive=True, allow_not_found=True))
    for info in listed:
        if info.base_name == name:
            yield f"{scheme}://{info.path.rsplit('/', 1)[0]}"


def _under(path: str, name: str) -> str:
    return f"{path.rstrip('/')}/{name}"


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
    """The names directly under ``location``; None when nothing is there."""
    if is_local(location):
        path = local_path(location)
        return set(os.listdir(path)) if os.path.isdir(path) and not os.path.islink(path) else None
    filesystem, path = filesystem_for(location, storage_options)
    selector = pafs.FileSelector(path.rstrip("/"), recursive=False, allow_not_found=True)
    return {info.base_name for info in filesystem.get_file_info(selector)} or None


def files_missing(location: str, storage_options: Mapping[str, str], paths: Sequence[str]) -> list[str]:
    """Which of ``paths`` (relative to ``location``, ``..`` resolved) are not files there (one look)."""
    filesystem, root = filesystem_for(location, storage_options)
    wanted = [os.path.normpath(f"{root.rstrip('/')}/{path}") for path in paths]
    return [info.path for info in filesystem.get_file_info(wanted) if info.type != pafs.FileType.File]


def is_empty_directory(location: str, storage_options: Mapping[str, str]) -> bool:
    """True when nothing is at ``location`` yet, or an empty directory (a file there is not)."""
    if is_local(location):
        path = local_path(location)
        if not os.path.lexists(path):
            return True
        return os.path.isdir(path) and not os.path.islink(path) and not os.listdir(path)
    filesystem, path = filesystem_for(location, storage_options)
    if filesystem.get_file_info(path).type == pafs.FileType.File:
        return False
    selector = pafs.FileSelector(path.rstrip("/"), recursive=False, allow_not_found=True)
    return not filesystem.get_file_info(selector)


def delete_owned_files(location: str, storage_options: Mapping[str, str], marker: str) -> None:
    """Delete what a table's location holds of its own (``OWNED_ENTRIES``, then ``marker``), and
    the location itself once empty. Anything else under it is left alone, and symbolic links are
    removed as links, never followed. The caller has proved that the entry owns the location."""
    if not is_local(location):
        filesystem, root = filesystem_for(location, storage_options)
        for entry in OWNED_ENTRIES:
            with contextlib.suppress(FileNotFoundError):
                filesystem.delete_dir(f"{root.rstrip('/')}/{entry}")
        with contextlib.suppress(FileNotFoundError):
            filesystem.delete_file(f"{root.rstrip('/')}/{marker}")
        return
    root = local_path(location)
    for entry in (*OWNED_ENTRIES, marker):
        path = os.path.join(root, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)  # removes links inside as links
        else:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                os.remove(path)
    with contextlib.suppress(OSError):  # only when nothing else is left
        os.rmdir(root)
