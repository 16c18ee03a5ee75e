"""The docs' pictures are drawn from the Graphviz sources beside them, and shown: an edited ``.dot``
whose SVG was not rendered again fails here, as does a picture no page shows."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"


def _render_diagrams():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("render_diagrams", ROOT / "scripts" / "render_diagrams.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
