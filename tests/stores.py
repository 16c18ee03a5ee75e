"""Where a test's tables live: a local disk or an S3 bucket (SeaweedFS), behind one small interface,
so that the same test runs on both (fixture ``store`` in conftest.py).

A test written for both stores names locations with ``store.at(...)`` (a path, or an ``s3://`` URI)
and looks at files through ``keys``/``exists``/``read``/``write``/``delete`` instead of ``os`` and
``pathlib``; what only a local disk has (links, permissions, ``O_EXCL``) stays in disk-only tests.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import lance
import obstore
import pyarrow as pa
from obstore.exceptions import NotFoundError

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.config.storage_keys import file_io_properties
from lance_iceberg_ns.storage import files
from lance_iceberg_ns.storage.locations import is_local, local_path

MISSING = (FileNotFoundError, NotFoundError)  # a local file's, an object's


@dataclass(frozen=True)
class Store:
    """A fresh root for one test, on a local disk (``kind == "disk"``) or on S3 (``"s3"``).

    ``properties`` are the namespace properties the store needs (``storage.*``: empty on a disk),
    ``storage_options`` the same options as Lance and ``lance_iceberg_ns.storage.files`` take them."""

    kind: str
    root: str
    storage_options: dict[str, str] = field(default_factory=dict)

    @property
    def properties(self) -> dict[str, str]:
        return {f"storage.{key}": value for key, value in self.storage_options.items()}

    @property
    def file_io_properties(self) -> dict[str, str]:
        """pyiceberg FileIO properties that reach the store (empty on a disk), as the bridge makes them."""
        return file_io_properties(self.storage_options)

    def namespace(self, endpoint: str, **properties: str) -> IcebergLanceNamespace:
        """The bridge on the catalog at ``endpoint`` with its tables on this store (a context manager)."""
        return IcebergLanceNamespace(endpoint=endpoint, root=self.root, **self.properties, **properties)

    def at(self, *parts: str) -> str:
        """A location under the root (``at()`` is the root itself)."""
        return "/".join([self.root.rstrip("/"), *parts])

    def beside(self, name: str) -> str:
        """A location next to the root, not under it (for sources and allowed locations of a test)."""
        return f"{self.root.rstrip('/').rsplit('/', 1)[0]}/{name}" if self.kind == "disk" else f"{self.root}-{name}"

    def contents(self, location: str) -> dict[str, str]:
        """Every file under ``location`` with a digest of its bytes: to show that nothing there changed."""
        return {key: hashlib.sha256(self.read(f"{location}/{key}") or b"").hexdigest() for key in self.keys(location)}

    def uri(self, location: str) -> str:
        """``location`` as a URI (a path as ``file://``)."""
        return f"file://{location}" if is_local(location) else location

    def credentials_environment(self) -> dict[str, str]:
        """The store's keys as the environment variables a client finds them in when it is given
        none (a server vends no secret); empty on a disk."""
        names = {"aws_access_key_id": "AWS_ACCESS_KEY_ID", "aws_secret_access_key": "AWS_SECRET_ACCESS_KEY"}
        return {names[key]: value for key, value in self.storage_options.items() if key in names}

    def make_directory(self, location: str) -> None:
        """An empty directory at ``location`` on a disk; nothing on S3, where an empty prefix is nothing."""
        if is_local(location):
            os.makedirs(local_path(location))

    def keys(self, location: str | None = None) -> list[str]:
        """Every file under ``location`` (the root by default), as sorted paths relative to it."""
        location = self.root if location is None else location
        if is_local(location):
            top = Path(local_path(location))
            return sorted(str(path.relative_to(top)) for path in top.rglob("*") if path.is_file() or path.is_symlink())
        store, key = files.object_store(location, self.storage_options)
        prefix = f"{key}/" if key else ""
        return sorted(item["path"][len(prefix) :] for batch in obstore.list(store, prefix=prefix) for item in batch)

    def entries(self, location: str) -> list[str]:
        """Every file under ``location``, and on a disk every directory too, empty ones as well (an
        object store has no directories): to show that nothing at all was made there."""
        if is_local(location):
            top = Path(local_path(location))
            return sorted(str(path.relative_to(top)) for path in top.rglob("*"))
        return self.keys(location)

    def exists(self, path: str) -> bool:
        """Whether ``path`` is a file, or a directory (a prefix) holding any."""
        if is_local(path):
            return os.path.lexists(local_path(path))
        store, key = files.object_store(path, self.storage_options)
        try:
            obstore.head(store, key)
            return True
        except MISSING:
            return bool(self.keys(path))

    def read(self, path: str) -> bytes | None:
        """The bytes of the file ``path``; None when there is none."""
        if is_local(path):
            try:
                return Path(local_path(path)).read_bytes()
            except MISSING:
                return None
        store, key = files.object_store(path, self.storage_options)
        try:
            return bytes(obstore.get(store, key).bytes())
        except MISSING:
            return None

    def write(self, path: str, data: bytes) -> None:
        """Write the file ``path`` (over any there; on a disk, the directories to it made)."""
        if is_local(path):
            os.makedirs(os.path.dirname(local_path(path)), exist_ok=True)
            Path(local_path(path)).write_bytes(data)
            return
        store, key = files.object_store(path, self.storage_options)
        obstore.put(store, key, data)

    def delete(self, path: str) -> None:
        """Delete the file ``path``, or everything under it, if there is anything."""
        if is_local(path):
            target = local_path(path)
            if os.path.isdir(target) and not os.path.islink(target):
                shutil.rmtree(target)
            elif os.path.lexists(target):
                os.remove(target)
            return
        store, key = files.object_store(path, self.storage_options)
        # S3 answers a delete of a missing key as done: the key itself goes too when it is a file
        obstore.delete(store, [key, *(f"{key}/{name}" for name in self.keys(path))])

    def write_lance(self, location: str, rows: int = 3, **options: object) -> lance.LanceDataset:
        """A dataset of ``rows`` rows (column ``id``) written straight to ``location``, by no namespace."""
        return lance.write_dataset(
            pa.table({"id": list(range(rows))}), location, storage_options=self.storage_options, **options
        )

    def dataset(self, location: str, **options: object) -> lance.LanceDataset:
        """The dataset at ``location``, opened by no namespace."""
        return lance.dataset(location, storage_options=self.storage_options, **options)


def disk(root: Path) -> Store:
    return Store("disk", str(root))


def s3(root: str, storage_options: Mapping[str, str]) -> Store:
    return Store("s3", root, dict(storage_options))
