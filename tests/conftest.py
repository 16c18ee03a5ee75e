"""Shared fixtures: a real Iceberg REST server for the whole session, and a fresh namespace
(its own warehouse and storage root) for each test.

By default the server is the local catalog (Apache Iceberg's CatalogHandlers, no Docker). With
``LANCE_ICEBERG_NS_TEST_SERVER=docker`` the same suite runs against the official
``apache/iceberg-rest-fixture`` image through testcontainers, and with ``=compose`` against the
stack in ``compose/`` (the fixture over MinIO), started by testcontainers' DockerCompose.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lance.namespace
import pytest
import requests
import urllib3
from lance_namespace import CreateNamespaceRequest

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.testing import local_catalog

if TYPE_CHECKING:
    from lance_iceberg_ns.server import RunningServer

    from .seaweed import SeaweedFS

from . import stores
from .docker_fixture import compose_rest_fixture, docker_rest_fixture
from .helpers import CommandLine, environment_variables
from .liveness import free_port
from .stores import Store

SERVER_KIND = os.environ.get("LANCE_ICEBERG_NS_TEST_SERVER", "local")


@pytest.fixture(scope="session")
def catalog_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A running Iceberg REST server with an ``endpoint`` attribute."""
    if SERVER_KIND == "docker":
        with docker_rest_fixture() as server:
            yield server
    elif SERVER_KIND == "compose":
        with compose_rest_fixture() as server:
            yield server
    else:
        with local_catalog(tmp_path_factory.mktemp("catalog"), prefix_style="defaults") as server:
            yield server


@pytest.fixture
def endpoint(catalog_server: object) -> str:
    return catalog_server.endpoint  # type: ignore[attr-defined,no-any-return]


@pytest.fixture(scope="session")
def seaweedfs() -> Iterator[object]:
    """A real S3 server (SeaweedFS's ``weed mini``) on loopback for the whole session."""
    from . import seaweed

    server = seaweed.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def azurite() -> Iterator[object]:
    """A real Azure Blob server (Azurite's ``azurite-blob``) on loopback for the whole session;
    the tests that use it are skipped when it is not installed."""
    from . import azurite as emulator

    if emulator.executable() is None:
        pytest.skip(f"azurite-blob (npm package azurite) is not installed: {emulator.INSTALL_HINT}")
    server = emulator.start()
    yield server
    server.stop()


@pytest.fixture
def warehouse() -> str:
    """A warehouse of its own for each test, so tests cannot see each other's tables."""
    return f"wh_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def lance_root(tmp_path: Path) -> Path:
    root = tmp_path / "lance"
    root.mkdir()
    return root


@pytest.fixture(params=["disk", "s3"])
def store(request: pytest.FixtureRequest, lance_root: Path) -> Store:
    """Where the test's tables live: ``lance_root`` on the local disk, or a fresh prefix of the
    session's S3 bucket. A module runs on both by using it (``pytestmark =
    pytest.mark.usefixtures("store")``, or a test taking ``store``): ``ns``, ``server`` and ``cli``
    then put their root there."""
    if request.param == "disk":
        return stores.disk(lance_root)
    seaweedfs: SeaweedFS = request.getfixturevalue("seaweedfs")
    return stores.s3(seaweedfs.fresh_root(), seaweedfs.storage_options())


def root_properties(request: pytest.FixtureRequest, lance_root: Path) -> dict[str, str]:
    """The ``root`` property of the test's namespace, with the ``storage.*`` properties of its store:
    the test's ``store`` if it uses one, else ``lance_root``."""
    if "store" not in request.fixturenames:
        return {"root": str(lance_root)}
    store: Store = request.getfixturevalue("store")
    return {"root": store.root, **store.properties}


@pytest.fixture
def ns(request: pytest.FixtureRequest, endpoint: str, lance_root: Path) -> Iterator[IcebergLanceNamespace]:
    namespace = IcebergLanceNamespace(endpoint=endpoint, **root_properties(request, lance_root))
    yield namespace
    namespace.close()


