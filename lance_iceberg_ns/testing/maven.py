"""Pinned jars from Maven Central, fetched once into a cache folder.

Each jar is checked against the SHA-1 digest Maven Central publishes beside it, written to a
temporary name in its own folder and renamed into place: a cached jar is always whole and
verified, and processes fetching the same jar at once each rename a complete copy over the other.
A jar already in the cache is used without reaching the network.
"""

from __future__ import annotations

import hashlib
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

MAVEN_CENTRAL = "https://repo1.maven.org/maven2/"
# A mirror of Maven Central (a company's proxy) may stand in for it; the digests come from the same place.
REPOSITORY_VARIABLE = "LANCE_ICEBERG_NS_MAVEN_REPOSITORY"
FETCH_TIMEOUT_SECONDS = 60
PARALLEL_FETCHES = 8


class ArtifactUnavailable(RuntimeError):
    """A jar could not be fetched, or what was fetched does not match its published digest."""


@dataclass(frozen=True)
class Artifact:
    """A jar by its Maven coordinates, ``group:name:version`` or ``group:name:version:classifier``
    (a runner jar, say)."""

    group: str
    name: str
    version: str
    classifier: str = ""

    @classmethod
    def parse(cls, coordinates: str) -> Artifact:
        """``group:name:version[:classifier]`` as an Artifact; ValueError for anything else."""
        parts = coordinates.split(":")
        if len(parts) not in (3, 4) or not all(parts):
            raise ValueError(f"expected group:name:version[:classifier], got {coordinates!r}")
        return cls(*parts)

    @property
    def coordinates(self) -> str:
        return ":".join(part for part in (self.group, self.name, self.version, self.classifier) if part)

    @property
    def path(self) -> str:
        """The jar's path in a Maven repository (and in the cache)."""
        jar = "-".join(part for part in (self.name, self.version, self.classifier) if part)
        return f"{self.group.replace('.', '/')}/{self.name}/{self.version}/{jar}.jar"


def repository() -> str:
    """Where jars are fetched from: ``$LANCE_ICEBERG_NS_MAVEN_REPOSITORY`` if set, else Maven Central."""
    return (os.environ.get(REPOSITORY_VARIABLE) or MAVEN_CENTRAL).rstrip("/") + "/"


def fetch(artifacts: Sequence[Artifact], cache: Path) -> list[Path]:
    """The cached jar of each artifact, in order, fetching (in parallel) those not cached yet.
    Raises ArtifactUnavailable when one cannot be fetched or does not match its digest."""
    missing = [artifact for artifact in artifacts if not (cache / artifact.path).is_file()]
    if missing:
        with ThreadPoolExecutor(min(PARALLEL_FETCHES, len(missing))) as pool:
            list(pool.map(lambda artifact: _fetch_one(artifact, cache), missing))
    return [cache / artifact.path for artifact in artifacts]


def _fetch_one(artifact: Artifact, cache: Path) -> None:
    url = repository() + artifact.path
    target = cache / artifact.path
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.part-{os.getpid()}-{threading.get_ident()}")
    try:
        with urllib.request.urlopen(url + ".sha1", timeout=FETCH_TIMEOUT_SECONDS) as response:
            published = response.read(200).decode("ascii", "replace").split()  # "<hex>" or "<hex>  <file name>"
        digest = hashlib.sha1(usedforsecurity=False)
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_SECONDS) as response, open(partial, "wb") as sink:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                sink.write(chunk)
        if not published or digest.hexdigest() != published[0].lower():
            raise ArtifactUnavailable(f"{artifact.coordinates}: the jar from {_shown(url)} does not match its .sha1")
        os.replace(partial, target)
    except (urllib.error.URLError, OSError) as exc:  # HTTPError (a 404) is a URLError
        raise ArtifactUnavailable(f"could not fetch {artifact.coordinates} from {_shown(url)}: {exc}") from exc
    finally:
        partial.unlink(missing_ok=True)


def _shown(url: str) -> str:
    """``url`` for a message: without a user name or password a mirror's address may carry."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
