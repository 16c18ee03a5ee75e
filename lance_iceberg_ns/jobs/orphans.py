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

from lance_namespace import DescribeTableRequest

from lance_iceberg_ns.config.durations import duration_seconds
from lance_iceberg_ns.data.datasets import open_dataset
from lance_iceberg_ns.namespace import IcebergLanceNamespace, as_namespace
from lance_iceberg_ns.storage import files
from lance_iceberg_ns.storage.files import VERSIONS_DIRECTORY, StoredFile
from lance_iceberg_ns.versions.manifests import final_manifests, leftover_manifests

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


def _referenced_data_files(location: str, storage_options: Mapping[str, str]) -> set[str]:
    """The data files every version of the dataset at ``location`` references (file names under
    ``data/``): each version with a final manifest in ``_versions/`` (one listing, the versions
    Lance itself lists), read by location through one dataset, so that each manifest costs a look
    and a read and nothing more. Not through the catalog: a version it does not name (``main``
    rolled back past it, to be moved forward again perhaps) still needs its files. Raises
    InvalidInputError when no dataset is there."""
    manifests = final_manifests(location, storage_options)
    dataset = open_dataset(location, storage_options, max(manifests, default=None))
    referenced: set[str] = set()
    for version in sorted(manifests):
        for fragment in dataset.checkout_version(version).get_fragments():
            referenced.update(data_file.path for data_file in fragment.metadata.files)
    return referenced


def find_orphan_files(
    location: str,
    storage_options: Mapping[str, str],
    older_than: str | float = DEFAULT_MARGIN,
    dry_run: bool = True,
) -> OrphanFiles:
    """The files of the dataset at ``location`` that nothing needs and that were last written more
    than ``older_than`` ago (a duration such as ``"3d"`` or seconds): data files no version
    references, and leftover manifest copies. Deleted unless ``dry_run``. Raises
    InvalidInputError for a bad margin, or when no dataset is at ``location``."""
    margin = older_than if isinstance(older_than, (int, float)) else duration_seconds(older_than, "older_than")
    data = files.list_files(location, DATA_DIRECTORY, storage_options)
    manifests = leftover_manifests(location, storage_options)
    referenced = _referenced_data_files(location, storage_options)
    candidates = [(DATA_DIRECTORY, found) for found in data if found.path not in referenced]
    candidates += [(VERSIONS_DIRECTORY, found) for found in manifests]
    cutoff = time.time() - margin
    orphans: list[tuple[str, StoredFile]] = []
    young: list[tuple[str, StoredFile]] = []
    for directory, found in candidates:
        (orphans if found.modified < cutoff else young).append((directory, found))
    deleted = sorted(f"{directory}/{found.path}" for directory, found in orphans)
    if not dry_run:
        files.delete_files(location, deleted, storage_options)
    return OrphanFiles(
        location,
        deleted,
        sum(found.size for _directory, found in orphans),
        dry_run,
        sorted(f"{directory}/{found.path}" for directory, found in young),
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
    # through the one opener: the entry has shown the data is its own (a table with none is TableNotFoundError)
    ns.dataset(list(table_id))
    return find_orphan_files(described.location, dict(described.storage_options or {}), older_than, dry_run)
