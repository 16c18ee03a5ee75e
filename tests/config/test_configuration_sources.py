"""Configuration reuse: a pyiceberg catalog configuration (file and PYICEBERG_CATALOG__ variables)
and LANCE_ICEBERG_* variables, with explicit arguments winning."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from lance_namespace.errors import InvalidInputError

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.config.sources import environment_properties, pyiceberg_catalog_properties, resolve_properties


@pytest.fixture
def pyiceberg_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PYICEBERG_HOME of its own, with no PYICEBERG_ or LANCE_ICEBERG_ variable leaking in."""
    import os

    for variable in list(os.environ):
        if variable.upper().startswith(("PYICEBERG_", "LANCE_ICEBERG_")):
            monkeypatch.delenv(variable)
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path))
    return tmp_path


def _write_config(home: Path, endpoint: str) -> None:
    (home / ".pyiceberg.yaml").write_text(
        "catalog:\n"
        "  prod:\n"
        f"    uri: {endpoint}\n"
        "    credential: client:file-SECRET\n"
        "    warehouse: ignored\n"
        "    header.X-Tenant: analytics\n"
        "    s3.region: eu-west-1\n"
        "    s3.endpoint: http://127.0.0.1:9000\n"
        "  glue:\n"
        "    type: glue\n"
    )


def test_pyiceberg_file_maps_to_bridge_properties(pyiceberg_home: Path) -> None:
    _write_config(pyiceberg_home, "http://catalog.example:8181")
    assert pyiceberg_catalog_properties("prod") == {
        "endpoint": "http://catalog.example:8181",
        "credential": "client:file-SECRET",
        "iceberg.header.x-tenant": "analytics",  # pyiceberg lowercases keys
        "iceberg.s3.region": "eu-west-1",
        "iceberg.s3.endpoint": "http://127.0.0.1:9000",
        "warehouses": "ignored",  # the catalog's warehouse is the one listed at the root
        "storage.aws_region": "eu-west-1",
        "storage.aws_endpoint": "http://127.0.0.1:9000",
        "storage.allow_http": "true",
    }


def test_pyiceberg_environment_variables_override_the_file(
    pyiceberg_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_config(pyiceberg_home, "http://from-file:8181")
    monkeypatch.setenv("PYICEBERG_CATALOG__PROD__URI", "http://from-env:8181")
    monkeypatch.setenv("PYICEBERG_CATALOG__STAGING__URI", "http://staging:8181")
    assert pyiceberg_catalog_properties("prod")["endpoint"] == "http://from-env:8181"
    assert pyiceberg_catalog_properties("staging") == {"endpoint": "http://staging:8181"}


def test_unknown_and_non_rest_catalogs_are_invalid_input(pyiceberg_home: Path) -> None:
    _write_config(pyiceberg_home, "http://catalog.example:8181")
    with pytest.raises(InvalidInputError, match="No pyiceberg catalog named 'nope'"):
        pyiceberg_catalog_properties("nope")
    with pytest.raises(InvalidInputError, match="only 'rest'"):
        pyiceberg_catalog_properties("glue")


def test_lance_iceberg_variables() -> None:
    environ = {
        "LANCE_ICEBERG_ENDPOINT": "http://env:8181",
        "LANCE_ICEBERG_ROOT": "s3://lake/lance",
        "LANCE_ICEBERG_OAUTH2_SERVER_URI": "http://idp/token",
        "LANCE_ICEBERG_STORAGE__AWS_REGION": "us-east-1",
        "LANCE_ICEBERG_ICEBERG__HEADER__X_TENANT": "t1",
        "LANCE_ICEBERG_CATALOG": "prod",
        "LANCE_ICEBERG_SCOPE": "",  # empty is unset
        "OTHER": "x",
    }
    assert environment_properties(environ) == {
        "endpoint": "http://env:8181",
        "root": "s3://lake/lance",
        "oauth2-server-uri": "http://idp/token",
        "storage.aws_region": "us-east-1",
        "iceberg.header.x-tenant": "t1",
    }


def test_precedence_explicit_over_environment_over_pyiceberg(pyiceberg_home: Path) -> None:
    _write_config(pyiceberg_home, "http://from-file:8181")
    environ = {"LANCE_ICEBERG_CATALOG": "prod", "LANCE_ICEBERG_ROOT": "/env/root", "LANCE_ICEBERG_SCOPE": "env"}
    resolved = resolve_properties({"scope": "explicit"}, environ=environ)
    assert resolved["endpoint"] == "http://from-file:8181"  # from the pyiceberg catalog
    assert resolved["root"] == "/env/root"  # from LANCE_ICEBERG_*
    assert resolved["scope"] == "explicit"  # explicit wins
    assert resolve_properties({}, catalog=None, environ={}) == {}


def test_bridge_from_a_pyiceberg_catalog_works_and_pickles_resolved(
    pyiceberg_home: Path, endpoint: str, warehouse: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYICEBERG_CATALOG__LOCAL__URI", endpoint)
    with IcebergLanceNamespace.from_pyiceberg_catalog("local", root=str(tmp_path / "lance")) as ns:
        ns.create_namespace({"id": [warehouse, "from_config"]})
        assert ns.namespace_exists({"id": [warehouse, "from_config"]}) is None
        monkeypatch.delenv("PYICEBERG_CATALOG__LOCAL__URI")  # an executor without the configuration
        copy = pickle.loads(pickle.dumps(ns))
        assert copy.settings.endpoint == endpoint and copy.settings.root == str(tmp_path / "lance")
    monkeypatch.setenv("LANCE_ICEBERG_ENDPOINT", endpoint)
    with IcebergLanceNamespace.from_environment(root=str(tmp_path)) as ns:
        assert ns.describe_namespace({"id": [warehouse, "from_config"]}).properties is not None
