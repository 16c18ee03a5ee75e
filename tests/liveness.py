"""A server in its own process, and proof that it stays alive and answers others during an attack.

An attack that aborts the process (a failed allocation in Rust ends it at once) must not end the
test run with it, so the server under attack is ``lance-iceberg-ns serve`` as a subprocess.
``answered_while`` runs the attack on a thread while another client keeps asking a cheap question;
every one of those answers must come within a second, and the process must still be there after.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import requests

from lance_iceberg_ns.testing import stop_process

T = TypeVar("T")
PROBE_EVERY_SECONDS = 0.1
PROBE_DEADLINE_SECONDS = 1.0


@dataclass
class ServedProcess:
    """``lance-iceberg-ns serve`` running as a subprocess on a free loopback port."""

    uri: str
    process: subprocess.Popen[bytes]
    warehouse: str
    stderr_path: str = field(repr=False)

    @property
    def probe_url(self) -> str:
        """A cheap question any client may ask: whether the warehouse exists."""
        return f"{self.uri}/v1/namespace/{self.warehouse}/exists"

    def alive(self) -> bool:
        return self.process.poll() is None

    def stderr(self) -> str:
        with open(self.stderr_path, errors="replace") as handle:
            return handle.read()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def served_in_subprocess(
    endpoint: str,
    root: str,
    warehouse: str,
    properties: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    stderr_dir: str | None = None,
    popen_options: Mapping[str, Any] | None = None,
    wait: bool = True,
) -> Iterator[ServedProcess]:
    """Serve the catalog at ``endpoint`` with ``root`` from a child process; stopped on exit.
    ``popen_options`` go to ``subprocess.Popen`` (``stderr`` there replaces the file). With
    ``wait``, yielded once it answers (60 s at most)."""
    port = free_port()
    arguments = [sys.executable, "-m", "lance_iceberg_ns.cli", "serve", "--endpoint", endpoint, "--root", root]
    arguments += ["--port", str(port), *extra_args]
    for key, value in (properties or {}).items():
        arguments += ["-p", f"{key}={value}"]
    stderr_path = os.path.join(stderr_dir or root, f"serve-{port}.stderr")
    with open(stderr_path, "wb") as stderr:
        options: dict[str, Any] = {"stdout": subprocess.DEVNULL, "stderr": stderr, **(popen_options or {})}
        process = subprocess.Popen(arguments, env={**os.environ, **(env or {})}, **options)
    served = ServedProcess(f"http://127.0.0.1:{port}", process, warehouse, stderr_path)
    try:
        deadline = time.monotonic() + 60
        while wait and not answers(served):
            if not served.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"lance-iceberg-ns serve did not start: {served.stderr()[-2000:]}")
            time.sleep(0.1)
        yield served
    finally:
        stop_process(process)


def answers(served: ServedProcess) -> bool:
    """Whether the server answers its probe (whatever it answers) within the probe's deadline."""
    try:
        requests.post(served.probe_url, json={}, timeout=PROBE_DEADLINE_SECONDS)
    except requests.RequestException:
        return False
    return True


def is_running(pid: int) -> bool:
    """Whether the process is there and not a zombie (ended, waiting to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def answered_while(served: ServedProcess, attack: Callable[[], T]) -> T:
    """Run ``attack`` while another client asks the server a cheap question every tenth of a
    second; assert that each of those got an answer within a second and that the process lived.
    Returns what the attack returned (its exception is raised)."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = attack()
        except BaseException as exc:  # raised below, on the test's thread
            outcome["error"] = exc

    attacker = threading.Thread(target=run, name="attack", daemon=True)
    attacker.start()
    slowest = 0.0
    probes = 0
    while attacker.is_alive() or probes == 0:
        started = time.monotonic()
        try:
            requests.post(served.probe_url, json={}, timeout=PROBE_DEADLINE_SECONDS * 5)
        except requests.RequestException as exc:
            raise AssertionError(
                f"the server stopped answering during the attack ({exc}); alive={served.alive()}\n"
                f"{served.stderr()[-2000:]}"
            ) from None
        slowest = max(slowest, time.monotonic() - started)
        probes += 1
        attacker.join(PROBE_EVERY_SECONDS)
    assert served.alive(), f"the attack ended the server process:\n{served.stderr()[-2000:]}"
    assert slowest < PROBE_DEADLINE_SECONDS, f"another client waited {slowest:.2f} s during the attack"
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome.get("value")  # type: ignore[return-value]


@dataclass
class Served:
    """A served subprocess with a namespace for the attacks (``warehouse$db``) and a victim table."""

    process: ServedProcess
    namespace: str  # warehouse$db
    victim: Path  # the victim table's location

    @property
    def uri(self) -> str:
        return self.process.uri


ARROW_STREAM = {"content-type": "application/vnd.apache.arrow.stream"}


def post(uri: str, path: str, body: Any = None, data: bytes | None = None) -> requests.Response:
    """A POST of a JSON body, or of Arrow IPC stream bytes (``data``)."""
    if data is not None:
        return requests.post(f"{uri}{path}", data=data, headers=ARROW_STREAM, timeout=120)
    return requests.post(f"{uri}{path}", json=body if body is not None else {}, timeout=120)
