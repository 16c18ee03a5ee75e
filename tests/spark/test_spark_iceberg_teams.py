"""docs/spark-iceberg-teams.md runs: its spark-defaults build the Spark session (Spark's own Iceberg
REST catalog, logging in with the page's OAuth2 credential), its Python blocks write the Lance
table, and each SQL statement answers what the page says after its ``--``.

Runs on PySpark 3.5 (the Iceberg runtime jar of the ``local`` extra is built for Spark 3.5 and
Scala 2.12): ``scripts/test.sh`` runs it in ``.venv-pyspark35``, as tests/spark/test_spark_iceberg.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..helpers import skip_unless_pyspark_35

skip_unless_pyspark_35()

from lance_iceberg_ns.spark import local_spark_session  # noqa: E402
from lance_iceberg_ns.testing import local_catalog  # noqa: E402
from lance_iceberg_ns.testing.build import spark_rest_client_jars  # noqa: E402

from ..doc_blocks import code_blocks, with_live_values  # noqa: E402
from .test_spark_iceberg import _fresh_jvm  # noqa: E402

PAGE = Path(__file__).resolve().parents[2] / "docs" / "spark-iceberg-teams.md"


def spark_defaults(endpoint: str) -> dict[str, str]:
    """The page's first spark-defaults block, on the live catalog; its Maven package is swapped for
    the same runtime's local jars (the tests do not download)."""
    block = code_blocks(PAGE, "properties")[0]
    settings = dict(line.split(None, 1) for line in with_live_values(block.code, endpoint, Path()).splitlines())
    assert settings.pop("spark.jars.packages").startswith("org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:")
    return {**settings, "spark.jars": ",".join(str(jar) for jar in spark_rest_client_jars())}


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
        _fresh_jvm()  # spark.jars and the Iceberg extensions take effect only in a new JVM
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
            _fresh_jvm()
