"""Small helpers shared by tests."""

from __future__ import annotations

import lance
import pyarrow as pa
from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType


def other_client(endpoint: str, warehouse: str) -> RestCatalog:
    """pyiceberg used directly, as another team's job would: no bridge involved."""
    catalog = load_catalog(f"other-{warehouse}", type="rest", uri=endpoint, warehouse=warehouse)
    assert isinstance(catalog, RestCatalog)
    return catalog


def create_plain_iceberg_table(endpoint: str, warehouse: str, identifier: tuple[str, ...], location: str) -> None:
    other_client(endpoint, warehouse).create_table(
        identifier,
        schema=Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType())),
        location=location,
    )


def write_lance(location: str, rows: int = 3) -> lance.LanceDataset:
    return lance.write_dataset(pa.table({"id": list(range(rows))}), location)
