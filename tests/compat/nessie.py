"""Project Nessie's Iceberg REST catalog, from its runner jar on Maven Central
(``org.projectnessie.nessie:nessie-quarkus:<version>:runner``, checked against its ``.sha1`` and
cached with the other jars), run with ``java -jar`` on a Java 21 runtime (``java21``).

It keeps its commits in memory and its one warehouse on S3 (the session's SeaweedFS bucket):
Nessie's catalog takes object stores only (a ``file://`` warehouse is refused, "Unknown or
unsupported scheme: file"). Its Iceberg REST endpoint is ``/iceberg``; ``/v1/config?warehouse=``
answers the prefix ``main|<warehouse>`` (the default branch and the warehouse). It places every
table itself, under the warehouse's location, whatever location a create asks for.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

from lance_iceberg_ns.testing import stop_process
from lance_iceberg_ns.testing.build import cache_root
from lance_iceberg_ns.testing.maven import Artifact, fetch

from .. import seaweed
from ..liveness import free_port
from ..stores import Store
from .java21 import java21, java_options
from .outcomes import ServerFacts
from .servers import CompatServer

NESSIE_VERSION = "0.99.0"
WAREHOUSE = "compat"
START_SECONDS = 240  # a JVM of this size on a busy two-core machine
SECRET_NAME = "compats3"  # Nessie reads the S3 keys as the secret urn:nessie-secret:quarkus:compats3


RUNNER = Artifact("org.projectnessie.nessie", "nessie-quarkus", NESSIE_VERSION, "runner")


def server_facts() -> ServerFacts:
    return ServerFacts(
        key="nessie",
        title="Nessie",
        version=f"Nessie {NESSIE_VERSION} (runner jar, Java 21)",
        storage="S3 (SeaweedFS bucket)",
        setup="`java -jar nessie-quarkus-runner.jar`, in-memory version store, one warehouse on S3; "
        "`location_mode=catalog`",
    )


def runner_jar() -> Path:
    """The runner jar, from the cache or fetched once from Maven Central (checked by its .sha1)."""
    return fetch([RUNNER], cache_root() / "maven")[0]


@contextmanager
def nessie(storage: seaweed.SeaweedFS, directory: Path, facts: ServerFacts) -> Iterator[CompatServer]:
    """Nessie on a free port, its warehouse a fresh prefix of ``storage``'s bucket; stopped on exit."""
    jar = runner_jar()
    java = java21()
    location = storage.fresh_root()
    port, management_port = free_port(), free_port()
    settings = {
        "quarkus.http.host": "127.0.0.1",
        "quarkus.http.port": port,
        "quarkus.management.host": "127.0.0.1",
        "quarkus.management.port": management_port,
        "quarkus.http.access-log.enabled": "false",
        "quarkus.otel.sdk.disabled": "true",
        "quarkus.log.console.level": "WARN",
        "nessie.version.store.type": "IN_MEMORY",
        "nessie.catalog.default-warehouse": WAREHOUSE,
        f"nessie.catalog.warehouses.{WAREHOUSE}.location": location,
        "nessie.catalog.service.s3.default-options.endpoint": f"{storage.endpoint}/",
        "nessie.catalog.service.s3.default-options.path-style-access": "true",
        "nessie.catalog.service.s3.default-options.region": seaweed.REGION,
        "nessie.catalog.service.s3.default-options.access-key": f"urn:nessie-secret:quarkus:{SECRET_NAME}",
    }
    command = [java, "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *java_options()]
    command += [f"-D{key}={value}" for key, value in settings.items()] + ["-jar", str(jar)]
    # the keys reach Quarkus as environment variables, not on a command line others can read
    environment = {
        **os.environ,
        f"{SECRET_NAME.upper()}_NAME": seaweed.ACCESS_KEY,
        f"{SECRET_NAME.upper()}_SECRET": seaweed.SECRET_KEY,
    }
    log = directory / "nessie.log"
    with open(log, "wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=environment, cwd=directory)
    endpoint = f"http://127.0.0.1:{port}/iceberg"
    try:
        _wait_until_it_answers(process, endpoint, log)
        options = storage.storage_options()
        yield CompatServer(
            facts=facts,
            warehouse=WAREHOUSE,
            properties={
                "endpoint": endpoint,
                "root": location,
                "location_mode": "catalog",
                **{f"storage.{key}": value for key, value in options.items()},
            },
            store=Store("s3", location, options),
            register_area=f"{location}/registered",
        )
    finally:
        stop_process(process, timeout=30)


def _wait_until_it_answers(process: subprocess.Popen[bytes], endpoint: str, log: Path) -> None:
    """Wait until the catalog answers its config for the warehouse; RuntimeError with the end of
    its log if it stops or does not answer in ``START_SECONDS``."""
    deadline = time.monotonic() + START_SECONDS
    while True:
        with contextlib.suppress(requests.RequestException):
            if requests.get(f"{endpoint}/v1/config", params={"warehouse": WAREHOUSE}, timeout=5).ok:
                return
        if process.poll() is not None or time.monotonic() > deadline:
            said = log.read_text(errors="replace")[-3000:]
            stop_process(process)
            raise RuntimeError(f"Nessie did not start (exit code {process.returncode}): {said}")
        time.sleep(0.5)
