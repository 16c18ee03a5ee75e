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

from collections.abc import Mapping, Sequence

from lance_namespace import CreateTableVersionRequest, DescribeTableRequest, ListTableVersionsRequest
from lance_namespace.errors import InvalidInputError

from lance_iceberg_ns.datasets import VERSIONS_DIRECTORY, is_local, local_path
from lance_iceberg_ns.namespace import IcebergLanceNamespace, as_namespace
from lance_iceberg_ns.versions import final_manifests, manifest_name


def adopt_versions_written_by_location(
    namespace: IcebergLanceNamespace | Mapping[str, str], table_id: Sequence[str]
) -> list[int]:
    """Record in the catalog the versions of a managed table that follow the catalog's latest and
    were committed by a writer that went by the table's location; the versions recorded, oldest
    first (none when the catalog is not behind). Raises InvalidInputError for a table whose
    versions the catalog does not manage, ConcurrentModificationError when another writer
    committed meanwhile (nothing more is recorded; run it again)."""
    ns = as_namespace(namespace)
    described = ns.describe_table(DescribeTableRequest(id=list(table_id)))
    if not described.managed_versioning or described.location is None:
        raise InvalidInputError(f"The catalog does not manage the versions of {'.'.join(table_id)}: nothing to adopt")
    newest = ns.list_table_versions(ListTableVersionsRequest(id=list(table_id), descending=True, limit=1)).versions
    directory = _manifest_directory(described.location, newest[0].manifest_path if newest else None)
    on_disk = final_manifests(described.location, dict(described.storage_options or {}))
    adopted: list[int] = []
    version = (newest[0].version if newest else 0) + 1
    while version in on_disk:
        found = on_disk[version]
        ns.create_table_version(
            CreateTableVersionRequest(
                id=list(table_id),
                version=version,
                manifest_path=f"{directory}/{found.base_name}",
                manifest_size=found.size,
                naming_scheme="V2" if found.base_name == manifest_name(version) else "V1",
            )
        )
        adopted.append(version)
        version += 1
    return adopted


def _manifest_directory(location: str, recorded: str | None) -> str:
    """Where manifest paths point, in the form pylance gives them (the object store's path of the
    table's ``_versions/``): as the catalog's newest version records it, else from the location."""
    if recorded and "/" in recorded:
        return recorded.rsplit("/", 1)[0]
    path = local_path(location) if is_local(location) else location.split("://", 1)[1].partition("/")[2]
    return f"{path.strip('/')}/{VERSIONS_DIRECTORY}"
