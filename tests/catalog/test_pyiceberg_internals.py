"""The private names of pyiceberg the bridge borrows (lance_iceberg_ns.catalog.pyiceberg_internals) exist
in the installed release, and the check names the one a release moved or renamed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.rest.auth import OAuth2TokenProvider

from lance_iceberg_ns import IcebergLanceNamespace
from lance_iceberg_ns.catalog import pyiceberg_internals

PACKAGE = Path(pyiceberg_internals.__file__).parent


def test_every_borrowed_name_exists_in_the_installed_pyiceberg(ns: IcebergLanceNamespace, warehouse: str) -> None:
    catalog = ns.catalog(warehouse)  # a real catalog, constructed against the real server
    provider = OAuth2TokenProvider("client", "secret", "http://127.0.0.1:1/token")
    missing = pyiceberg_internals.missing_internals(catalog, provider)
    assert not missing, f"pyiceberg changed what the bridge borrows: {missing}"


@pytest.mark.parametrize(("module", "path"), pyiceberg_internals.BORROWED)
def test_a_name_gone_from_pyiceberg_is_named(monkeypatch: pytest.MonkeyPatch, module: str, path: str) -> None:
    owner_path, _, name = path.rpartition(".")
    owner = __import__(module, fromlist=["_"])
    for part in filter(None, owner_path.split(".")):
        owner = getattr(owner, part)
    pyiceberg_internals._lookup.cache_clear()
    monkeypatch.delattr(owner, name)
    try:
        assert pyiceberg_internals.missing_internals() == [f"{module}.{path}"]
    finally:
        pyiceberg_internals._lookup.cache_clear()


def test_an_instance_attribute_gone_from_pyiceberg_is_named(ns: IcebergLanceNamespace, warehouse: str) -> None:
    class Changed(RestCatalog):  # as if a release no longer set _supported_endpoints
        def __init__(self) -> None:
            pass

    assert pyiceberg_internals.missing_internals(Changed()) == [
        f"{__name__}.RestCatalog._session",
        f"{__name__}.RestCatalog._supported_endpoints",
        f"{__name__}.RestCatalog._auth_manager",
        f"{__name__}.RestCatalog._namespace_separator",
    ]


def test_no_module_but_pyiceberg_internals_uses_a_private_pyiceberg_name() -> None:
    borrowed = {path.rpartition(".")[2] for _module, path in pyiceberg_internals.BORROWED}
    # instance attributes too, but not _lock: our own classes have locks of that name
    borrowed |= {attribute for _cls, attribute in pyiceberg_internals.BORROWED_ON_INSTANCES} - {"_lock"}
    hooks = {"_create_session", "_refresh_token"}  # overridden in catalogs.py, called by pyiceberg
    offenders = []
    for source in PACKAGE.rglob("*.py"):
        if source.name == "pyiceberg_internals.py":
            continue
        text = source.read_text()
        for name in sorted(borrowed):
            for match in re.finditer(rf"(?<![\w]){re.escape(name)}\b", text):
                line = text[: match.start()].count("\n") + 1
                if not (name in hooks and re.search(rf"def {name}\(", text.splitlines()[line - 1])):
                    offenders.append(f"{source.relative_to(PACKAGE)}:{line}: {name}")
    assert not offenders, offenders
