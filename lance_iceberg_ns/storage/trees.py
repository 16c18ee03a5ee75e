"""Trees of directories under a root, walked one level at a time: where the ownership markers
are (``ownership``), and what lies around a location being claimed.

A walk lists one directory at a time (one request per directory on an object store) and never
enters a dataset's own directories, so its cost follows the tree of namespaces and tables, not
the files the tables hold.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

import obstore

from lance_iceberg_ns.storage import files
from lance_iceberg_ns.storage.locations import encoded_segment, is_local, local_path


def holds_below(location: str, name: str, storage_options: Mapping[str, str], folder: str = "") -> bool:
    """Whether a directory strictly under ``location`` holds a file ``name`` (or a directory
    ``folder``, when given); see ``directories`` for what is looked into."""
    walk = directories(location, storage_options)
    next(walk, None)  # the location itself
    return any(_holds(names, subfolders, name, folder) for _directory, names, subfolders in walk)


def directories_holding(top: str, name: str, storage_options: Mapping[str, str], folder: str = "") -> Iterator[str]:
    """The locations under ``top`` (itself included) that hold a file ``name`` (or a directory
    ``folder``, when given), none inside one that does (see ``directories`` for what is looked into)."""
    for directory, names, subfolders in directories(top, storage_options):
        if _holds(names, subfolders, name, folder):
            subfolders.clear()
            yield directory


def _holds(names: set[str], subfolders: list[str], name: str, folder: str) -> bool:
    return name in names or (bool(folder) and folder in subfolders)


def directories(location: str, storage_options: Mapping[str, str]) -> Iterator[tuple[str, set[str], list[str]]]:
    """``(directory, names of its files, names of its subdirectories)`` for ``location`` and the
    directories under it, top-down; a caller empties the last to not go below. Links are not
    followed, and a dataset's own directories (Lance's, ``_versions/``, the catalog's
    ``metadata/``) are not entered: so a walk costs one listing per directory of the tree of
    namespaces and tables, whatever the tables hold."""
    if is_local(location):
        for folder, subfolders, held in os.walk(local_path(location), followlinks=False):
            _leave_dataset_entries(subfolders)
            yield folder, set(held), subfolders
        return
    with files.store_failures():
        store, key = files.object_store(location, storage_options)
    pending = [(key, location.rstrip("/"))]  # a prefix, and the location it is, spelled as locations are
    while pending:
        prefix, directory = pending.pop()
        with files.store_failures():
            listed = obstore.list_with_delimiter(store, prefix=prefix or None)
        names = {meta["path"].rsplit("/", 1)[-1] for meta in listed["objects"]}
        subfolders = [common.rstrip("/").rsplit("/", 1)[-1] for common in listed["common_prefixes"]]
        _leave_dataset_entries(subfolders)
        yield directory, names, subfolders
        pending += [
            (files.key_under(prefix, sub), f"{directory}/{encoded_segment(sub)}") for sub in reversed(subfolders)
        ]


def _leave_dataset_entries(subfolders: list[str]) -> None:
    """Out of a directory's subfolders, when it holds a dataset, take the dataset's own (no table
    lies inside another's files)."""
    if files.VERSIONS_DIRECTORY in subfolders:
        subfolders[:] = [name for name in subfolders if name not in files.OWNED_ENTRIES]


def subdirectories(location: str, storage_options: Mapping[str, str]) -> list[str]:
    """The names of the directories directly under ``location`` (one listing)."""
    walk = directories(location, storage_options)
    first = next(walk, None)
    return [] if first is None else sorted(first[2])
