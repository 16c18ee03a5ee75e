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
