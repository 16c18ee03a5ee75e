"""Security: identifiers and locations cannot leave the storage root, and a REST server with
tokens configured refuses every route without one (bodies bounded, see test_bad_input)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import requests

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.server import serve_in_background
from lance_iceberg_ns.server.routes import ROUTES

# Valid names that look like they might climb out of the root, and must not.
TRICKY_NAMES = ["a..b", "...", "..a", "~", "%2e%2e", "%2F", "$HOME", "名前", "a:b", "C:", "-rf", "*"]


@pytest.mark.parametrize("name", TRICKY_NAMES)
def test_derived_locations_stay_under_the_root(
    ns: IcebergLanceNamespace, db: list[str], lance_root: Path, name: str
) -> None:
    declared = ns.declare_table({"id": [*db, name]})
    assert declared.location is not None
    location = os.path.normpath(declared.location)
    assert location.startswith(str(lance_root) + os.sep), location
    assert os.path.basename(location).startswith(name + "-")  # the name, taken literally
    ns.drop_table({"id": [*db, name]})


def test_every_route_refuses_a_caller_without_the_token(endpoint: str, lance_root: Path, warehouse: str) -> None:
    properties = {"endpoint": endpoint, "root": str(lance_root)}
    with serve_in_background(properties=properties, auth_tokens=["route-SECRET-token"]) as running:
        checked = 0
        for route in ROUTES:
            path = route.path.replace("{id}", f"{warehouse}$db$t").replace("{index_name}", "idx")
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                answer = requests.request(route.method, f"{running.uri}{path}", headers=headers, json={})
                assert answer.status_code == 401, (route.operation, answer.status_code, answer.text[:200])
                assert answer.json()["code"] == 16 and "route-SECRET-token" not in answer.text
                checked += 1
        assert checked == 2 * len(ROUTES) >= 100
