"""What the servers a test run starts on loopback (SeaweedFS, Azurite) share."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path


def stop_server(process: subprocess.Popen[bytes], directory: Path, log: Path) -> None:
    """Stop a server started in its own process group (SIGTERM, then SIGKILL after 20 s), and
    remove its data directory and its log."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    shutil.rmtree(directory, ignore_errors=True)
    with contextlib.suppress(OSError):
        log.unlink()
