"""The official apache/iceberg-rest-fixture image (no prefix, unprefixed routes only), through
testcontainers. Skipped, with the reason, where no Docker engine runs. The whole suite can also
be pointed at it with LANCE_ICEBERG_NS_TEST_SERVER=docker."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
from lance_namespace import CreateNamespaceRequest, ListTablesRequest

from lance_iceberg_ns import IcebergLanceNamespace

from .docker_fixture import docker_rest_fixture


def test_round_trip_against_the_official_rest_fixture(tmp_path: Path) -> None:
    with docker_rest_fixture() as server, IcebergLanceNamespace(endpoint=server.endpoint, root=str(tmp_path)) as ns:
        ns.create_namespace(CreateNamespaceRequest(id=["wh", "db"]))
        lance.write_dataset(pa.table({"x": [1, 2]}), namespace_client=ns, table_id=["wh", "db", "t"])
        assert ns.list_tables(ListTablesRequest(id=["wh", "db"])).tables == ["t"]
        assert lance.dataset(namespace_client=ns, table_id=["wh", "db", "t"]).count_rows() == 2
        assert ns._catalogs.prefix("wh") == ""
