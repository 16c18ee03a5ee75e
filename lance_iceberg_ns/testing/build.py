"""Compile the local Iceberg REST catalog (a Java program) on first use.

Apache Iceberg's REST request handlers (``CatalogHandlers``) and ``JdbcCatalog`` are in
``iceberg-core``. The program is compiled against it, the jars it depends on, SQLite's JDBC driver
and slf4j: official jars from Maven Central, pinned and fetched once (``maven``). The classes are
built once into a cache folder keyed by the sources and the jars' coordinates.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from lance_iceberg_ns.testing.maven import Artifact, ArtifactUnavailable, fetch

ICEBERG_VERSION = "1.12.0"
# iceberg-core and what it needs at run time, as Maven resolves its pom (mvn dependency:list
# -DincludeScope=runtime), with SQLite's JDBC driver and slf4j's simple logger.
CATALOG_ARTIFACTS = tuple(
    Artifact.parse(coordinates)
    for coordinates in (
        f"org.apache.iceberg:iceberg-core:{ICEBERG_VERSION}",
        f"org.apache.iceberg:iceberg-api:{ICEBERG_VERSION}",
        f"org.apache.iceberg:iceberg-common:{ICEBERG_VERSION}",
        f"org.apache.iceberg:iceberg-bundled-guava:{ICEBERG_VERSION}",
        "com.fasterxml.jackson.core:jackson-core:2.22.2",
        "com.fasterxml.jackson.core:jackson-databind:2.22.2",
        "com.fasterxml.jackson.core:jackson-annotations:2.22",
        "com.github.ben-manes.caffeine:caffeine:3.2.4",
        "com.google.errorprone:error_prone_annotations:2.49.0",
        "org.jspecify:jspecify:1.0.0",
        "org.apache.httpcomponents.client5:httpclient5:5.6.4",
        "org.apache.httpcomponents.core5:httpcore5:5.4.3",
        "org.apache.httpcomponents.core5:httpcore5-h2:5.4.3",
        "org.apache.avro:avro:1.12.2",
        "org.apache.commons:commons-compress:1.28.0",
        "commons-codec:commons-codec:1.19.0",
        "commons-io:commons-io:2.20.0",
        "org.apache.commons:commons-lang3:3.18.0",
        "io.airlift:aircompressor:2.0.3",
        "org.roaringbitmap:RoaringBitmap:1.6.23",
        "org.slf4j:slf4j-api:2.0.18",
        "org.slf4j:slf4j-simple:2.0.18",
        "org.xerial:sqlite-jdbc:3.54.1.0",
    )
)
JAVA_SOURCES = ("LocalRestCatalog.java", "LocalFileIO.java")


class LocalCatalogUnavailable(RuntimeError):
    """A piece the local catalog needs (a JDK, a jar from Maven Central) is missing."""


@dataclass(frozen=True)
class BuiltCatalog:
    """The compiled program: the classpath to run it with and the main class."""

    classpath: str
    main_class: str = "org.apache.iceberg.rest.LocalRestCatalog"


def _java_source_texts() -> dict[str, bytes]:
    folder = resources.files("lance_iceberg_ns.testing") / "java"
    return {name: (folder / name).read_bytes() for name in JAVA_SOURCES}


def cache_root() -> Path:
    base = os.environ.get("LANCE_ICEBERG_NS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "lance-iceberg-ns"
    )
    return Path(base)


def maven_jars(artifacts: Sequence[Artifact]) -> list[Path]:
    """The jars of ``artifacts`` from the cache (``<cache_root>/maven``), fetched from Maven Central
    the first time; LocalCatalogUnavailable when one cannot be fetched."""
    try:
        return fetch(artifacts, cache_root() / "maven")
    except ArtifactUnavailable as exc:
        raise LocalCatalogUnavailable(str(exc)) from exc


def _compile(classes: Path, sources: Sequence[Path], classpath: Sequence[str | Path]) -> None:
    """javac ``sources`` into ``classes``; LocalCatalogUnavailable with javac's message if it fails."""
    command = ["javac", "-nowarn", "-encoding", "UTF-8", "-d", str(classes)]
    if classpath:
        command += ["-cp", os.pathsep.join(str(jar) for jar in classpath)]
    result = subprocess.run(command + [str(source) for source in sources], capture_output=True, text=True)
    if result.returncode != 0:
        raise LocalCatalogUnavailable(f"javac failed:\n{result.stderr}")


def _input_digest(texts: dict[str, bytes], artifacts: Sequence[Artifact]) -> str:
    """A build's cache key: its source texts by name and the coordinates of the jars it is compiled against."""
    digest = hashlib.sha256()
    for name in sorted(texts):
        digest.update(name.encode() + texts[name])
    for artifact in artifacts:
        digest.update(artifact.coordinates.encode() + b"\n")
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


def build_local_catalog() -> BuiltCatalog:
    """Compile the local catalog if this combination of inputs has not been built yet; raises
    LocalCatalogUnavailable without a JDK or when a jar cannot be fetched."""
    if shutil.which("java") is None or shutil.which("javac") is None:
        raise LocalCatalogUnavailable("the local catalog needs a JDK (java and javac, 17 or newer) on PATH")
    jars = maven_jars(CATALOG_ARTIFACTS)
    sources = _java_source_texts()

    def compile_catalog(staging: Path) -> None:
        (staging / "src").mkdir()
        for name, text in sources.items():
            (staging / "src" / name).write_bytes(text)
        _compile(staging / "classes", [staging / "src" / name for name in sources], jars)

    build_dir = cache_root() / "local-catalog" / _input_digest(sources, CATALOG_ARTIFACTS)
    _built_once(build_dir, compile_catalog)
    return BuiltCatalog(os.pathsep.join([str(build_dir / "classes"), *map(str, jars)]))
