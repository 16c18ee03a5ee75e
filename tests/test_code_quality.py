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
    assert openers == ["demo.py", "storage/datasets.py"]


def _imports_of(module: str) -> set[str]:
    """The modules a module of the package imports, directly or through other modules of the
    package (imports made only for type checking count too: they say what a module knows of)."""
    import ast

    package = REPOSITORY / "lance_iceberg_ns"
    seen: set[str] = set()
    found: set[str] = set()
    pending = [module]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        path = package.joinpath(*name.split(".")[1:])
        source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        if not source.exists():
            continue
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            for target in imported:
                found.add(target.split(".")[0])
                if target.startswith("lance_iceberg_ns.") and (
                    package.joinpath(*target.split(".")[1:]).with_suffix(".py").exists()
                    or package.joinpath(*target.split(".")[1:]).is_dir()
                ):
                    found.add(target)
                    pending.append(target)
    return found


CATALOG_HALF = [
    "lance_iceberg_ns.catalog.warehouses",
    "lance_iceberg_ns.catalog.companions",
    "lance_iceberg_ns.catalog.namespaces",
    "lance_iceberg_ns.catalog.listing",
    "lance_iceberg_ns.catalog.managed_state",
]
STORAGE_AND_DATA = [
    "lance_iceberg_ns.storage.locations",
    "lance_iceberg_ns.storage.ownership",
    "lance_iceberg_ns.storage.datasets",
    "lance_iceberg_ns.storage.options",
    "lance_iceberg_ns.storage.credentials",
    "lance_iceberg_ns.data",
    "lance_iceberg_ns.data.opening",
    "lance_iceberg_ns.data.plane",
    "lance_iceberg_ns.data.reads",
    "lance_iceberg_ns.data.writes",
    "lance_iceberg_ns.data.indices",
    "lance_iceberg_ns.data.tags",
    "lance_iceberg_ns.data.schema",
]


@pytest.mark.parametrize("module", CATALOG_HALF)
def test_the_catalog_half_never_imports_lance(module: str) -> None:
    assert "lance" not in _imports_of(module), f"{module} reaches Lance"


@pytest.mark.parametrize("module", STORAGE_AND_DATA)
def test_storage_and_the_data_plane_never_import_pyiceberg(module: str) -> None:
    imported = _imports_of(module)
    assert "pyiceberg" not in imported, f"{module} reaches pyiceberg"
    assert (
        "lance_iceberg_ns.catalog.warehouses" not in imported and "lance_iceberg_ns.catalog.companions" not in imported
    )


def test_the_boundary_check_sees_indirect_imports() -> None:
    """The check itself: the namespace reaches both halves, through the modules it imports."""
    imported = _imports_of("lance_iceberg_ns.namespace")
    assert {"lance", "pyiceberg", "lance_iceberg_ns.catalog.companions", "lance_iceberg_ns.data.plane"} <= imported


def test_no_class_is_over_450_lines_and_no_module_over_600() -> None:
    """The shape of the house: small rooms (the local test catalog, a build helper, aside)."""
    import ast

    package = REPOSITORY / "lance_iceberg_ns"
    too_long = []
    for source in package.rglob("*.py"):
        if "testing" in source.relative_to(package).parts:
            continue
        text = source.read_text()
        if len(text.splitlines()) > 600:
            too_long.append(f"{source.relative_to(package)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno and node.end_lineno - node.lineno + 1 > 450:
                too_long.append(f"{source.relative_to(package)}:{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert too_long == []


def test_operations_keep_their_types_for_mypy(tmp_path: Path) -> None:
    """The operation decorator keeps each method's signature: to mypy (and an editor)
    ``describe_table`` takes a DescribeTableRequest and answers a DescribeTableResponse."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from lance_iceberg_ns import IcebergLanceNamespace\n"
        "reveal_type(IcebergLanceNamespace.describe_table)\n"
        "reveal_type(IcebergLanceNamespace.purge_tables)\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", str(probe)], cwd=REPOSITORY, capture_output=True, text=True
    )
    revealed = [line for line in result.stdout.splitlines() if "Revealed type" in line]
    assert len(revealed) == 2, result.stdout + result.stderr
    assert "request: lance_namespace_urllib3_client.models.describe_table_request.DescribeTableRequest" in revealed[0]
    assert revealed[0].endswith('describe_table_response.DescribeTableResponse"')
    assert "deleted_before: datetime.datetime | None =" in revealed[1] and revealed[1].endswith('list[list[str]]"')
