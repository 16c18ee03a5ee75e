"""The Iceberg REST servers the compatibility suite runs its scenarios on, each behind one small
interface: how the bridge is configured for it, where its tables' files are, and another client
of its catalog (pyiceberg, no bridge) to look at what the bridge made.

Every server runs on 127.0.0.1, started and stopped by the test run, without Docker: the local
catalog (the reference), SeaweedFS's catalog of an S3 Tables bucket (``seaweed_catalog``) and
Nessie's Iceberg REST catalog (``nessie``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.rest import RestCatalog

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.testing import local_catalog
from lance_iceberg_ns.testing.build import ICEBERG_VERSION

from ..stores import Store
from .outcomes import ServerFacts


@dataclass
class CompatServer:
    """A running server, and how the bridge and other clients reach it and its tables."""

    facts: ServerFacts
    warehouse: str  # the first part of every identifier on this server
    properties: dict[str, str]  # the bridge's (endpoint, root, storage.*, iceberg.*...)
    store: Store  # where its tables' files are, with the options a client reads them with
    register_area: str  # where a dataset is written to be registered, outside every table
    catalog_properties: dict[str, str] = field(default_factory=dict)  # pyiceberg's, besides uri and warehouse

    @property
    def key(self) -> str:
        return self.facts.key

    @property
    def endpoint(self) -> str:
        return self.properties["endpoint"]

    @property
    def root(self) -> str:
        return self.properties["root"]

    def namespace(self, **extra: str) -> IcebergLanceNamespace:
        """The bridge on this server (close it when done)."""
        return IcebergLanceNamespace(**{**self.properties, **extra})

    def other_client(self) -> RestCatalog:
        """pyiceberg on the catalog, as another team's job would use it: no bridge involved."""
        catalog = load_catalog(
            f"compat-{self.key}", type="rest", uri=self.endpoint, warehouse=self.warehouse, **self.catalog_properties
        )
        assert isinstance(catalog, RestCatalog)
        return catalog


@dataclass
class Unstarted:
    """A server that did not start: every scenario on it fails with this reason."""

    facts: ServerFacts
    error: BaseException


def timed_start(
    facts: ServerFacts, start: Callable[[], AbstractContextManager[CompatServer]]
) -> Iterator[CompatServer | Unstarted]:
    """Start a server with ``start`` (a context manager), timing it into its facts; yield it, or
    what stopped it from starting (with ``facts``). Stopped when the generator is closed."""
    began = time.monotonic()
    try:
        manager = start()
        server = manager.__enter__()
    except Exception as exc:  # recorded as the reason of every scenario on it
        facts.error = f"{type(exc).__name__}: {str(exc).strip()[:300]}"
        yield Unstarted(facts, exc)
        return
    facts.started_seconds = round(time.monotonic() - began, 1)
    try:
        yield server
    finally:
        manager.__exit__(None, None, None)


def local_facts() -> ServerFacts:
    return ServerFacts(
        key="local",
        title="local catalog",
        version=f"Apache Iceberg {ICEBERG_VERSION} CatalogHandlers over JdbcCatalog (SQLite)",
        storage="local disk",
        setup="`lance_iceberg_ns.testing.local_catalog`, prefix style `defaults`, as the test suite runs it",
    )


@contextmanager
def local(directory: Path, facts: ServerFacts) -> Iterator[CompatServer]:
    """The local catalog (the reference), as ``tests/conftest.py`` starts it, with its tables on disk."""
    root = directory / "lance"
    root.mkdir(parents=True)
    register_area = directory / "elsewhere"
    register_area.mkdir()
    with local_catalog(directory / "catalog", prefix_style="defaults") as catalog:
        yield CompatServer(
            facts=facts,
            warehouse="compat",
            properties={"endpoint": catalog.endpoint, "root": str(root)},
            store=Store("disk", str(root)),
            register_area=str(register_area),
        )
