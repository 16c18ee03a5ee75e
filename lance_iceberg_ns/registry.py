"""Our names in ``lance_namespace``'s registry of implementations.

``lance_namespace.connect(name, ...)`` (and lancedb's ``connect_namespace``) find implementations
by short name in a registry that any package may write to on import. lance-namespace-impls also
registers ``"iceberg"``, for its own class, so whichever package is imported last would win. The
registry is therefore wrapped so that the names this package registers stay its own, whatever is
imported afterwards; ``"lance-iceberg-ns"`` is a name no other package claims.

The registry is a private dict of ``lance_namespace`` (``_REGISTERED_IMPLS``); this is the one
place that touches it, and ``tests/test_registry.py`` fails loudly if it moves.

The registry lives in one process and is filled by imports: ``lance_namespace`` reads no entry
points. A process that never imports this package (an engine's fresh worker) does not know
``"iceberg"``, or knows it as lance-namespace-impls' class if that was imported there. Such a
process reaches the bridge by its class path, ``CLASS_PATH``, which ``connect`` imports, or runs
``register`` when it starts: Ray's ``worker_process_setup_hook`` (``lance_iceberg_ns.ray.runtime_env``).

Importing ``lance_namespace`` takes most of a second (its REST client's models), so the package
registers when ``lance_namespace`` is imported (``register_on_import``) rather than importing it:
the command line's ``--help`` and a program that uses a small part of the package never pay it.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

logger = logging.getLogger(__name__)

CLASS_PATH = "lance_iceberg_ns.IcebergLanceNamespace"
NAMES = ("iceberg", "lance-iceberg-ns")
_REGISTRY_ATTRIBUTE = "_REGISTERED_IMPLS"


class _KeptNames(dict):  # type: ignore[type-arg]
    """The registry, where the names registered for this package keep their class."""

    def __setitem__(self, name: str, class_path: str) -> None:
        if name in NAMES and class_path != CLASS_PATH:
            logger.debug("Keeping %r for %s, not %s", name, CLASS_PATH, class_path)
            return
        super().__setitem__(name, class_path)


def register() -> None:
    """Register ``IcebergLanceNamespace`` under ``NAMES``, for good."""
    import lance_namespace

    registry = getattr(lance_namespace, _REGISTRY_ATTRIBUTE)
    if not isinstance(registry, _KeptNames):
        registry = _KeptNames(registry)
        setattr(lance_namespace, _REGISTRY_ATTRIBUTE, registry)
    for name in NAMES:
        dict.__setitem__(registry, name, CLASS_PATH)


def register_on_import() -> None:
    """Register as soon as ``lance_namespace`` is imported: now if it already is."""
    if "lance_namespace" in sys.modules:
        register()
    elif not any(isinstance(finder, _RegisterOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegisterOnImport())


class _RegisterOnImport:
    """An import hook (``sys.meta_path``) that lets ``lance_namespace`` load as usual, then registers."""

    def find_spec(self, name: str, path: Any = None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name != "lance_namespace":
            return None
        sys.meta_path.remove(self)  # once, and the search below finds the real module
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            load(module)
            register()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
