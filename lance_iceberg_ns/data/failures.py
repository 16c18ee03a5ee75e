"""pylance's failures as ``lance_namespace.errors``: a bad filter, column or schema, a missing tag
or version is the caller's mistake (a 4xx), never an internal error.

pylance raises its own errors as ValueError or OSError, named only in the message; the table below
is the one place that reads those messages.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from lance_namespace.errors import (
    InvalidInputError,
    LanceNamespaceError,
    TableBranchAlreadyExistsError,
    TableBranchNotFoundError,
    TableSchemaValidationError,
    TableTagAlreadyExistsError,
    TableTagNotFoundError,
    TableVersionNotFoundError,
)

RefKind = Literal["tag", "branch"]

_NOT_FOUND = {"tag": TableTagNotFoundError, "branch": TableBranchNotFoundError}
_ALREADY_EXISTS = {"tag": TableTagAlreadyExistsError, "branch": TableBranchAlreadyExistsError}


def _error_for(message: str, refs: RefKind) -> type[LanceNamespaceError] | None:
    """The error class for one of pylance's messages, None for a failure that is not the caller's."""
    if message.startswith("Append with different schema"):
        return TableSchemaValidationError
    if message.startswith(("Ref not found", "Ref not found error")):
        return _NOT_FOUND[refs]
    if message.startswith("Ref conflict"):
        return _ALREADY_EXISTS[refs]
    if (
        message.startswith("Version not found")
        or "Table version not found" in message  # this namespace's answer, relayed by pylance
        or ("/_versions/" in message and "was not found" in message)
    ):
        return TableVersionNotFoundError
    if message.startswith(("Invalid user input", "Ref is invalid", "Cannot drop all columns")):
        return InvalidInputError
    if message.startswith("Field '") and "not found" in message.split("\n", 1)[0]:  # an expression's column
        return InvalidInputError
    return None


@contextmanager
def pylance_failures(operation: str, refs: RefKind = "tag") -> Iterator[None]:
    """Re-raise what pylance raises for input it cannot use as its ``lance_namespace`` error: data
    of another schema as TableSchemaValidationError, a missing tag or branch (``refs`` says which
    the operation names) as TableTagNotFound / TableBranchNotFound, a taken name as
    ...AlreadyExists, a missing version as TableVersionNotFound, and any other input pylance
    cannot use (an unknown column, a filter that does not parse: ValueError, TypeError, KeyError,
    or an OSError saying so) as InvalidInputError."""
    try:
        yield
    except LanceNamespaceError:
        raise
    except (ValueError, TypeError, KeyError, OSError) as exc:
        error = _error_for(str(exc), refs)
        if error is None and not isinstance(exc, OSError):
            error = InvalidInputError
        if error is None:
            raise
        raise error(f"{operation}: {exc}") from exc
