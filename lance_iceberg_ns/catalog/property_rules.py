"""Which table and namespace properties a client may set on the catalog: none that decides where a
catalog or engine writes files, and none of the bridge's own bookkeeping."""

from __future__ import annotations

import unicodedata

from lance_namespace.errors import InvalidInputError

# Iceberg table properties that say where a catalog or engine writes: a client may not set them on a
# companion table (Polaris refuses them too), or it could send the catalog's files elsewhere.
RESERVED_LOCATION_PROPERTIES = frozenset(
    {
        "location",
        "write.metadata.path",
        "write.data.path",
        "write.object-storage.path",
        "write.object-storage.enabled",
        "write.folder-storage.path",
        "write.location-provider.impl",
        "write.object-storage.partitioned-paths",
    }
)


def plain_property_key(key: str) -> str:
    """A property key as a catalog may read it: without spaces around it, invisible characters or case."""
    return "".join(ch for ch in key if unicodedata.category(ch) not in ("Cf", "Cc")).strip().lower()


def check_requested_properties(properties: dict[str, str], own_prefix: str) -> None:
    """Raise ``InvalidInputError`` when request properties try to set where data or metadata go, or
    the bridge's own bookkeeping (keys starting with ``own_prefix``)."""
    if any(plain_property_key(key).startswith(own_prefix) for key in properties):
        raise InvalidInputError(f"Properties starting with {own_prefix!r} are the bridge's own")
    reserved = sorted(key for key in properties if plain_property_key(key) in RESERVED_LOCATION_PROPERTIES)
    if reserved:
        raise InvalidInputError(f"These properties decide where files go and cannot be set: {', '.join(reserved)}")
