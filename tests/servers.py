"""What the servers a test run starts on loopback (SeaweedFS, Azurite) share."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class LoopbackServer:
    """A server a test run started in its own process group on 127.0.0.1: its process, its data
    directory, its (first) port and its log."""

    process: subprocess.Popen[bytes]
    directory: Path
    port: int
    log: Path = field(repr=False)

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL after 20 s), and remove its data directory and its log."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        shutil.rmtree(self.directory, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.log.unlink()
