"""Renders every Graphviz diagram of the docs, ``docs/images/<name>.dot``, to ``<name>.svg`` beside it.

Each SVG carries the SHA-256 of the source it was drawn from, so ``tests/test_diagrams.py`` (and
``--check``) can tell a picture that no longer matches its source without Graphviz installed.

    .venv/bin/python scripts/render_diagrams.py           # after editing a .dot file (needs `dot`)
    .venv/bin/python scripts/render_diagrams.py --check   # exit 1 naming the stale pictures
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

IMAGES = Path(__file__).resolve().parent.parent / "docs" / "images"


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
    """The diagrams whose SVG is missing or was drawn from another version of the source."""
    return [
        source.name
        for source in sorted(images.glob("*.dot"))
        if not source.with_suffix(".svg").exists() or source_stamp(source) not in source.with_suffix(".svg").read_text()
    ]


def main(argv: list[str]) -> int:
    if "--check" in argv:
        names = stale()
        for name in names:
            print(f"{name}: its SVG is stale; run scripts/render_diagrams.py")
        return 1 if names else 0
    for source in sorted(IMAGES.glob("*.dot")):
        print(render(source))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
