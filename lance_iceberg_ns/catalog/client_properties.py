"""The pyiceberg properties of a warehouse's REST catalog, made from the bridge's settings: the
connection, the authentication, and the FileIO settings that reach the store with the same
``storage.*`` options as Lance; and, of a table's FileIO properties, which the catalog answered."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lance_iceberg_ns.config.settings import Settings
from lance_iceberg_ns.config.storage_keys import file_io_properties


def answered_io_properties(io_properties: Mapping[str, Any], settings: Settings, warehouse: str) -> dict[str, str]:
    """Of a table's FileIO properties, what the catalog answered (its config and vended
    credentials): pyiceberg merges them over the catalog's own properties, which hold the
    bridge's configuration (its ``storage.*`` secrets among them) and are never the catalog's to
    hand on."""
    own = catalog_properties(settings, warehouse)
    return {str(k): str(v) for k, v in io_properties.items() if own.get(k) != v}


def catalog_properties(settings: Settings, warehouse: str) -> dict[str, str]:
    """The pyiceberg properties for one warehouse's catalog: its FileIO reaches storage with the
    ``storage.*`` options unless ``iceberg.*`` says otherwise."""
    properties = {**file_io_properties(settings.storage_options), **settings.catalog_properties}
    properties.update({"uri": settings.endpoint, "warehouse": warehouse})
    if settings.auth_token:
        properties["token"] = settings.auth_token
    if settings.credential:
        # pyiceberg's OAuth2 manager: client credentials, the token refreshed before it expires.
        client_id, _, client_secret = settings.credential.partition(":")
        oauth2 = {
            "client_id": client_id,
            "client_secret": client_secret,
            "token_url": settings.oauth2_server_uri or f"{settings.endpoint}/v1/oauth/tokens",
            "scope": settings.scope or "catalog",
            "refresh_margin": settings.oauth2_refresh_margin_seconds,
        }
        properties["auth"] = {"type": "oauth2", "oauth2": oauth2}  # type: ignore[assignment]
    elif settings.scope:
        properties["scope"] = settings.scope
    return properties
