"""The docs' pictures are drawn from the Graphviz sources beside them, and shown: an edited ``.dot``
whose SVG was not rendered again fails here, as does a picture no page shows."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from .helpers import script_module

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"


def _render_diagrams():  # type: ignore[no-untyped-def]
    return script_module(ROOT / "scripts" / "render_diagrams.py")


def test_every_diagram_svg_is_drawn_from_its_current_source() -> None:
    sources = sorted(IMAGES.glob("*.dot"))
    assert {source.stem for source in sources} >= {"system", "spark-write", "managed-commit", "architecture"}
    assert _render_diagrams().stale() == [], "run: .venv/bin/python scripts/render_diagrams.py"


def test_a_stale_or_missing_svg_is_reported(tmp_path: Path) -> None:
    render_diagrams = _render_diagrams()
    shutil.copy(IMAGES / "system.dot", tmp_path / "system.dot")
    shutil.copy(IMAGES / "system.svg", tmp_path / "system.svg")
    shutil.copy(IMAGES / "spark-write.dot", tmp_path / "spark-write.dot")
    assert render_diagrams.stale(tmp_path) == ["spark-write.dot"]  # no SVG
    (tmp_path / "system.dot").write_text((tmp_path / "system.dot").read_text() + "// edited\n")
    assert render_diagrams.stale(tmp_path) == ["spark-write.dot", "system.dot"]


def test_every_diagram_is_shown_on_a_page() -> None:
    pages = "\n".join(page.read_text() for page in (ROOT / "docs").glob("*.md")) + (ROOT / "README.md").read_text()
    unshown = [source.stem for source in IMAGES.glob("*.dot") if f"images/{source.stem}.svg" not in pages]
    assert not unshown, f"no page shows {unshown}"


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz (dot) is not installed")
def test_every_diagram_source_renders(tmp_path: Path) -> None:
    for source in IMAGES.glob("*.dot"):
        rendered = subprocess.run(["dot", "-Tsvg", str(source)], capture_output=True, text=True, check=False)
        assert rendered.returncode == 0 and "<svg" in rendered.stdout, (source.name, rendered.stderr)
        assert not rendered.stderr.strip(), (source.name, rendered.stderr)  # no Graphviz warnings


def _plot_results():  # type: ignore[no-untyped-def]
    pytest.importorskip("matplotlib", reason="the plots need the 'bench' extra")
    return script_module(ROOT / "bench" / "plot_results.py")


def test_the_result_plots_draw_every_row_of_the_saved_output(tmp_path: Path) -> None:
    plot_results = _plot_results()
    data_plane = (ROOT / "bench" / "results" / "data_plane.txt").read_text()
    spark = (ROOT / "bench" / "results" / "spark_pipeline.txt").read_text()
    labels = [row.label for row in plot_results.rows(data_plane)]
    assert {"our REST server", 'pylance RestAdapter("dir")', "pylance, dataset kept open"} <= set(labels)
    spark_labels = [row.label for row in plot_results.rows(spark)]
    assert "write: Spark -> Lance (catalog)" in spark_labels and "read: Parquet -> Spark" in spark_labels
    assert plot_results.plot_data_plane(data_plane, tmp_path / "data-plane.png").stat().st_size > 10_000
    assert plot_results.plot_spark(spark, tmp_path / "spark-pipeline.png").stat().st_size > 10_000
    performance = (ROOT / "docs" / "performance.md").read_text()
    for image in ("data-plane.png", "spark-pipeline.png", "list-tables-latency.png"):
        assert (IMAGES / image).exists() and f"images/{image}" in performance, image
