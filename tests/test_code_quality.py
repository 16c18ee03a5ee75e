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
    assert openers == ["data/datasets.py", "demo.py"]


def test_no_class_is_over_450_lines_and_no_module_over_600() -> None:
    """The shape of the house: small rooms (the local test catalog aside). The namespace's class is
    held by its own rule instead: one line per operation (below)."""
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
            if (
                isinstance(node, ast.ClassDef)
                and node.name != "IcebergLanceNamespace"
                and node.end_lineno
                and node.end_lineno - node.lineno + 1 > 450
            ):
                too_long.append(f"{source.relative_to(package)}:{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert too_long == []


def test_every_operation_of_the_namespace_hands_off_in_one_line_under_its_own_name() -> None:
    """``IcebergLanceNamespace`` is a table of contents: each operation's body (after its
    docstring) is one ``return self._<component>.<the same name>(...)``, so one name can be
    followed from the edge to the module that owns it."""
    import ast

    tree = ast.parse((REPOSITORY / "lance_iceberg_ns" / "namespace.py").read_text())
    facade = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "IcebergLanceNamespace")
    operations = [
        node
        for node in facade.body
        if isinstance(node, ast.FunctionDef)
        and any("operation" in ast.unparse(decorator) for decorator in node.decorator_list)
    ]
    assert len(operations) > 40
    astray = []
    for method in operations:
        body = [statement for statement in method.body if not isinstance(statement, ast.Expr)]
        call = body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == method.name
            and isinstance(call.func.value, ast.Attribute)
            and isinstance(call.func.value.value, ast.Name)
            and call.func.value.value.id == "self"
        ):
            astray.append(method.name)
    assert astray == []


def test_operations_keep_their_types_for_mypy(tmp_path: Path) -> None:
    """The operation decorator keeps each method's signature: to mypy (and an editor)
    ``describe_table`` takes a DescribeTableRequest and answers a DescribeTableResponse."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from lance_iceberg_ns import IcebergLanceNamespace\n"
        "reveal_type(IcebergLanceNamespace.describe_table)\n"
        "reveal_type(IcebergLanceNamespace.purge_tables)\n"
    )
    result = subprocess.run([sys.executable, "-m", "mypy", str(probe)], cwd=REPOSITORY, capture_output=True, text=True)
    revealed = [line for line in result.stdout.splitlines() if "Revealed type" in line]
    assert len(revealed) == 2, result.stdout + result.stderr
    assert "request: lance_namespace_urllib3_client.models.describe_table_request.DescribeTableRequest" in revealed[0]
    assert revealed[0].endswith('describe_table_response.DescribeTableResponse"')
    assert "deleted_before: datetime.datetime | None =" in revealed[1] and revealed[1].endswith('list[list[str]]"')
