"""Assemble and compile the local Iceberg REST catalog (a Java program) on first use.

The Iceberg runtime jar on PyPI carries Apache Iceberg's own REST request handlers
(`CatalogHandlers`) and `JdbcCatalog`, but its classes point at a relocated Jackson
(`org.apache.iceberg.shaded.com.fasterxml.jackson`) that the jar does not contain. The jar
does carry Parquet's relocated copy of the same Jackson, so we copy those classes under the
package name Iceberg expects, by rewriting the names in each class file's constant pool.
Everything is built once into a cache directory keyed by the inputs' content.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

ICEBERG_RUNTIME_JAR = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
PARQUET_JACKSON = b"org/apache/iceberg/shaded/org/apache/parquet/shaded/com/fasterxml/jackson/"
ICEBERG_JACKSON = b"org/apache/iceberg/shaded/com/fasterxml/jackson/"

# Debian packages: libxerial-sqlite-jdbc-java (with its JNI library) and libslf4j-java.
SYSTEM_JARS = ("/usr/share/java/sqlite-jdbc.jar", "/usr/share/java/slf4j-api.jar", "/usr/share/java/slf4j-simple.jar")
SYSTEM_PACKAGES = "libxerial-sqlite-jdbc-java libslf4j-java"
JAVA_SOURCES = ("LocalRestCatalog.java", "LocalFileIO.java", "Method.java")


class LocalCatalogUnavailable(RuntimeError):
    """A piece the local catalog needs (Java, the Iceberg jar, a Debian jar) is missing."""


@dataclass(frozen=True)
class BuiltCatalog:
    """The compiled program: the classpath to run it with and the main class."""

    classpath: str
    main_class: str = "org.apache.iceberg.rest.LocalRestCatalog"


def iceberg_runtime_jar() -> Path:
    try:
        import snowpark_connect_deps_iceberg
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise LocalCatalogUnavailable(
            "the local catalog needs the 'snowpark-connect-deps-iceberg' wheel (pip install 'lance-iceberg-ns[local]')"
        ) from exc
    jar = Path(snowpark_connect_deps_iceberg.__file__).parent / "jars" / ICEBERG_RUNTIME_JAR
    if not jar.is_file():
        raise LocalCatalogUnavailable(f"{jar} is missing from the snowpark-connect-deps-iceberg wheel")
    return jar


def _relocate_names(class_bytes: bytes) -> bytes:
    """Rewrite every UTF-8 constant that names Parquet's Jackson so that it names Iceberg's.

    Only the constant pool changes; UTF-8 constants are length-prefixed and nothing else in a
    class file refers to byte offsets inside the pool, so the rest is copied verbatim.
    """
    old_slash, new_slash = PARQUET_JACKSON, ICEBERG_JACKSON
    old_dot, new_dot = old_slash.replace(b"/", b"."), new_slash.replace(b"/", b".")
    out = bytearray(class_bytes[:10])
    (count,) = struct.unpack_from(">H", class_bytes, 8)
    pos, index = 10, 1
    fixed_sizes = {
        3: 4,
        4: 4,
        5: 8,
        6: 8,
        7: 2,
        8: 2,
        9: 4,
        10: 4,
        11: 4,
        12: 4,
        15: 3,
        16: 2,
        17: 4,
        18: 4,
        19: 2,
        20: 2,
    }
    while index < count:
        tag = class_bytes[pos]
        if tag == 1:
            (length,) = struct.unpack_from(">H", class_bytes, pos + 1)
            text = class_bytes[pos + 3 : pos + 3 + length].replace(old_slash, new_slash).replace(old_dot, new_dot)
            out += bytes([1]) + struct.pack(">H", len(text)) + text
            pos += 3 + length
        else:
            size = fixed_sizes[tag]
            out += class_bytes[pos : pos + 1 + size]
            pos += 1 + size
        index += 2 if tag in (5, 6) else 1
    out += class_bytes[pos:]
    return bytes(out)


def write_relocated_jackson(runtime_jar: Path, target: Path) -> None:
    """Write a jar holding Parquet's Jackson classes under Iceberg's relocated package name."""
    with zipfile.ZipFile(runtime_jar) as source, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as sink:
        for entry in source.infolist():
            name = entry.filename.encode()
            if not name.startswith(PARQUET_JACKSON) or entry.is_dir():
                continue
            data = source.read(entry)
            if name.endswith(b".class"):
                data = _relocate_names(data)
            sink.writestr(name.replace(PARQUET_JACKSON, ICEBERG_JACKSON).decode(), data)


def _java_source_texts() -> dict[str, bytes]:
    folder = resources.files("lance_iceberg_ns.testing") / "java"
    return {name: (folder / name).read_bytes() for name in JAVA_SOURCES}


def cache_root() -> Path:
    base = os.environ.get("LANCE_ICEBERG_NS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "lance-iceberg-ns"
    )
    return Path(base)


def build_local_catalog() -> BuiltCatalog:
    """Compile the local catalog if this combination of inputs has not been built yet."""
    if shutil.which("javac") is None or shutil.which("java") is None:
        raise LocalCatalogUnavailable("the local catalog needs a JDK (java and javac, 17 or newer) on PATH")
    missing = [jar for jar in SYSTEM_JARS if not os.path.exists(jar)]
    if missing:
        raise LocalCatalogUnavailable(
            f"the local catalog needs {', '.join(missing)}: apt-get install {SYSTEM_PACKAGES}"
        )
    runtime_jar = iceberg_runtime_jar()
    sources = _java_source_texts()
    digest = hashlib.sha256()
    for name in sorted(sources):
        digest.update(name.encode() + sources[name])
    for jar in (str(runtime_jar), *SYSTEM_JARS):
        digest.update(f"{os.path.realpath(jar)}:{os.path.getsize(jar)}".encode())
    build_dir = cache_root() / "local-catalog" / digest.hexdigest()[:16]
    jackson_jar, classes = build_dir / "iceberg-jackson.jar", build_dir / "classes"
    classpath = os.pathsep.join([str(classes), str(runtime_jar), str(jackson_jar), *SYSTEM_JARS])
    if (build_dir / "BUILT").exists():
        return BuiltCatalog(classpath)

    staging = build_dir.with_name(build_dir.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "src").mkdir(parents=True)
    write_relocated_jackson(runtime_jar, staging / "iceberg-jackson.jar")
    for name, text in sources.items():
        (staging / "src" / name).write_bytes(text)
    compile_classpath = os.pathsep.join([str(runtime_jar), str(staging / "iceberg-jackson.jar"), *SYSTEM_JARS])
    result = subprocess.run(
        ["javac", "-nowarn", "-encoding", "UTF-8", "-d", str(staging / "classes"), "-cp", compile_classpath]
        + [str(staging / "src" / name) for name in sources],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise LocalCatalogUnavailable(f"javac failed to compile the local catalog:\n{result.stderr}")
    (staging / "BUILT").write_text("ok\n")
    try:
        staging.rename(build_dir)
    except OSError:  # another process finished the same build first
        shutil.rmtree(staging, ignore_errors=True)
    return BuiltCatalog(classpath)
