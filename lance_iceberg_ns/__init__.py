"""Lance tables registered in an Apache Iceberg REST catalog.

Importing this package registers ``IcebergLanceNamespace`` as the Lance namespace
implementation ``"iceberg"`` (whichever other package claims the name, see ``registry``) and
``"lance-iceberg-ns"``, so ``lance_namespace.connect("iceberg", properties)`` and
``lancedb.connect_namespace("iceberg", properties)`` find it.

The registration happens as soon as ``lance_namespace`` is imported (at once if it already is),
and the public names load on first use: a program that imports the package for a small part of
it, the command line's ``--help`` say, loads neither pyarrow, pylance nor pyiceberg.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from lance_iceberg_ns import registry

if TYPE_CHECKING:
    from lance_iceberg_ns.config import Settings
    from lance_iceberg_ns.namespace import IcebergLanceNamespace, companion_table_schema

__all__ = ["IcebergLanceNamespace", "Settings", "companion_table_schema", "__version__"]

_LAZY = {
    "IcebergLanceNamespace": "lance_iceberg_ns.namespace",
    "companion_table_schema": "lance_iceberg_ns.namespace",
    "Settings": "lance_iceberg_ns.config",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import version

        return version("lance-iceberg-ns")
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


registry.register_on_import()
