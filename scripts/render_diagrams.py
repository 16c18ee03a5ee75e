"""Renders every Graphviz diagram of the docs, ``docs/images/<name>.dot``, to ``<name>.svg`` beside it.

Each SVG carries the SHA-256 of the source it was drawn from, so ``tests/test_diagrams.py`` (and
``--check``) can tell a picture that no longer matches its source without Graphviz installed. The
layout's picture, ``architecture.dot``, is itself written from the package's imports
(``scripts/architecture.py``) before the pictures are drawn.

    .venv/bin/python scripts/render_diagrams.py           # after editing a .dot file (needs `dot`)
    .venv/bin/python scripts/render_diagrams.py --check   # exit 1 naming the stale pictures
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

IMAGES = Path(__file__).resolve().parent.parent / "docs" / "images"
ARCHITECTURE = "architecture.dot"


def _architecture_source() -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        import architecture
    finally:
        sys.path.pop(0)
    return architecture.dot_source()


def source_stamp(source: Path) -> str:
    """The comment an SVG drawn from ``source`` carries."""
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    return f"<!-- drawn from {source.name}, sha256 {digest} -->"


def render(source: Path) -> Path:
    svg = subprocess.run(["dot", "-Tsvg", str(source)], check=True, capture_output=True, text=True).stdout
    header, _, body = svg.partition("\n")  # the <?xml ...?> line stays first
    target = source.with_suffix(".svg")
    target.write_text(f"{header}\n{source_stamp(source)}\n{body}")
    return target


def stale(images: Path = IMAGES) -> list[str]:
    """The diagrams whose SVG is missing or was drawn from another version of the source, and the
    layout's source when it no longer follows the package's imports."""
    names = [
        source.name
        for source in sorted(images.glob("*.dot"))
        if not source.with_suffix(".svg").exists() or source_stamp(source) not in source.with_suffix(".svg").read_text()
    ]
    layout = images / ARCHITECTURE
    if images == IMAGES and (not layout.exists() or layout.read_text() != _architecture_source()):
        names = sorted({*names, ARCHITECTURE})
    return names


def main(argv: list[str]) -> int:
    if "--check" in argv:
        names = stale()
        for name in names:
            print(f"{name}: its SVG is stale; run scripts/render_diagrams.py")
        return 1 if names else 0
    (IMAGES / ARCHITECTURE).write_text(_architecture_source())
    for source in sorted(IMAGES.glob("*.dot")):
        print(render(source))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
