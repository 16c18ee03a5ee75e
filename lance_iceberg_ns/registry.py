"""Our names in ``lance_namespace``'s registry of implementations.

``lance_namespace.connect(name, ...)`` (and lancedb's ``connect_namespace``) find implementations
by short name in a registry that any package may write to on import. lance-namespace-impls also
registers ``"iceberg"``, for its own class, so whichever package is imported last would win. The
registry is therefore wrapped so that the names this package registers stay its own, whatever is
imported afterwards; ``"lance-iceberg-ns"`` is a name no other package claims.

The registry is a private dict of ``lance_namespace`` (``_REGISTERED_IMPLS``); this is the one
place that touches it, and ``tests/test_registry.py`` fails loudly if it moves.
"""

from __future__ import annotations

import logging

import lance_namespace

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
    registry = getattr(lance_namespace, _REGISTRY_ATTRIBUTE)
    if not isinstance(registry, _KeptNames):
        registry = _KeptNames(registry)
        setattr(lance_namespace, _REGISTRY_ATTRIBUTE, registry)
    for name in NAMES:
        dict.__setitem__(registry, name, CLASS_PATH)
