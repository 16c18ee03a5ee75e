"""Lint, format and type checks run with the suite, so CI holds the code to them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "command",
    [
        [sys.executable, "-m", "ruff", "check", "."],
        [sys.executable, "-m", "ruff", "format", "--check", "."],
        [sys.executable, "-m", "mypy", "lance_iceberg_ns"],
    ],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_code_passes(command: list[str]) -> None:
    result = subprocess.run(command, cwd=REPOSITORY, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_only_the_datasets_module_opens_lance_datasets() -> None:
    """Opening a dataset has one place (``datasets``), so its errors and options are handled
    once; the demo shows users pylance's own API and is the exception."""
    package = REPOSITORY / "lance_iceberg_ns"
    openers = sorted(
        str(source.relative_to(package))
        for source in package.rglob("*.py")
        if "lance.dataset(" in source.read_text() or "LanceDataset(" in source.read_text()
    )
    assert openers == ["datasets.py", "demo.py"]
