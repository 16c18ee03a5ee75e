"""A hostile client's scene: ``lance-iceberg-ns serve`` with static storage secrets, the operator's
own namespace, a victim's table and another team's dataset outside the root (the ``scene``
fixture, made available to every test module by ``conftest``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lance
import pyarrow as pa
import pytest
import requests

from lance_iceberg_ns import IcebergLanceNamespace

if TYPE_CHECKING:  # the server extra: not in every test environment (the PySpark 3.5 one has none)
    from lance_iceberg_ns.server import RunningServer

from .conftest import SECRET_MARK
from .helpers import catalog_state, files_under

STATIC_SECRET = f"static-{SECRET_MARK}-key"
STATIC_STORAGE = {  # secrets by name, by an alias's name, and inside a URL
    "storage.aws_secret_access_key": STATIC_SECRET,
    "storage.azure_storage_master_key": f"master-{SECRET_MARK}",
    "storage.azure_client_assertion": f"assertion-{SECRET_MARK}",
    "storage.aws_endpoint": f"http://user:{SECRET_MARK}-pw@127.0.0.1:9",
    "storage.allow_http": "true",
    "storage.region": "eu-1",
}


@dataclass
class Scene:
    """The server, its operator's own namespace, a victim's table and another team's dataset."""

    server: RunningServer
    operator: IcebergLanceNamespace
    db: list[str]
    endpoint: str
    victim_location: Path  # a table of the warehouse, owned by its entry
    outsider: Path  # another team's dataset, outside the root

    def call(self, operation: str, table: list[str] | str, body: dict[str, Any] | None = None, **query: Any) -> Any:
        kind = "namespace" if operation.startswith(("namespace/", "ns:")) else "table"
        path_id = table if isinstance(table, str) else "$".join(table)
        action = operation.removeprefix("ns:")
        url = f"{self.server.uri}/v1/{kind}/{path_id}/{action}"
        method = "GET" if action in ("list", "table/list") else "POST"
        return requests.request(method, url, json=body if method == "POST" else None, params=query, timeout=30)

    def untouched(self) -> tuple[object, ...]:
        return (
            files_under(self.victim_location),
            files_under(self.outsider),
            catalog_state(self.endpoint, self.db[0]),
        )


@pytest.fixture
def scene(endpoint: str, lance_root: Path, db: list[str], tmp_path: Path) -> Iterator[Scene]:
    from lance_iceberg_ns.server import serve_in_background

    outsider = tmp_path / "other-team" / "payroll"
    lance.write_dataset(pa.table({"salary": [1, 2]}), str(outsider))
    properties = {"endpoint": endpoint, "root": str(lance_root), **STATIC_STORAGE}
    with (
        IcebergLanceNamespace(**properties) as operator,
        serve_in_background(properties=properties) as server,
    ):
        victim = lance.write_dataset(pa.table({"v": [1, 2, 3]}), namespace_client=operator, table_id=[*db, "victim"])
        yield Scene(server, operator, db, endpoint, Path(victim.uri), outsider)


def refused(answer: requests.Response, status: int, code: int) -> None:
    assert (answer.status_code, answer.json()["code"]) == (status, code), answer.text[:300]
