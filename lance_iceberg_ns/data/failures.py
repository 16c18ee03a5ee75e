"""pylance's failures as ``lance_namespace.errors``: a bad filter, column or schema is the caller's
mistake (InvalidInput, 400), never an internal error."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from lance_namespace.errors import InvalidInputError, LanceNamespaceError

_CALLERS_MISTAKES = ("Invalid user input",)


@contextmanager
def pylance_failures(operation: str) -> Iterator[None]:
    """Re-raise what pylance raises for input it cannot use (an unknown column, a filter that does
    not parse, data of another schema: ValueError, TypeError, KeyError, or an OSError saying
    "Invalid user input") as InvalidInputError."""
    try:
        yield
    except LanceNamespaceError:
        raise
    except (ValueError, TypeError, KeyError) as exc:
        raise InvalidInputError(f"{operation}: {exc}") from exc
    except OSError as exc:  # pylance raises its own errors as OSError, named in the message
        if str(exc).startswith(_CALLERS_MISTAKES):
            raise InvalidInputError(f"{operation}: {exc}") from exc
        raise
