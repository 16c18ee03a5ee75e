"""Where bridge properties come from besides explicit arguments: a pyiceberg catalog
configuration (``~/.pyiceberg.yaml`` and ``PYICEBERG_CATALOG__<NAME>__*``, read by pyiceberg
itself) and ``LANCE_ICEBERG_*`` environment variables.

Precedence, lowest first: the pyiceberg catalog, then ``LANCE_ICEBERG_*``, then explicit
arguments. Properties are resolved once, where the namespace is built, so that a pickled
namespace carries them to executors that have neither the file nor the variables.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from lance_namespace.errors import InvalidInputError

from lance_iceberg_ns.config.settings import ICEBERG_PREFIX, KNOWN_KEYS, STORAGE_PREFIX
from lance_iceberg_ns.config.storage_keys import lance_storage_options

ENVIRONMENT_PREFIX = "LANCE_ICEBERG_"
CATALOG_VARIABLE = "LANCE_ICEBERG_CATALOG"  # names the pyiceberg catalog to start from
SERVER_PREFIX = "LANCE_ICEBERG_NS_"  # the REST server's own settings (LANCE_ICEBERG_NS_AUTH_TOKEN), not properties

# pyiceberg REST catalog property → bridge property.
_PYICEBERG_TO_BRIDGE = {
    "uri": "endpoint",
    "token": "auth_token",
    "credential": "credential",
    "scope": "scope",
    "oauth2-server-uri": "oauth2-server-uri",
}
# pyiceberg keys that say which catalog this is rather than how to reach it.
_PYICEBERG_IDENTITY = {"type", "py-catalog-impl", "warehouse"}
_WAREHOUSE = "warehouse"


def pyiceberg_catalog_properties(name: str) -> dict[str, str]:
    """Bridge properties from the pyiceberg catalog ``name``: its URI and auth become the bridge's,
    its storage properties (``s3.*``, ``gcs.*``, ``adls.*``) Lance storage options too, and every
    other key is passed to pyiceberg's REST client as ``iceberg.<key>``. The warehouse becomes the
    one listed at the root (``warehouses``): here it is the first part of every identifier."""
    from pyiceberg.utils.config import Config

    found = Config().get_catalog_config(name)
    if not found:
        raise InvalidInputError(f"No pyiceberg catalog named {name!r} (~/.pyiceberg.yaml, PYICEBERG_CATALOG__*)")
    catalog_type = str(found.get("type", "rest")).lower()
    if catalog_type != "rest":
        raise InvalidInputError(f"The pyiceberg catalog {name!r} is of type {catalog_type!r}; only 'rest' is supported")
    flat = {str(key): str(value) for key, value in found.items() if not isinstance(value, Mapping)}
    properties: dict[str, str] = {}
    for key, value in flat.items():
        if key in _PYICEBERG_TO_BRIDGE:
            properties[_PYICEBERG_TO_BRIDGE[key]] = value
        elif key not in _PYICEBERG_IDENTITY:
            properties[ICEBERG_PREFIX + key] = value
    properties.update({STORAGE_PREFIX + key: value for key, value in lance_storage_options(flat).items()})
    if flat.get(_WAREHOUSE):
        properties["warehouses"] = flat[_WAREHOUSE]
    return properties


def environment_properties(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Bridge properties from ``LANCE_ICEBERG_<KEY>`` variables: the key lowercased, ``__`` for a
    dot (``LANCE_ICEBERG_STORAGE__AWS_REGION`` → ``storage.aws_region``); pyiceberg's rule of ``_``
    for ``-`` applies after ``iceberg.`` and in dashed keys (``LANCE_ICEBERG_OAUTH2_SERVER_URI``)."""
    environ = os.environ if environ is None else environ
    properties = {}
    for variable, value in environ.items():
        upper = variable.upper()
        if not upper.startswith(ENVIRONMENT_PREFIX) or upper == CATALOG_VARIABLE or upper.startswith(SERVER_PREFIX):
            continue
        if not value:
            continue
        key = variable[len(ENVIRONMENT_PREFIX) :].lower().replace("__", ".")
        if key.startswith(ICEBERG_PREFIX):
            key = ICEBERG_PREFIX + key[len(ICEBERG_PREFIX) :].replace("_", "-")
        elif key not in KNOWN_KEYS and key.replace("_", "-") in KNOWN_KEYS:
            key = key.replace("_", "-")
        properties[key] = value
    return properties


def resolve_properties(
    explicit: Mapping[str, str], catalog: str | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The bridge properties from every source: the pyiceberg catalog (``catalog``, else the one
    ``LANCE_ICEBERG_CATALOG`` names, if any), then ``LANCE_ICEBERG_*``, then ``explicit``."""
    environ = os.environ if environ is None else environ
    catalog = catalog or environ.get(CATALOG_VARIABLE) or None
    base = pyiceberg_catalog_properties(catalog) if catalog else {}
    return {**base, **environment_properties(environ), **{k: v for k, v in explicit.items() if v is not None}}
