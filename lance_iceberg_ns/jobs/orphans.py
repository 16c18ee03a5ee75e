"""Orphan files: files under a table's ``data/`` that no version of the table references, and
manifest copies under ``_versions/`` that nothing reads.

Distributed writes leave them behind when a task attempt fails or a speculative attempt loses:
the attempt wrote its fragments, but only the fragments the driver collected were committed. They
are never read, only stored. Deleting them is safe when two things hold: no version references the
file (all versions are kept, so time travel and restore still work), and the file is older than a
margin longer than any write in flight, since a running write's files are unreferenced until its
commit. Files are listed before the versions are read, so a commit landing in between only adds
references.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import lance
import pyarrow.fs as pafs
from lance_namespace import DescribeTableRequest

from lance_iceberg_ns.config.durations import duration_seconds
from lance_iceberg_ns.data.datasets import open_dataset
from lance_iceberg_ns.namespace import IcebergLanceNamespace, as_namespace
from lance_iceberg_ns.storage.files import VERSIONS_DIRECTORY, filesystem_for
from lance_iceberg_ns.versions.manifests import leftover_manifests

DATA_DIRECTORY = "data"
DEFAULT_MARGIN = "3d"  # as Iceberg's remove_orphan_files: far longer than any write stays open


@dataclass(frozen=True)
class OrphanFiles:
    """What a cleanup found (and, unless ``dry_run``, deleted): paths relative to the table root;
    ``skipped``: unreferenced files left because they were written within the margin."""

    location: str
    files: list[str]
    bytes: int
    dry_run: bool
    skipped: list[str] = field(default_factory=list)


def _referenced_data_files(dataset: lance.LanceDataset, location: str, storage_options: Mapping[str, str]) -> set[str]:
    """The data files every version of the dataset references (file names under ``data/``). A
    version the catalog does not name (``main`` rolled back past it, to be moved forward again
    perhaps) is read by location: its files are still needed."""
    referenced: set[str] = set()
    for version in dataset.versions():
        try:
            at_version = dataset.checkout_version(version["version"])
        except (OSError, ValueError):
            at_version = open_dataset(location, storage_options, version["version"])
        for fragment in at_version.get_fragments():
            referenced.update(data_file.path for data_file in fragment.metadata.files)
    return referenced


def find_orphan_files(
    location: str,
    storage_options: Mapping[str, str],
    older_than: str | float = DEFAULT_MARGIN,
    dry_run: bool = True,
    dataset: lance.LanceDataset | None = None,
) -> OrphanFiles:
    """The files of the dataset at ``location`` that nothing needs and that were last written more
    than ``older_than`` ago (a duration such as ``"3d"`` or seconds): data files no version
    references, and leftover manifest copies. Deleted unless ``dry_run``. ``dataset``: the
    dataset at ``location``, when the caller has it open."""
    margin = older_than if isinstance(older_than, (int, float)) else duration_seconds(older_than, "older_than")
    filesystem, root = filesystem_for(location, storage_options)
    root = root.rstrip("/")
    data = filesystem.get_file_info(pafs.FileSelector(f"{root}/{DATA_DIRECTORY}", allow_not_found=True))
    manifests = leftover_manifests(location, storage_options)
    referenced = _referenced_data_files(dataset or open_dataset(location, storage_options), location, storage_options)
    candidates = [(DATA_DIRECTORY, info) for info in data if info.base_name not in referenced]
    candidates += [(VERSIONS_DIRECTORY, info) for info in manifests]
    cutoff = time.time() - margin
    orphans: list[tuple[str, pafs.FileInfo]] = []
    young: list[tuple[str, pafs.FileInfo]] = []
    for directory, info in candidates:
        if info.type == pafs.FileType.File:
            old_enough = info.mtime is not None and info.mtime.timestamp() < cutoff
            (orphans if old_enough else young).append((directory, info))
    if not dry_run:
        for _directory, info in orphans:
            filesystem.delete_file(info.path)
    return OrphanFiles(
        location,
        sorted(f"{directory}/{info.base_name}" for directory, info in orphans),
        sum(info.size or 0 for _directory, info in orphans),
        dry_run,
        sorted(f"{directory}/{info.base_name}" for directory, info in young),
    )


def remove_orphan_files(
    namespace: IcebergLanceNamespace | Mapping[str, str],
    table_id: Sequence[str],
    older_than: str | float = DEFAULT_MARGIN,
    dry_run: bool = False,
) -> OrphanFiles:
    """Delete the orphan data files of a table in the catalog (see the module's docstring for why
    this is safe). ``namespace`` is an ``IcebergLanceNamespace`` or its properties."""
    ns = as_namespace(namespace)
    described = ns.describe_table(DescribeTableRequest(id=list(table_id)))
    assert described.location is not None
    dataset = ns.dataset(list(table_id))  # through the one opener: the entry has shown the data is its own
    return find_orphan_files(described.location, dict(described.storage_options or {}), older_than, dry_run, dataset)
