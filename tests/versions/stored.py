"""What the managed-versions tests look at on a table's store, a local disk or S3 alike: the
final and staged manifests of ``_versions/``, a manifest staged as pylance stages one, and a plain
Iceberg client whose FileIO reaches the store (an engine's commit writes a manifest list there)."""

from __future__ import annotations

import uuid

from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.rest import RestCatalog

from lance_iceberg_ns.versions.manifests import version_of_manifest

from ..stores import Store


def final_versions(store: Store, location: str) -> list[int]:
    """The versions with a final manifest in the table's ``_versions/``, in order."""
    names = store.keys(f"{location}/_versions")
    return sorted(v for v in (version_of_manifest(name) for name in names) if v is not None)


def staged_manifests(store: Store, location: str) -> list[str]:
    """The staged manifests (``<final name>-<uuid>``) in the table's ``_versions/``."""
    return [name for name in store.keys(f"{location}/_versions") if ".manifest-" in name]


def stage_manifest(store: Store, location: str, version: int) -> str:
    """A manifest of ``version`` staged in the dataset's ``_versions/`` as pylance stages one before
    it asks the namespace to commit it (the bytes of a final manifest already there); its path."""
    versions = f"{location.rstrip('/')}/_versions"
    final = next(name for name in store.keys(versions) if name.endswith(".manifest"))
    staged = f"{versions}/{2**64 - 1 - version:020d}.manifest-{uuid.uuid4()}"
    store.write(staged, store.read(f"{versions}/{final}") or b"")
    return staged


def iceberg_client(endpoint: str, warehouse: str, store: Store) -> RestCatalog:
    """pyiceberg used directly, as another team's job would (no bridge involved), reaching the store."""
    catalog = load_catalog(
        f"other-{warehouse}", type="rest", uri=endpoint, warehouse=warehouse, **store.file_io_properties
    )
    assert isinstance(catalog, RestCatalog)
    return catalog


def as_pylance_spells(path: str) -> str:
    """A path as pylance names it to a namespace: an object's key (no scheme, no bucket), a local
    path without its leading slash."""
    if "://" in path:
        return path.split("://", 1)[1].partition("/")[2]
    return path.lstrip("/")
