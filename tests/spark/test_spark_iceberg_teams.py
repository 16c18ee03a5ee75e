"""docs/spark-iceberg-teams.md runs: its spark-defaults build the Spark session (Spark's own Iceberg
REST catalog, logging in with the page's OAuth2 credential), its Python blocks write the Lance
table, and each SQL statement answers what the page says after its ``--``.

Runs on the environment's PySpark, with the page's block for that Spark: 4.1 in the main
environment, 3.5 in ``.venv-pyspark35`` (``scripts/test.sh``), as tests/spark/test_spark_iceberg.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lance_iceberg_ns.spark import local_spark_session
from lance_iceberg_ns.testing import local_catalog
from lance_iceberg_ns.testing.iceberg_spark import ICEBERG_SPARK_RUNTIMES, iceberg_spark_runtime_jar

from ..doc_blocks import code_blocks, with_live_values
from ..helpers import fresh_spark_jvm
from .test_spark_iceberg import RUNTIME, pyspark

PAGE = Path(__file__).resolve().parents[2] / "docs" / "spark-iceberg-teams.md"


def spark_defaults(endpoint: str) -> dict[str, str]:
    """The page's spark-defaults block for this Spark, on the live catalog. Each block's Maven
    package must be a runtime pinned for its Spark, every pinned runtime must have a block, and the
    blocks must differ in nothing else; the package is taken from the project's cache (fetched from
    Maven Central once) rather than through Ivy in each session."""
    blocks = [block for block in code_blocks(PAGE, "properties") if "spark.jars.packages" in block.code]
    by_package = {}
    for block in blocks:
        settings = dict(line.split(None, 1) for line in with_live_values(block.code, endpoint, Path()).splitlines())
        by_package[settings.pop("spark.jars.packages")] = settings
    assert sorted(by_package) == sorted(runtime.coordinates for runtime in ICEBERG_SPARK_RUNTIMES.values())
    assert all(settings == by_package[RUNTIME.coordinates] for settings in by_package.values())
    return {**by_package[RUNTIME.coordinates], "spark.jars": str(iceberg_spark_runtime_jar(pyspark.__version__))}


def statements() -> list[tuple[str, str]]:
    """Each SQL statement of the page with the result its comment gives."""
    pairs = []
    for block in code_blocks(PAGE, "sql"):
        for line in block.code.splitlines():
            statement, _, expected = line.partition("--")
            pairs.append((statement.strip().rstrip(";"), expected.strip()))
    return pairs


def answer(spark: Any, statement: str) -> str:
    """What the statement printed, as text (rows' values), or ``error: <Java's message>``."""
    try:
        rows = spark.sql(statement).collect()
    except Exception as failure:  # Py4J or PySpark's own error classes
        java = getattr(failure, "java_exception", None)
        return f"error: {java if java is not None else failure}"
    return " ".join(str(value) for row in rows for value in row)


def test_the_page_runs_in_spark_with_its_iceberg_catalog(tmp_path: Path) -> None:
    root = tmp_path / "lance"
    root.mkdir()
    with local_catalog(tmp_path / "catalog", prefix_style="defaults", oauth_clients={"job": "secret"}) as catalog:
        fresh_spark_jvm()  # spark.jars and the Iceberg extensions take effect only in a new JVM
        spark = local_spark_session("lance-iceberg-ns docs: Spark teams", config=spark_defaults(catalog.endpoint))
        try:
            names: dict[str, Any] = {"spark": spark}
            for block in code_blocks(PAGE):
                code = with_live_values(block.code, catalog.endpoint, root)
                exec(compile(code, f"{block.page}:{block.line}", "exec"), names)  # noqa: S102
            checked = statements()
            assert len(checked) >= 8
            for statement, expected in checked:
                got = answer(spark, statement)
                if expected.startswith("error:"):
                    assert got.startswith("error:") and expected.removeprefix("error:").strip() in got, (statement, got)
                else:
                    assert not got.startswith("error:") and expected in got.split(), (statement, got)
        finally:
            spark.stop()
            fresh_spark_jvm()
