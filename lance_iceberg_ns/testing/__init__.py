"""A real Iceberg REST catalog on loopback, without Docker, for tests, demos and notebooks.

``local_catalog()`` starts a small Java program that routes each request to Apache Iceberg's
own ``CatalogHandlers`` (the handlers the ``apache/iceberg-rest-fixture`` image runs) over a
``JdbcCatalog`` on SQLite. It is compiled on first use (see ``build``) against Apache Iceberg's
``iceberg-core`` and the other jars it needs, fetched once from Maven Central (see ``maven``), and
needs a JDK 17+.

``prefix_style`` reproduces how real servers announce their API prefix:

``"none"``       no prefix, unprefixed routes only (apache/iceberg-rest-fixture); one catalog
                 shared by every warehouse name
``"defaults"``   an opaque prefix in the config ``defaults`` (Lakekeeper)
``"overrides"``  an opaque prefix in ``overrides`` and a wrong one in ``defaults`` (Polaris, Unity)
``"any"``        no prefix, routes ``/v1/<warehouse>/...`` (each warehouse its own catalog)

Test switches, all off by default: ``auth_tokens`` (bearer tokens every request must carry),
``oauth_clients`` (``{client_id: secret}`` for ``POST /v1/oauth/tokens``, issuing tokens that live
``token_lifetime_seconds``; an expired one is answered 419), and ``vended_credentials`` (storage
credentials attached to ``loadTable``/``createTable`` answers and served by the credentials
endpoint, each with a fresh expiry).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lance_iceberg_ns.testing.build import LocalCatalogUnavailable, build_local_catalog

PREFIX_STYLES = ("none", "defaults", "overrides", "any")
__all__ = [
    "PREFIX_STYLES",
    "LocalCatalog",
    "LocalCatalogUnavailable",
    "VendedCredentials",
    "local_catalog",
    "stop_process",
]


@dataclass(frozen=True)
class VendedCredentials:
    """What the local catalog vends for tables under ``prefix``: Iceberg storage properties
    (``s3.access-key-id``, ``s3.endpoint``, ``gcs.oauth2.token``...) and how long they live; the
    expiry (``s3.session-token-expires-at-ms``...) is set on every answer."""

    prefix: str
    config: Mapping[str, str]
    lifetime_ms: int = 3_600_000


@dataclass
class LocalCatalog:
    """A running local catalog server."""

    endpoint: str
    data_dir: Path
    prefix_style: str
    log_file: Path
    _process: subprocess.Popen[bytes] = field(repr=False)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server (closing its stdin asks it to exit)."""
        if self._process.poll() is not None:
            return
        try:
            if self._process.stdin:
                self._process.stdin.close()
            self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    @property
    def running(self) -> bool:
        return self._process.poll() is None


def start_local_catalog(
    data_dir: str | os.PathLike[str],
    prefix_style: str = "none",
    port: int = 0,
    host: str = "127.0.0.1",
    warehouses: Sequence[str] = (),
    startup_timeout: float = 60.0,
    auth_tokens: Sequence[str] = (),
    oauth_clients: Mapping[str, str] | None = None,
    token_lifetime_seconds: float = 3600,
    advertised_token_lifetime_seconds: float | None = None,
    vended_credentials: VendedCredentials | None = None,
) -> LocalCatalog:
    """Start the server and wait until it listens; ``port=0`` picks a free port.

    ``warehouses`` restricts the server to those names (others answer 404, as Lakekeeper and
    Polaris do for an unknown warehouse); by default any warehouse is created on first use.
    Raises ``LocalCatalogUnavailable`` when Java or a jar is missing, ``RuntimeError`` when the
    server does not start.
    """
    if prefix_style not in PREFIX_STYLES:
        raise ValueError(f"prefix_style must be one of {PREFIX_STYLES}, got {prefix_style!r}")
    built = build_local_catalog()
    data_path = Path(data_dir).absolute()
    data_path.mkdir(parents=True, exist_ok=True)
    log_file = data_path / "local-catalog.log"
    command = [
        "java",
        "-Dsun.net.httpserver.nodelay=true",  # without it every response waits ~40 ms for Nagle
        # The JDK's server keeps at most 200 idle keep-alive connections by default and closes every
        # connection past that after its answer; a client that sends on one as it closes gets a reset
        # (a write is never sent again). Each bridge pools up to 64; idle ones still close after 30 s.
        "-Dsun.net.httpserver.maxIdleConnections=4096",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Xmx512m",
        "-cp",
        built.classpath,
        built.main_class,
        "--host", host,
        "--port", str(port),
        "--data-dir", str(data_path),
        "--prefix-style", prefix_style,
        "--warehouses", ",".join(warehouses),
        "--auth-tokens", ",".join(auth_tokens),
        "--oauth-clients", ",".join(f"{client}:{secret}" for client, secret in (oauth_clients or {}).items()),
        "--token-lifetime-seconds", str(token_lifetime_seconds),
    ]  # fmt: skip
    if advertised_token_lifetime_seconds is not None:
        command += ["--advertised-token-lifetime-seconds", str(advertised_token_lifetime_seconds)]
    if vended_credentials is not None:
        vending_file = data_path / "vending.json"
        vending = {"prefix": vended_credentials.prefix, "config": dict(vended_credentials.config),
                   "lifetime-ms": vended_credentials.lifetime_ms}  # fmt: skip
        vending_file.write_text(json.dumps(vending))
        command += ["--vending-file", str(vending_file)]
    with open(log_file, "ab") as log:
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
    endpoint = _wait_for_listening(process, startup_timeout, log_file)
    return LocalCatalog(endpoint, data_path, prefix_style, log_file, process)


def stop_process(process: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """Ask a child server to stop (SIGTERM: it finishes what is in flight), then kill it if it
    has not stopped within ``timeout`` seconds; a child must never outlive its test or demo."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _wait_for_listening(process: subprocess.Popen[bytes], timeout: float, log_file: Path) -> str:
    lines: list[bytes] = []
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline() if process.stdout else b""))
    reader.daemon = True
    reader.start()
    reader.join(timeout)
    line = lines[0].decode().strip() if lines else ""
    if not line.startswith("LISTENING "):
        process.kill()
        process.wait()
        log = log_file.read_text(errors="replace")[-4000:] if log_file.exists() else ""
        raise RuntimeError(f"The local Iceberg REST catalog did not start (got {line!r}):\n{log}")
    return line.split(" ", 1)[1]


@contextmanager
def local_catalog(
    data_dir: str | os.PathLike[str] | None = None,
    prefix_style: str = "none",
    warehouses: Sequence[str] = (),
    port: int = 0,
    **switches: Any,
) -> Iterator[LocalCatalog]:
    """Run a local Iceberg REST catalog for the duration of the block.

    With ``data_dir=None`` the catalog and its tables live in a temporary directory that is
    removed afterwards; otherwise they persist in ``data_dir``. ``switches`` are the test switches
    of ``start_local_catalog``.
    """
    temporary = data_dir is None
    path = Path(tempfile.mkdtemp(prefix="lance-iceberg-ns-catalog-")) if temporary else Path(data_dir)  # type: ignore[arg-type]
    server = start_local_catalog(path, prefix_style=prefix_style, warehouses=warehouses, port=port, **switches)
    try:
        yield server
    finally:
        server.stop()
        if temporary:
            shutil.rmtree(path, ignore_errors=True)
