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
import re
import shutil
import struct
import subprocess
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

ICEBERG_RUNTIME_JAR = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
PARQUET_JACKSON = b"org/apache/iceberg/shaded/org/apache/parquet/shaded/com/fasterxml/jackson/"
ICEBERG_JACKSON = b"org/apache/iceberg/shaded/com/fasterxml/jackson/"
# A relocation: a package (slash form, with its trailing slash) and the name it is copied under.
Relocation = tuple[bytes, bytes]
Relocations = Sequence[Relocation]
JACKSON_RELOCATION: Relocations = ((PARQUET_JACKSON, ICEBERG_JACKSON),)
# The size of each constant pool entry after its tag byte, except UTF-8 (tag 1, length-prefixed).
_CONSTANT_SIZES = {
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

# Debian packages: libxerial-sqlite-jdbc-java (with its JNI library) and libslf4j-java.
SYSTEM_JARS = ("/usr/share/java/sqlite-jdbc.jar", "/usr/share/java/slf4j-api.jar", "/usr/share/java/slf4j-simple.jar")
SYSTEM_PACKAGES = "libxerial-sqlite-jdbc-java libslf4j-java"
JAVA_SOURCES = ("LocalRestCatalog.java", "LocalFileIO.java", "Method.java")
# Apache HttpClient 5 for Iceberg's REST client in Spark, from Debian: libhttpclient5-java, libhttpcore5-java.
HTTP_CLIENT_JARS = (
    "/usr/share/java/httpclient5.jar",
    "/usr/share/java/httpcore5.jar",
    "/usr/share/java/httpcore5-h2.jar",
)
HTTP_CLIENT_PACKAGES = "libhttpclient5-java libhttpcore5-java"
HTTP_CLIENT_STAND_IN = "TlsSocketStrategy.java"
HC5_RELOCATION: Relocations = (
    (b"org/apache/hc/client5/", b"org/apache/iceberg/shaded/org/apache/hc/client5/"),
    (b"org/apache/hc/core5/", b"org/apache/iceberg/shaded/org/apache/hc/core5/"),
)


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


def relocate_names(class_bytes: bytes, relocations: Relocations) -> bytes:
    """Rewrite every UTF-8 constant that names a package of ``relocations`` so that it names the
    package's new name, in slash and in dot form.

    Only the constant pool changes; UTF-8 constants are length-prefixed and nothing else in a
    class file refers to byte offsets inside the pool, so the rest is copied verbatim.
    """
    renames = {old: new for pair in relocations for old, new in (pair, _dotted(pair))}
    pattern = re.compile(b"|".join(re.escape(old) for old in sorted(renames, key=len, reverse=True)))
    out = bytearray(class_bytes[:10])
    (count,) = struct.unpack_from(">H", class_bytes, 8)
    pos, index = 10, 1
    while index < count:
        tag = class_bytes[pos]
        if tag == 1:
            (length,) = struct.unpack_from(">H", class_bytes, pos + 1)
            text = pattern.sub(lambda found: renames[found.group()], class_bytes[pos + 3 : pos + 3 + length])
            out += bytes([1]) + struct.pack(">H", len(text)) + text
            pos += 3 + length
        else:
            size = _CONSTANT_SIZES[tag]
            out += class_bytes[pos : pos + 1 + size]
            pos += 1 + size
        index += 2 if tag in (5, 6) else 1
    out += class_bytes[pos:]
    return bytes(out)


def _dotted(relocation: Relocation) -> Relocation:
    old, new = relocation
    return old.replace(b"/", b"."), new.replace(b"/", b".")


def write_relocated(sources: Sequence[Path], target: Path, relocations: Relocations) -> None:
    """Write a jar holding the entries of ``sources`` under the packages of ``relocations``, moved
    to the packages' new names (class files rewritten by ``relocate_names``)."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as sink:
        for jar in sources:
            with zipfile.ZipFile(jar) as source:
                for entry in source.infolist():
                    name = entry.filename.encode()
                    moved = next((new + name[len(old) :] for old, new in relocations if name.startswith(old)), None)
                    if moved is None or entry.is_dir():
                        continue
                    data = source.read(entry)
                    if name.endswith(b".class"):
                        data = relocate_names(data, relocations)
                    sink.writestr(moved.decode(), data)


def write_relocated_jackson(runtime_jar: Path, target: Path) -> None:
    """Write a jar holding Parquet's Jackson classes under Iceberg's relocated package name."""
    write_relocated([runtime_jar], target, JACKSON_RELOCATION)


def _java_source_texts() -> dict[str, bytes]:
    folder = resources.files("lance_iceberg_ns.testing") / "java"
    return {name: (folder / name).read_bytes() for name in JAVA_SOURCES}


def cache_root() -> Path:
    base = os.environ.get("LANCE_ICEBERG_NS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "lance-iceberg-ns"
    )
    return Path(base)


def _compile(classes: Path, sources: Sequence[Path], classpath: Sequence[str | Path]) -> None:
    """javac ``sources`` into ``classes``; LocalCatalogUnavailable with javac's message if it fails."""
    command = ["javac", "-nowarn", "-encoding", "UTF-8", "-d", str(classes)]
    if classpath:
        command += ["-cp", os.pathsep.join(str(jar) for jar in classpath)]
    result = subprocess.run(command + [str(source) for source in sources], capture_output=True, text=True)
    if result.returncode != 0:
        raise LocalCatalogUnavailable(f"javac failed:\n{result.stderr}")


def _input_digest(texts: dict[str, bytes], jars: Sequence[str | Path]) -> str:
    """A build's cache key: its source texts by name, and each jar's real path and size."""
    digest = hashlib.sha256()
    for name in sorted(texts):
        digest.update(name.encode() + texts[name])
    for jar in jars:
        digest.update(f"{os.path.realpath(jar)}:{os.path.getsize(jar)}".encode())
    return digest.hexdigest()[:16]


def _built_once(build_dir: Path, build: Callable[[Path], None]) -> Path:
    """``build_dir``, made by ``build`` (given an empty staging directory) unless it exists: built
    aside and renamed into place, so concurrent first uses do not collide."""
    if (build_dir / "BUILT").exists():
        return build_dir
    staging = build_dir.with_name(build_dir.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        build(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    (staging / "BUILT").write_text("ok\n")
    try:
        staging.rename(build_dir)
    except OSError:  # another process finished the same build first
        shutil.rmtree(staging, ignore_errors=True)
    return build_dir


def _require(what: str, tools: tuple[str, ...], jars: tuple[str, ...], packages: str) -> None:
    """LocalCatalogUnavailable, saying what to install, unless the JDK's ``tools`` are on PATH and
    the Debian ``jars`` are in place."""
    if any(shutil.which(tool) is None for tool in tools):
        raise LocalCatalogUnavailable(f"{what} needs a JDK ({' and '.join(tools)}, 17 or newer) on PATH")
    missing = [jar for jar in jars if not os.path.exists(jar)]
    if missing:
        raise LocalCatalogUnavailable(f"{what} needs {', '.join(missing)}: apt-get install {packages}")


def build_local_catalog() -> BuiltCatalog:
    """Compile the local catalog if this combination of inputs has not been built yet."""
    _require("the local catalog", ("java", "javac"), SYSTEM_JARS, SYSTEM_PACKAGES)
    runtime_jar = iceberg_runtime_jar()
    sources = _java_source_texts()

    def compile_catalog(staging: Path) -> None:
        (staging / "src").mkdir()
        write_relocated_jackson(runtime_jar, staging / "iceberg-jackson.jar")
        for name, text in sources.items():
            (staging / "src" / name).write_bytes(text)
        compile_classpath: list[str | Path] = [runtime_jar, staging / "iceberg-jackson.jar", *SYSTEM_JARS]
        _compile(staging / "classes", [staging / "src" / name for name in sources], compile_classpath)

    build_dir = cache_root() / "local-catalog" / _input_digest(sources, (runtime_jar, *SYSTEM_JARS))
    _built_once(build_dir, compile_catalog)
    jackson_jar, classes = build_dir / "iceberg-jackson.jar", build_dir / "classes"
    return BuiltCatalog(os.pathsep.join([str(classes), str(runtime_jar), str(jackson_jar), *SYSTEM_JARS]))


def spark_rest_client_jars() -> list[Path]:
    """What Spark needs to reach a catalog of ``type=rest``, for ``spark.jars``: the Iceberg runtime
    jar, and the relocated Jackson and Apache HttpClient 5 that Iceberg's REST client
    (``HTTPClient``) was compiled against, which the runtime jar leaves out (with the stand-in of
    ``TlsSocketStrategy.java``). Built once per combination of inputs."""
    _require("Iceberg's REST client for Spark", ("javac",), HTTP_CLIENT_JARS, HTTP_CLIENT_PACKAGES)
    runtime_jar = iceberg_runtime_jar()
    stand_in = (resources.files("lance_iceberg_ns.testing") / "java" / HTTP_CLIENT_STAND_IN).read_bytes()

    def relocate(staging: Path) -> None:
        write_relocated_jackson(runtime_jar, staging / "iceberg-jackson.jar")
        http_client = staging / "iceberg-httpclient5.jar"
        write_relocated([Path(jar) for jar in HTTP_CLIENT_JARS], http_client, HC5_RELOCATION)
        (staging / HTTP_CLIENT_STAND_IN).write_bytes(stand_in)
        _compile(staging / "classes", [staging / HTTP_CLIENT_STAND_IN], [])
        with zipfile.ZipFile(http_client, "a", zipfile.ZIP_DEFLATED) as sink:
            for compiled in sorted((staging / "classes").rglob("*.class")):
                sink.write(compiled, compiled.relative_to(staging / "classes").as_posix())

    recipe = {
        HTTP_CLIENT_STAND_IN: stand_in,
        "relocations": repr((JACKSON_RELOCATION, HC5_RELOCATION)).encode(),
    }
    build_dir = cache_root() / "spark-rest-client" / _input_digest(recipe, (runtime_jar, *HTTP_CLIENT_JARS))
    _built_once(build_dir, relocate)
    return [runtime_jar, build_dir / "iceberg-jackson.jar", build_dir / "iceberg-httpclient5.jar"]
