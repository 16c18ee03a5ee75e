"""How the local catalog and the Spark tests get their jars: pinned coordinates, fetched once from a
Maven repository, checked against the published digest, and written whole or not at all.

A small HTTP server on loopback stands in for Maven Central here (Maven Central cannot be made to
serve a wrong digest); the real one is used by every test that starts the local catalog."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from lance_iceberg_ns.testing import LocalCatalogUnavailable
from lance_iceberg_ns.testing.build import CATALOG_ARTIFACTS, ICEBERG_VERSION
from lance_iceberg_ns.testing.iceberg_spark import iceberg_spark_runtime
from lance_iceberg_ns.testing.maven import REPOSITORY_VARIABLE, Artifact, ArtifactUnavailable, fetch

JAR = Artifact("org.example", "thing", "1.0")


class _Repository(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # quiet
        pass


@pytest.fixture
def repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, list[str]]]:
    """A Maven repository on loopback (its folder, and the paths it was asked for), named by
    ``$LANCE_ICEBERG_NS_MAVEN_REPOSITORY``."""
    folder, asked = tmp_path / "repository", []
    folder.mkdir()

    class Handler(_Repository):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(folder), **kwargs)  # type: ignore[arg-type]

        def do_GET(self) -> None:
            asked.append(self.path)
            super().do_GET()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv(REPOSITORY_VARIABLE, f"http://127.0.0.1:{server.server_address[1]}/maven2")
    yield folder, asked
    server.shutdown()
    server.server_close()


def _publish(folder: Path, artifact: Artifact, content: bytes, digest: str | None = None) -> None:
    jar = folder / "maven2" / artifact.path
    jar.parent.mkdir(parents=True, exist_ok=True)
    jar.write_bytes(content)
    published = digest or hashlib.sha1(content).hexdigest()
    jar.with_name(jar.name + ".sha1").write_text(f"{published}  {jar.name}\n")


def test_a_jar_is_fetched_once_and_then_read_from_the_cache(repository: tuple[Path, list[str]], tmp_path: Path) -> None:
    folder, asked = repository
    _publish(folder, JAR, b"jar bytes")
    cache = tmp_path / "cache"
    assert fetch([JAR], cache) == [cache / "org/example/thing/1.0/thing-1.0.jar"]
    assert (cache / JAR.path).read_bytes() == b"jar bytes"
    fetched = len(asked)
    assert fetch([JAR], cache) == [cache / JAR.path] and len(asked) == fetched == 2  # the .sha1 and the jar


def test_a_jar_that_does_not_match_its_published_digest_is_refused_and_not_cached(
    repository: tuple[Path, list[str]], tmp_path: Path
) -> None:
    folder, _ = repository
    _publish(folder, JAR, b"tampered bytes", digest=hashlib.sha1(b"the real bytes").hexdigest())
    cache = tmp_path / "cache"
    with pytest.raises(ArtifactUnavailable, match="does not match its .sha1"):
        fetch([JAR], cache)
    assert [path.name for path in (cache / JAR.path).parent.iterdir()] == []  # no jar, no partial file


def test_a_missing_jar_names_its_coordinates(repository: tuple[Path, list[str]], tmp_path: Path) -> None:
    with pytest.raises(ArtifactUnavailable, match="org.example:thing:1.0.*404"):
        fetch([JAR], tmp_path / "cache")


def test_concurrent_first_fetches_leave_one_whole_jar(repository: tuple[Path, list[str]], tmp_path: Path) -> None:
    folder, _ = repository
    content = bytes(range(256)) * 40_000  # 10 MB, so that the writes overlap
    _publish(folder, JAR, content)
    cache = tmp_path / "cache"
    with ThreadPoolExecutor(6) as pool:
        paths = list(pool.map(lambda _: fetch([JAR], cache)[0], range(6)))
    assert set(paths) == {cache / JAR.path} and paths[0].read_bytes() == content
    assert [path.name for path in paths[0].parent.iterdir()] == ["thing-1.0.jar"]


def test_an_artifact_is_parsed_from_its_coordinates() -> None:
    assert Artifact.parse("org.apache.iceberg:iceberg-core:1.12.0").path == (
        "org/apache/iceberg/iceberg-core/1.12.0/iceberg-core-1.12.0.jar"
    )
    with pytest.raises(ValueError, match="group:name:version"):
        Artifact.parse("org.apache.iceberg:iceberg-core")


def test_the_local_catalog_is_built_on_one_iceberg_version_and_one_of_each_jar() -> None:
    names = [artifact.name for artifact in CATALOG_ARTIFACTS]
    assert sorted(names) == sorted(set(names))
    assert {a.version for a in CATALOG_ARTIFACTS if a.group == "org.apache.iceberg"} == {ICEBERG_VERSION}


@pytest.mark.parametrize(
    "spark, runtime",
    [
        ("3.5.9", "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.12.0"),
        ("4.1.4", "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"),
    ],
)
def test_each_pinned_spark_gets_the_iceberg_runtime_built_for_it(spark: str, runtime: str) -> None:
    assert iceberg_spark_runtime(spark).coordinates == runtime


def test_a_spark_without_a_pinned_iceberg_runtime_is_refused() -> None:
    with pytest.raises(LocalCatalogUnavailable, match=r"Spark 4.3.0 \(only 3.5, 4.1\)"):
        iceberg_spark_runtime("4.3.0")


def test_a_mirror_address_with_credentials_is_not_shown_in_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REPOSITORY_VARIABLE, "http://builder:s3cret@127.0.0.1:9/maven2")  # nothing listens on 9
    with pytest.raises(ArtifactUnavailable) as failure:
        fetch([JAR], tmp_path / "cache")
    assert "127.0.0.1:9/maven2/org/example/thing" in str(failure.value) and "s3cret" not in str(failure.value)
