"""A real Azure Blob server for the tests: Azurite's ``azurite-blob`` (npm ``azurite``, Microsoft's
emulator) on loopback, with its own port, data directory and account key, stopped with the test run.

It is found on the ``PATH`` or in ``INSTALL_PREFIX`` (``npm install --prefix INSTALL_PREFIX
azurite``). The account is the emulator's ``devstoreaccount1`` with a key of the tests' own, which
carries the mark the tests look for in every log line.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs
from obstore.store import AzureStore

from .liveness import free_port
from .servers import LoopbackServer

ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "lanceIcebergNsAzuriteSECRETkey00"  # base64, as Azure keys are; "SECRET" for the log check
CONTAINER = "lance-tests"
START_SECONDS = 60
INSTALL_PREFIX = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "azurite"
INSTALL_HINT = f"npm install --prefix {INSTALL_PREFIX} azurite"


def executable() -> str | None:
    """The ``azurite-blob`` command, on the PATH or under ``INSTALL_PREFIX``; None when neither has it."""
    return shutil.which("azurite-blob") or shutil.which("azurite-blob", path=str(INSTALL_PREFIX / "node_modules/.bin"))


def _accepts(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Azurite(LoopbackServer):
    """One running ``azurite-blob``: its endpoint, the test container and the account."""

    @property
    def endpoint(self) -> str:
        """The account's URL, path style, as the emulator serves it."""
        return f"http://127.0.0.1:{self.port}/{ACCOUNT}"

    def storage_options(self) -> dict[str, str]:
        """Lance storage options for the container (the same names object_store reads)."""
        return {
            "azure_storage_account_name": ACCOUNT,
            "azure_storage_account_key": ACCOUNT_KEY,
            "azure_storage_endpoint": self.endpoint,
            "allow_http": "true",
        }

    def fresh_root(self, scheme: str = "az") -> str:
        """A new, empty prefix of the container, as an ``az://`` URI (or ``abfss://``, the form
        pyiceberg's FileIO opens as well)."""
        return f"{scheme}://{CONTAINER}/{uuid.uuid4().hex[:12]}"

    def store(self) -> AzureStore:
        """An obstore store for the container, configured directly (not through the bridge)."""
        return AzureStore(
            CONTAINER,
            account_name=ACCOUNT,
            account_key=ACCOUNT_KEY,
            endpoint=self.endpoint,
            client_options={"allow_http": True},
        )

    def filesystem(self) -> pafs.AzureFileSystem:
        """pyarrow's file system on the account (it makes containers, which obstore cannot)."""
        return pafs.AzureFileSystem(
            account_name=ACCOUNT,
            account_key=ACCOUNT_KEY,
            blob_storage_authority=f"127.0.0.1:{self.port}",
            blob_storage_scheme="http",
        )


def start() -> Azurite:
    """Start ``azurite-blob`` with a fresh directory on a free port; return once it listens and
    the test container is made."""
    command = executable()
    if command is None:
        raise RuntimeError(f"azurite-blob is not installed: {INSTALL_HINT}")
    directory = Path(tempfile.mkdtemp(prefix="azurite-"))
    port = free_port()
    log = directory.with_suffix(".log")
    arguments = [
        command,
        "--blobHost=127.0.0.1",
        f"--blobPort={port}",
        f"--location={directory}",
        "--skipApiVersionCheck",  # the clients' API versions may be newer than the emulator's
        "--disableTelemetry",
        "--silent",
    ]
    environment = {**os.environ, "AZURITE_ACCOUNTS": f"{ACCOUNT}:{ACCOUNT_KEY}"}
    with open(log, "wb") as output:
        process = subprocess.Popen(
            arguments, stdout=output, stderr=subprocess.STDOUT, env=environment, start_new_session=True
        )
    server = Azurite(process, directory, port, log)
    deadline = time.monotonic() + START_SECONDS
    while not _accepts(port):  # it listens once its stores are open
        if process.poll() is not None or time.monotonic() > deadline:
            said = log.read_text()[-2000:]
            server.stop()
            raise RuntimeError(f"azurite-blob did not start: {said}")
        time.sleep(0.1)
    server.filesystem().create_dir(CONTAINER)  # a top-level directory is a container
    return server