@pytest.fixture
def db(ns: IcebergLanceNamespace, warehouse: str) -> list[str]:
    """A created namespace ``[warehouse, db_<random>]``."""
    namespace_id = [warehouse, f"db_{uuid.uuid4().hex[:8]}"]
    ns.create_namespace(CreateNamespaceRequest(id=namespace_id))
    return namespace_id


@pytest.fixture
def cli(request: pytest.FixtureRequest, endpoint: str, lance_root: Path, tmp_path: Path) -> CommandLine:
    """``lance-iceberg-ns`` run in process on the session's catalog and ``lance_root`` (or the
    test's ``store``), given by ``LANCE_ICEBERG_*`` variables, with the test's own ``PYICEBERG_HOME``."""
    properties = root_properties(request, lance_root)
    command_line = CommandLine(endpoint, properties.pop("root"), tmp_path)
    command_line.environ.update(environment_variables(properties))
    return command_line


class RequestCounter:
    """Counts the HTTP requests sent while it is installed, whichever client sends them."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []

    @property
    def count(self) -> int:
        return len(self.requests)

    def reset(self) -> None:
        self.requests.clear()


@pytest.fixture
def request_counter(monkeypatch: pytest.MonkeyPatch) -> RequestCounter:
    counter = RequestCounter()
    original = urllib3.connectionpool.HTTPConnectionPool.urlopen

    def counting_urlopen(
        pool: urllib3.connectionpool.HTTPConnectionPool, method: str, url: str, *args: object, **kwargs: object
    ) -> object:
        counter.requests.append((method, url))
        return original(pool, method, url, *args, **kwargs)

    monkeypatch.setattr(urllib3.connectionpool.HTTPConnectionPool, "urlopen", counting_urlopen)
    return counter


@pytest.fixture
def server(request: pytest.FixtureRequest, endpoint: str, lance_root: Path) -> Iterator[RunningServer]:
    """The Lance REST server over the bridge on the local catalog (its root ``lance_root``, or the
    test's ``store``), in a thread."""
    from lance_iceberg_ns.server import serve_in_background  # the server extra: not in every test environment

    properties = {"endpoint": endpoint, **root_properties(request, lance_root)}
    with serve_in_background(properties=properties) as running:
        yield running


@pytest.fixture
def rest(server: RunningServer) -> lance.namespace.RestNamespace:
    """pylance's native (Rust) REST client of ``server``."""
    return lance.namespace.RestNamespace(uri=server.uri)


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server on loopback, with a bucket ``lake``."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port())
    server.start()
    endpoint = f"http://127.0.0.1:{server._port}"
    requests.put(f"{endpoint}/lake", timeout=30).raise_for_status()
    yield endpoint
    server.stop()


SECRET_MARK = "SECRET"  # every secret the tests configure (tokens, client secrets, keys) carries it
QUIET_LOGGERS = ("py4j", "asyncio", "filelock", "matplotlib")  # too chatty at DEBUG, and secret-free


class _LogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.leaks: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += f" {record.exc_info[1]!r}"
        if SECRET_MARK in text:
            self.leaks.append(f"{record.name}: {text[:300]}")


@pytest.fixture(autouse=True)
def no_secret_in_debug_logs() -> Iterator[None]:
    """Every test runs with DEBUG logging on (the bridge, pyiceberg, requests, urllib3, the
    server) and fails if a configured secret shows up in any record."""
    root = logging.getLogger()
    capture = _LogCapture()
    previous = root.level
    quiet = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        root.removeHandler(capture)
        root.setLevel(previous)
        for name, level in quiet.items():
            logging.getLogger(name).setLevel(level)
    assert not capture.leaks, capture.leaks[:5]


@pytest.fixture
def duckdb_with_lance() -> Iterator[Any]:
    """DuckDB with the Lance extension of the installed wheel (its version pinned to DuckDB's)."""
    duckdb = pytest.importorskip("duckdb")
    extension = pytest.importorskip("duckdb_extension_lance")
    found = sorted(Path(extension.__file__).parent.glob("extensions/*/lance.duckdb_extension"))
    assert found, "the wheel's extension file"
    connection = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    connection.execute(f"LOAD '{found[-1]}'")
    yield connection
    connection.close()


from .scene import scene  # noqa: E402, F401  (a fixture for every module)
