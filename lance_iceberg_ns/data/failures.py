"""pylance's failures as ``lance_namespace.errors``: a bad filter, column, vector or schema is the
caller's mistake (InvalidInput, 400, or the specific code the reference answers), never an internal
error. The one place that reads pylance's messages."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from lance_namespace.errors import (
    InvalidInputError,
    LanceNamespaceError,
    TableColumnNotFoundError,
    TableIndexAlreadyExistsError,
    TableIndexNotFoundError,
)

_CALLERS_MISTAKES = ("Invalid user input",)
# pylance names its failure only in the message; the first match wins, whatever the exception type.
_BY_MESSAGE: tuple[tuple[re.Pattern[str], type[LanceNamespaceError]], ...] = (
    (re.compile(r"Index name '[^']*' already exists"), TableIndexAlreadyExistsError),
    (re.compile(r"Lance index not found|Index with name .* not found"), TableIndexNotFoundError),
    (re.compile(r"not found in schema|CreateIndex: column '[^']*' does not exist"), TableColumnNotFoundError),
    # a query the table cannot answer: the reference's InvalidInput, raised as RuntimeError
    (re.compile(r"InvalidInput|Invalid user input|Cannot perform full text search|SchemaError"), InvalidInputError),
)


@contextmanager
def pylance_failures(operation: str) -> Iterator[None]:
    """Re-raise what pylance raises for input it cannot use: an existing or missing index, a
    missing column (their own codes); an unknown column, a filter that does not parse, a vector
    of another dimension, data of another schema (ValueError, TypeError, KeyError, or an
    OSError or RuntimeError saying so) as InvalidInputError."""
    try:
        yield
    except LanceNamespaceError:
        raise
    except (ValueError, TypeError, KeyError, OSError, RuntimeError) as exc:
        translated = _translation(exc)
        if translated is None:
            raise
        raise translated(f"{operation}: {_message(exc)}") from exc


def _translation(exc: BaseException) -> type[LanceNamespaceError] | None:
    message = _message(exc)
    for pattern, error in _BY_MESSAGE:
        if pattern.search(message):
            return error
    if isinstance(exc, ValueError | TypeError | KeyError):
        return InvalidInputError
    if message.startswith(_CALLERS_MISTAKES):  # pylance raises its own errors as OSError, named in the message
        return InvalidInputError
    return None


def _message(exc: BaseException) -> str:
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
