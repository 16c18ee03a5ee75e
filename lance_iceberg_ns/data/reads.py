"""Reads: counting rows, queries and search, query plans and table statistics."""

from __future__ import annotations

import lance

from lance_iceberg_ns.data.failures import pylance_failures


def count_rows(dataset: lance.LanceDataset, predicate: str | None = None) -> int:
    """Rows of the dataset, those matching the SQL ``predicate`` if given."""
    with pylance_failures("count_table_rows"):
        return int(dataset.count_rows(filter=predicate or None))
