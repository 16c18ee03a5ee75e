"""The way out for a managed table that a writer by location moved ahead of the catalog.

A writer that opens a managed table by its location (``lance.write_dataset(data, location)``,
polars' ``sink_lance``) commits with Lance's own conditional write, behind the catalog's back. The
catalog then takes no new version of the table (InvalidTableStateError), since pylance numbers the
next version after the one on disk. ``adopt_versions_written_by_location`` records those versions
in the catalog, one compare-and-swap commit each, exactly as pylance's commits through the
namespace are recorded; writes through the namespace work again, and ``restore_table`` brings back
the data of an earlier version if what was written by location should not stay.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lance_namespace import CreateTableVersionRequest, DescribeTableRequest, DescribeTableVersionRequest
from lance_namespace.errors import InvalidInputError, InvalidTableStateError, TableVersionNotFoundError

from lance_iceberg_ns.data.datasets import check_own_version
from lance_iceberg_ns.namespace import IcebergLanceNamespace, as_namespace
from lance_iceberg_ns.storage.files import VERSIONS_DIRECTORY, StoredFile
from lance_iceberg_ns.versions.manifests import final_manifests, manifest_directory, manifest_name
from lance_iceberg_ns.versions.refusals import latest_gone_error, written_by_path_error


def adopt_versions_written_by_location(
    namespace: IcebergLanceNamespace | Mapping[str, str], table_id: Sequence[str]
) -> list[int]:
    """Record in the catalog the versions of a managed table that follow the catalog's latest and
    were committed by a writer that went by the table's location; the versions recorded, oldest
    first (none when the catalog is not behind). Raises InvalidInputError for a table whose
    versions the catalog does not manage, ConcurrentModificationError when another writer
    committed meanwhile (nothing more is recorded; run it again), InvalidTableStateError (nothing
    recorded) when a file under a version's manifest name is no version of this dataset (it does not
    open, or names files the table does not have): it was planted, and must be removed."""
    ns = as_namespace(namespace)
    found = _written_by_location(ns, table_id)
    for version, manifest in found.manifests:  # all checked before any is recorded
        try:
            check_own_version(found.location, found.storage_options, version)
        except InvalidTableStateError as exc:
            raise InvalidTableStateError(
                f"{exc}. It is no version a writer by location committed: remove "
                f"{found.location.rstrip('/')}/{VERSIONS_DIRECTORY}/{manifest.name} (and any "
                f"manifest after it) from the table's _versions/; the table is then as the catalog says"
            ) from None
    for version, manifest in found.manifests:
        ns.create_table_version(
            CreateTableVersionRequest(
                id=list(table_id),
                version=version,
                manifest_path=f"{manifest_directory(found.location)}/{manifest.name}",
                manifest_size=manifest.size,
                naming_scheme="V2" if manifest.name == manifest_name(version) else "V1",
            )
        )
    return [version for version, _manifest in found.manifests]


def refuse_if_written_by_location(
    namespace: IcebergLanceNamespace | Mapping[str, str], table_id: Sequence[str]
) -> None:
    """InvalidTableStateError naming the way out when a writer by location moved a managed table's
    dataset ahead of the catalog: why a commit through the namespace failed that pylance reports
    only as of unknown outcome."""
    found = _written_by_location(as_namespace(namespace), table_id)
    if found.manifests:
        raise written_by_path_error(".".join(table_id), found.manifests[0][0], found.latest)


@dataclass(frozen=True)
class _Found:
    latest: int  # the catalog's latest version
    location: str
    storage_options: dict[str, str]
    manifests: list[tuple[int, StoredFile]]  # the versions after it on disk, oldest first


def _written_by_location(ns: IcebergLanceNamespace, table_id: Sequence[str]) -> _Found:
    described = ns.describe_table(DescribeTableRequest(id=list(table_id)))
    if not described.managed_versioning or described.location is None:
        raise InvalidInputError(f"The catalog does not manage the versions of {'.'.join(table_id)}")
    try:  # the catalog's latest (not the listing, which refuses a first version written by location)
        latest = ns.describe_table_version(DescribeTableVersionRequest(id=list(table_id))).version.version
    except TableVersionNotFoundError:
        latest = 0
    storage_options = dict(described.storage_options or {})
    on_disk = final_manifests(described.location, storage_options)
    following = list(itertools.takewhile(lambda version: version in on_disk, itertools.count(latest + 1)))
    if latest and latest not in on_disk and not following and any(version > latest for version in on_disk):
        raise latest_gone_error(".".join(table_id), latest)  # a writer by location went on, then cleaned up
    return _Found(latest, described.location, storage_options, [(version, on_disk[version]) for version in following])
