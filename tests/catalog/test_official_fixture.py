"""The official apache/iceberg-rest-fixture image (no prefix, unprefixed routes only), through
testcontainers. Skipped, with the reason, where no Docker engine runs. The whole suite can also
be pointed at it with LANCE_ICEBERG_NS_TEST_SERVER=docker, or at the compose stack (the fixture
over MinIO) with LANCE_ICEBERG_NS_TEST_SERVER=compose."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
from lance_namespace import CreateNamespaceRequest, ListTablesRequest

from lance_iceberg_ns import IcebergLanceNamespace

from ..docker_fixture import COMPOSE_DIRECTORY, compose_rest_fixture, docker_rest_fixture


def test_round_trip_against_the_official_rest_fixture(tmp_path: Path) -> None:
    with docker_rest_fixture() as server, IcebergLanceNamespace(endpoint=server.endpoint, root=str(tmp_path)) as ns:
        ns.create_namespace(CreateNamespaceRequest(id=["wh", "db"]))
        lance.write_dataset(pa.table({"x": [1, 2]}), namespace_client=ns, table_id=["wh", "db", "t"])
        assert ns.list_tables(ListTablesRequest(id=["wh", "db"])).tables == ["t"]
        assert lance.dataset(namespace_client=ns, table_id=["wh", "db", "t"]).count_rows() == 2
        assert ns.prefix("wh") == ""


def test_round_trip_through_the_compose_stack_on_minio() -> None:
    storage = {
        "storage.aws_access_key_id": "admin",
        "storage.aws_secret_access_key": "password",
        "storage.aws_endpoint": "http://127.0.0.1:9000",
        "storage.aws_region": "us-east-1",
        "storage.allow_http": "true",
    }
    with (
        compose_rest_fixture() as server,
        IcebergLanceNamespace(endpoint=server.endpoint, root="s3://warehouse/lance", **storage) as ns,
    ):
        ns.create_namespace(CreateNamespaceRequest(id=["wh", "compose"], mode="exist_ok"))
        table_id = ["wh", "compose", "t"]
        lance.write_dataset(pa.table({"x": [1, 2, 3]}), namespace_client=ns, table_id=table_id, mode="overwrite")
        assert lance.dataset(namespace_client=ns, table_id=table_id).count_rows() == 3


def test_compose_files_wire_the_services_together() -> None:
    import yaml

    stack = yaml.safe_load((COMPOSE_DIRECTORY / "docker-compose.yml").read_text())["services"]
    assert {"rest", "minio", "minio-setup", "spark"} <= set(stack)
    assert stack["rest"]["environment"]["CATALOG_S3_ENDPOINT"] == "http://minio:9000"
    assert stack["spark"]["environment"]["LANCE_ICEBERG_ENDPOINT"] == "http://rest:8181"
    spark_conf = (COMPOSE_DIRECTORY / "spark-defaults.conf").read_text()
    assert "spark.sql.catalog.lake.uri              http://rest:8181" in spark_conf
    lakekeeper = yaml.safe_load((COMPOSE_DIRECTORY / "lakekeeper.yml").read_text())["services"]
    assert {"db", "migrate", "lakekeeper", "minio", "setup"} <= set(lakekeeper)
    assert "management/v1/warehouse" in lakekeeper["setup"]["command"][0]
