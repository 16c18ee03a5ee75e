"""``connect("iceberg")`` is this bridge whether lance-namespace-impls is imported before or after it."""

from __future__ import annotations

import subprocess
import sys

import lance_namespace
import pytest

from lance_iceberg_ns import IcebergLanceNamespace, registry

CONNECT = """
import lance_namespace
{imports}
namespace = lance_namespace.connect({name!r}, {{"endpoint": "http://127.0.0.1:9", "root": "/tmp"}})
print(type(namespace).__module__ + "." + type(namespace).__name__)
"""


@pytest.mark.parametrize(
    "imports",
    ["import lance_namespace_impls\nimport lance_iceberg_ns", "import lance_iceberg_ns\nimport lance_namespace_impls"],
    ids=["impls_first", "impls_last"],
)
@pytest.mark.parametrize("name", registry.NAMES)
def test_connect_finds_the_bridge_in_either_import_order(imports: str, name: str) -> None:
    script = CONNECT.format(imports=imports, name=name)
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "lance_iceberg_ns.namespace.IcebergLanceNamespace"


def test_lancedb_connects_through_the_registry(ns: IcebergLanceNamespace, db: list[str], endpoint: str) -> None:
    import lance_namespace_impls  # noqa: F401  (imported after the bridge: it registers "iceberg" too)
    import lancedb
    import pyarrow as pa

    assert isinstance(lance_namespace.connect("iceberg", {"endpoint": endpoint}), IcebergLanceNamespace)
    connection = lancedb.connect_namespace("iceberg", dict(ns.properties))
    connection.create_table("made_by_lancedb", pa.table({"v": [1, 2]}), namespace_path=db)
    assert ns.list_tables({"id": db}).tables == ["made_by_lancedb"]  # in the Iceberg catalog, by the bridge


def test_the_registry_is_where_the_bridge_expects_it() -> None:
    """lance_namespace keeps its registry in a private dict; if a release moves it, say so here."""
    assert isinstance(getattr(lance_namespace, registry._REGISTRY_ATTRIBUTE, None), dict), (
        f"lance_namespace.{registry._REGISTRY_ATTRIBUTE} is gone: update lance_iceberg_ns/registry.py"
    )
