"""A committed version's staged manifest moved into place.

pylance's namespace-backed commit stages a manifest (``_versions/<n>.manifest-<uuid>``) and leaves
it to the namespace to give it its final name once the catalog has committed it, as the reference
does. The final name is taken only when it is free: a writer by location may have committed the
same version number in the moment between, and its manifest is never replaced.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow.fs as pafs
from lance_namespace import TableVersion

from lance_iceberg_ns.storage import datasets
from lance_iceberg_ns.storage.datasets import VERSIONS_DIRECTORY, filesystem_for
from lance_iceberg_ns.versions.managed import STAGED_MANIFEST, final_manifest_name
from lance_iceberg_ns.versions.refusals import FinalNameTaken


def finalize(location: str, storage_options: Mapping[str, str], version: TableVersion) -> TableVersion:
    """After the catalog committed ``version``: its manifest under its final name, the staged copy
    gone, and the answer naming the final path. pylance's namespace-backed commit never copies the
    manifest itself: it expects the namespace to, as the reference does; otherwise a reader by
    location sees the version before, and pylance's next open through the namespace finalizes it
    with a warning. A copy that fails leaves the staged manifest, which the reads finalize later.
    A final name that already holds the same manifest (pylance, reading through the namespace,
    copies a staged manifest into place itself) is this version's. Raises FinalNameTaken, having
    moved nothing, when a writer by location committed the version number since the check before
    the commit: its manifest is never replaced."""
    name = version.manifest_path.rsplit("/", 1)[-1]
    if not STAGED_MANIFEST.match(name):
        return version
    filesystem, root = filesystem_for(location, storage_options)
    staged, final = f"{root.rstrip('/')}/{VERSIONS_DIRECTORY}/{name}", final_manifest_name(name)
    try:  # a rename where the store has one: a reader never sees a final manifest half written
        if not datasets.move_unless_taken(filesystem, staged, f"{staged[: -len(name)]}{final}"):
            if not datasets.same_contents(filesystem, staged, f"{staged[: -len(name)]}{final}"):
                raise FinalNameTaken(final)
            filesystem.delete_file(staged)
    except OSError:
        return version
    final_path = f"{version.manifest_path[: -len(name)]}{final}"
    return version.model_copy(update={"manifest_path": final_path, "e_tag": None})


def final_name_free(location: str, storage_options: Mapping[str, str], version: TableVersion) -> bool:
    """Whether ``finalize`` will find the final name of ``version``'s staged manifest free (or
    holding the same manifest): one look, before an atomic batch moves any table's manifest."""
    name = version.manifest_path.rsplit("/", 1)[-1]
    if not STAGED_MANIFEST.match(name):
        return True
    filesystem, root = filesystem_for(location, storage_options)
    staged = f"{root.rstrip('/')}/{VERSIONS_DIRECTORY}/{name}"
    final = f"{staged[: -len(name)]}{final_manifest_name(name)}"
    try:
        return filesystem.get_file_info(final).type == pafs.FileType.NotFound or datasets.same_contents(
            filesystem, staged, final
        )
    except OSError:
        return True  # finalize finds out
