"""Apache Iceberg's Spark runtime for a Spark version: the official jar on Maven Central with
Iceberg's ``SparkCatalog`` and its REST client (``type=rest``), which carries its own relocated
Jackson and Apache HttpClient 5, so Spark needs no other jar to reach an Iceberg REST catalog."""

from __future__ import annotations

from pathlib import Path

from lance_iceberg_ns.testing.build import LocalCatalogUnavailable, maven_jars
from lance_iceberg_ns.testing.maven import Artifact

# Spark (major, minor) -> the runtime built for it (and its Scala); Iceberg has none for Spark 4.2 or later yet.
ICEBERG_SPARK_RUNTIMES = {
    (3, 5): Artifact.parse("org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.12.0"),
    (4, 1): Artifact.parse("org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"),
}


def iceberg_spark_runtime(spark_version: str) -> Artifact:
    """The Iceberg runtime for Spark ``spark_version`` (``"3.5.8"``, ``"4.1.4"``); LocalCatalogUnavailable
    for a Spark it is not pinned for."""
    major, minor = (int(part) for part in (spark_version.split(".") + ["0"])[:2])
    runtime = ICEBERG_SPARK_RUNTIMES.get((major, minor))
    if runtime is None:
        pinned = ", ".join(f"{major}.{minor}" for major, minor in ICEBERG_SPARK_RUNTIMES)
        raise LocalCatalogUnavailable(f"no Iceberg Spark runtime is pinned for Spark {spark_version} (only {pinned})")
    return runtime


def iceberg_spark_runtime_jar(spark_version: str) -> Path:
    """The runtime jar for Spark ``spark_version``, for ``spark.jars``: fetched from Maven Central
    into the cache the first time."""
    return maven_jars([iceberg_spark_runtime(spark_version)])[0]
