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

import sys
from importlib import import_module
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from importlib.util import spec_from_loader
from types import ModuleType
from typing import TYPE_CHECKING, Any

from lance_iceberg_ns import registry

if TYPE_CHECKING:
    from lance_iceberg_ns.config.settings import Settings
    from lance_iceberg_ns.namespace import IcebergLanceNamespace, companion_table_schema

__all__ = ["IcebergLanceNamespace", "Settings", "companion_table_schema", "__version__"]

_LAZY = {
    "IcebergLanceNamespace": "lance_iceberg_ns.namespace",
    "companion_table_schema": "lance_iceberg_ns.namespace",
    "Settings": "lance_iceberg_ns.config.settings",
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


# Modules that moved into sub-packages, importable by their earlier names too: each old name is the
# same module object as the new one.
MOVED_MODULES = {
    "lance_iceberg_ns.adoption": "lance_iceberg_ns.jobs.adoption",
    "lance_iceberg_ns.atomic": "lance_iceberg_ns.jobs.atomic",
    "lance_iceberg_ns.directory_import": "lance_iceberg_ns.jobs.directory_import",
    "lance_iceberg_ns.orphans": "lance_iceberg_ns.jobs.orphans",
    "lance_iceberg_ns.planned_writes": "lance_iceberg_ns.jobs.planned_writes",
    "lance_iceberg_ns.spark_source": "lance_iceberg_ns.spark.source",
}


class _MovedModules(MetaPathFinder, Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> ModuleSpec | None:
        return spec_from_loader(fullname, self) if fullname in MOVED_MODULES else None

    def __init__(self) -> None:
        self.own_specs: dict[str, ModuleSpec | None] = {}

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = import_module(MOVED_MODULES[spec.name])
        self.own_specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module ran when it was imported by its own name; the import system has just given
        it the old name's spec, so its own is put back (``importlib.reload`` goes by it)."""
        module.__spec__ = self.own_specs[module.__name__]


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())

registry.register_on_import()
