"""The namespace the managed-version tests share: versions managed by the catalog, on a local disk
or on S3 (every test using it runs on both)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lance_iceberg_ns import IcebergLanceNamespace

from ..stores import Store


@pytest.fixture
def managed_ns(endpoint: str, store: Store, db: list[str]) -> Iterator[IcebergLanceNamespace]:
    with store.namespace(endpoint, table_version_management="true") as ns:
        yield ns
