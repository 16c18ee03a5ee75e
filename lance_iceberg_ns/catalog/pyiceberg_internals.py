"""Every private name of pyiceberg the bridge relies on (and one of requests), behind functions of
ours, so that an upgrade that moves or renames one breaks here, by name, and nowhere else.

``BORROWED`` is the inventory; ``missing_internals`` lists what an installed release lacks, and
``tests/catalog/test_pyiceberg_internals.py`` fails naming it. pyproject pins pyiceberg below its next
minor release, so a new release is taken on deliberately, with that test run. Two of the names
are hooks ``catalogs.BridgeRestCatalog`` overrides, which pyiceberg calls itself:
``RestCatalog._create_session`` (from its constructor) and ``RestCatalog._refresh_token`` (from
its retry on 401/419); they are listed here, and their base implementations called from here.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from typing import Any

import requests
from tenacity import retry

# (module, attribute path) of what is borrowed from classes and modules.
BORROWED: tuple[tuple[str, str], ...] = (
    ("pyiceberg.catalog.rest", "_RETRY_ARGS"),
    ("pyiceberg.catalog.rest.response", "_handle_non_200_response"),
    ("pyiceberg.catalog.rest", "RestCatalog._create_session"),
    ("pyiceberg.catalog.rest", "RestCatalog._refresh_token"),
    ("pyiceberg.catalog.rest", "RestCatalog._check_endpoint"),
    ("pyiceberg.catalog.rest", "RestCatalog._split_identifier_for_path"),
    ("pyiceberg.catalog.rest", "RestCatalog._response_to_table"),
    ("pyiceberg.catalog.rest", "RestCatalog._load_credentials"),
    ("pyiceberg.catalog.rest.auth", "OAuth2TokenProvider._refresh_token"),
)
# (class name, attribute) set in constructors, so checked on instances of those classes.
BORROWED_ON_INSTANCES: tuple[tuple[str, str], ...] = (
    ("RestCatalog", "_session"),
    ("RestCatalog", "_supported_endpoints"),
    ("RestCatalog", "_auth_manager"),
    ("RestCatalog", "_namespace_separator"),
    ("OAuth2TokenProvider", "_lock"),
    ("Response", "_content"),  # requests'
)


_GONE = object()


@functools.cache
def _lookup(module: str, path: str) -> Any:
    """The borrowed object; ``AttributeError`` naming it when the installed release lacks it."""
    found: Any = importlib.import_module(module)
    for part in path.split("."):
        found = getattr(found, part, _GONE)
        if found is _GONE:
            raise AttributeError(
                f"{module}.{path} is gone from the installed release; "
                "lance_iceberg_ns.catalog.pyiceberg_internals needs updating"
            )
    return found


def missing_internals(*instances: object) -> list[str]:
    """The borrowed names the installed releases lack, as ``module.Class.name``; also checks the
    instance attributes on the given objects (a ``RestCatalog``, an ``OAuth2TokenProvider``) and
    on a requests ``Response``."""
    missing = []
    for module, path in BORROWED:
        try:
            _lookup(module, path)
        except (AttributeError, ImportError):
            missing.append(f"{module}.{path}")
    for instance in (*instances, requests.Response()):
        classes = {cls.__name__ for cls in type(instance).__mro__}
        for class_name, attribute in BORROWED_ON_INSTANCES:
            if class_name in classes and not hasattr(instance, attribute):
                missing.append(f"{type(instance).__module__}.{class_name}.{attribute}")
    return missing


# --- the functions the bridge calls -----------------------------------------------------------


def retry_on_expired_token() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """pyiceberg's own retry of a catalog call: on 401/419 refresh the token, then retry once."""
    return retry(**_lookup("pyiceberg.catalog.rest", "_RETRY_ARGS"))  # type: ignore[no-any-return]


def raise_error_answer(exc: requests.HTTPError, errors: Mapping[int, type[Exception]]) -> None:
    """Raise pyiceberg's exception for an error answer, as its own calls do (``errors`` maps
    statuses to the exception types of the call)."""
    _lookup("pyiceberg.catalog.rest.response", "_handle_non_200_response")(exc, dict(errors))


def session(catalog: Any) -> requests.Session:
    """The catalog's session: its auth, headers, adapters and retries."""
    return catalog._session  # type: ignore[no-any-return]


def base_session(catalog: Any) -> requests.Session:
    """A session as pyiceberg's ``RestCatalog`` makes it (for an override of the hook)."""
    return _lookup("pyiceberg.catalog.rest", "RestCatalog._create_session")(catalog)  # type: ignore[no-any-return]


def auth_manager(catalog: Any) -> Any:
    """The auth manager pyiceberg made for the catalog's session."""
    return catalog._auth_manager


def set_auth_manager(catalog: Any, manager: Any) -> None:
    """Give the catalog another session's auth manager (the config's: one token for both)."""
    catalog._auth_manager = manager


def base_refresh_token(catalog: Any) -> None:
    """pyiceberg's own reaction to a 401/419 (it refreshes only its legacy OAuth2 manager)."""
    _lookup("pyiceberg.catalog.rest", "RestCatalog._refresh_token")(catalog)


def refresh_oauth2_token(provider: Any) -> None:
    """Fetch a new token for pyiceberg's ``OAuth2TokenProvider`` now, under its lock."""
    with provider._lock:
        _lookup("pyiceberg.catalog.rest.auth", "OAuth2TokenProvider._refresh_token")(provider)


def check_endpoint(catalog: Any, endpoint: Any) -> None:
    """Raise ``NotImplementedError`` when the server did not advertise ``endpoint``."""
    _lookup("pyiceberg.catalog.rest", "RestCatalog._check_endpoint")(catalog, endpoint)


def supports_endpoint(catalog: Any, endpoint: Any) -> bool:
    """Whether the server advertised ``endpoint`` in its config answer."""
    return endpoint in catalog._supported_endpoints


def namespace_separator(catalog: Any) -> str:
    """The separator that joins a namespace's parts in URLs (the server's, or ``\\x1f``)."""
    return catalog._namespace_separator  # type: ignore[no-any-return]


def identifier_path(catalog: Any, identifier: tuple[str, ...]) -> dict[str, str]:
    """The URL path parameters (``namespace``, ``table``) of a table identifier, encoded as
    pyiceberg encodes them."""
    split = _lookup("pyiceberg.catalog.rest", "RestCatalog._split_identifier_for_path")
    return dict(split(catalog, identifier))


def table_from_response(catalog: Any, identifier: tuple[str, ...], response: Any) -> Any:
    """pyiceberg's ``Table`` for a ``loadTable`` answer (a ``TableResponse``)."""
    return _lookup("pyiceberg.catalog.rest", "RestCatalog._response_to_table")(catalog, identifier, response)


def load_credentials(catalog: Any, identifier: tuple[str, ...]) -> Any:
    """The answer of the credentials endpoint for a table (every storage credential, not only the
    one pyiceberg's public ``load_credentials`` picks for a location)."""
    return _lookup("pyiceberg.catalog.rest", "RestCatalog._load_credentials")(catalog, identifier)


def response_from_bytes(status: int, content: bytes, url: str, headers: Mapping[str, str]) -> requests.Response:
    """A requests ``Response`` for an answer read without requests (to raise pyiceberg's error
    for it); requests has no public constructor that takes the body."""
    answer = requests.Response()
    answer.status_code, answer._content, answer.url = status, content, url
    answer.headers = requests.structures.CaseInsensitiveDict(headers)
    return answer
