"""How every namespace operation is called: the request coerced and bounded, errors translated,
the call timed. Applied once, by ``operation``, to each public method of the namespace.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from lance_namespace.errors import InvalidInputError

from lance_iceberg_ns.config.settings import Settings
from lance_iceberg_ns.data import expressions
from lance_iceberg_ns.errors.translation import translated_errors
from lance_iceberg_ns.identifiers import in_default_namespace
from lance_iceberg_ns.limits import check_request_bounds

logger = logging.getLogger(__name__)

Request = TypeVar("Request")
Response = TypeVar("Response")
P = ParamSpec("P")


class _Configured(Protocol):
    """What ``operation`` needs of the object whose methods it wraps."""

    @property
    def settings(self) -> Settings: ...


Self = TypeVar("Self", bound=_Configured)


def coerce(request: Any, request_type: type[Request]) -> Request:
    """Accept the request model, a plain dict (pylance calls back from Rust with dicts), or None."""
    if isinstance(request, request_type):
        return request
    if request is None:
        request = {}
    if isinstance(request, Mapping):
        try:
            return request_type.from_dict(dict(request))  # type: ignore[attr-defined,no-any-return]
        except Exception as exc:  # pydantic's ValidationError, with the offending field
            raise InvalidInputError(f"Invalid {request_type.__name__}: {exc}") from None
    raise InvalidInputError(f"Expected a {request_type.__name__} or a dict, got {type(request).__name__}")


# Requests whose ``id`` names a namespace; every other request's ``id`` names a table.
_NAMESPACE_REQUESTS = frozenset(
    {"CreateNamespaceRequest", "ListNamespacesRequest", "DescribeNamespaceRequest", "DropNamespaceRequest"}
    | {"NamespaceExistsRequest", "ListTablesRequest"}
)


def as_operated(namespace: Any, name: str, request: Any) -> Any:
    """``request`` as the bridge's operation ``name`` acts on it (a bare table name placed in its
    ``default_namespace``), for the server's audit line; another namespace's as it is."""
    settings = getattr(namespace, "settings", None)
    return _in_default_namespace(name, request, getattr(settings, "default_namespace", None) or ())


def _in_default_namespace(name: str, request: Any, default: tuple[str, ...]) -> Any:
    """The request with a bare table name in the ``default_namespace`` (lancedb's ``open_table``,
    DuckDB's describe and drop); ``list_tables`` at the root lists the default namespace (lancedb's
    ``table_names``, DuckDB's ``ATTACH '$'``). No other namespace id is rewritten."""
    if not default:
        return request
    if name == "list_tables":
        return request if request.id else request.model_copy(update={"id": list(default)})
    if type(request).__name__ in _NAMESPACE_REQUESTS:
        return request
    update: dict[str, Any] = {}
    if getattr(request, "id", None) is not None:
        update["id"] = in_default_namespace(request.id, default)
    if getattr(request, "entries", None):  # batch_create_table_versions: one table id per entry
        update["entries"] = [
            entry.model_copy(update={"id": in_default_namespace(entry.id, default)}) for entry in request.entries
        ]
    return request.model_copy(update=update) if update else request


def _target(first: Any) -> str:
    """What a call is about, for its error messages and log line: the identifier, joined."""
    parts = getattr(first, "id", None) if not isinstance(first, list | tuple) else first
    return ".".join(str(part) for part in parts or []) or "<root>"


def operation(
    request_type: type[Any] | None = None,
) -> Callable[[Callable[Concatenate[Self, P], Response]], Callable[Concatenate[Self, P], Response]]:
    """Wrap a namespace operation: coerce its request to ``request_type`` and check its bounds
    (``limits``) and SQL expressions (``data.expressions``), place a bare table name in the
    ``default_namespace``, translate its errors (``errors``), time it. Without ``request_type``
    the first argument (a table or namespace id) is passed as it is, a bare ``table_id`` placed
    in the default namespace. A data operation's request body (Arrow IPC bytes) is passed
    through. The wrapped method keeps its signature for type checkers."""

    def decorate(method: Callable[Concatenate[Self, P], Response]) -> Callable[Concatenate[Self, P], Response]:
        name = method.__name__
        takes_table_id = list(inspect.signature(method).parameters)[1:2] == ["table_id"]

        @functools.wraps(method)
        def run(self: Self, *args: P.args, **kwargs: P.kwargs) -> Response:
            default = self.settings.default_namespace
            if request_type is not None:
                first = coerce(args[0] if args else kwargs.pop("request", None), request_type)
                check_request_bounds(first)
                expressions.check_request(first)
                first = _in_default_namespace(name, first, default)
                args = (first, *args[1:])  # type: ignore[assignment]
            elif takes_table_id and args:
                args = (in_default_namespace(args[0], default), *args[1:])  # type: ignore[assignment]
            elif takes_table_id and "table_id" in kwargs:
                kwargs["table_id"] = in_default_namespace(kwargs["table_id"], default)
            target = _target(args[0] if args else kwargs.get("table_id", kwargs.get("namespace_id")))
            started = time.perf_counter()
            with translated_errors(f"{name} {target}", self.settings.redact):
                response = method(self, *args, **kwargs)
            logger.debug("%s %s took %.1f ms", name, target, (time.perf_counter() - started) * 1000)
            return response

        run.checks_request_bounds = request_type is not None  # type: ignore[attr-defined]  # the server need not
        return run

    return decorate
