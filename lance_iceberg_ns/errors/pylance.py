"""pylance's failures as ``lance_namespace.errors``: a bad filter, column, vector or schema, a
missing tag, branch, index or version is the caller's mistake (a 4xx with the code the reference
answers), never an internal error.

pylance raises its own errors as ValueError, OSError or RuntimeError, named only in the message;
``_BY_MESSAGE`` is the one place that reads those messages (the first match wins).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from lance_namespace.errors import (
    ConcurrentModificationError,
    InvalidInputError,
    InvalidTableStateError,
    LanceNamespaceError,
    ServiceUnavailableError,
    TableBranchAlreadyExistsError,
    TableBranchNotFoundError,
    TableColumnNotFoundError,
    TableIndexAlreadyExistsError,
    TableIndexNotFoundError,
    TableSchemaValidationError,
    TableTagAlreadyExistsError,
    TableTagNotFoundError,
    TableVersionNotFoundError,
)

RefKind = Literal["tag", "branch"]
_REF_NOT_FOUND = "ref not found"  # stands for the tag or branch error, as the operation names refs
_REF_TAKEN = "ref taken"
_REFS: dict[str, dict[RefKind, type[LanceNamespaceError]]] = {
    _REF_NOT_FOUND: {"tag": TableTagNotFoundError, "branch": TableBranchNotFoundError},
    _REF_TAKEN: {"tag": TableTagAlreadyExistsError, "branch": TableBranchAlreadyExistsError},
}
_UNKNOWN_COMMIT = re.compile(r"Commit result for version (?P<version>\d+) is unknown")
_BY_MESSAGE: tuple[tuple[re.Pattern[str], type[LanceNamespaceError] | str], ...] = (
    # a commit through the catalog that pylance could not tell from one that landed (it may have): the
    # client must look before it writes again; the data plane first asks whether a writer by location
    # was the cause (``DataPlane._committing``)
    (_UNKNOWN_COMMIT, ServiceUnavailableError),
    # the namespace's own refusal, as pylance passes it on (the bridge's, when it opens a table through it)
    (re.compile(r"Namespace error: Concurrent modification: "), ConcurrentModificationError),
    (re.compile(r"Namespace error: Invalid table state: "), InvalidTableStateError),
    (re.compile(r"Namespace error: Invalid input: "), InvalidInputError),
    (re.compile(r"Namespace error: Service unavailable: "), ServiceUnavailableError),
    # a commit that lost to a concurrent one it cannot be rebased on (an append on an overwrite)
    (re.compile(r"Incompatible transaction|Retryable commit conflict"), ConcurrentModificationError),
    # a commit that kept losing to concurrent ones until pylance gave up retrying: the client may retry
    (re.compile(r"Commit conflict for version \d+|Too many concurrent writers"), ConcurrentModificationError),
    (re.compile(r"^Append with different schema"), TableSchemaValidationError),
    (re.compile(r"^Ref not found"), _REF_NOT_FOUND),
    (re.compile(r"^Ref conflict"), _REF_TAKEN),
    (re.compile(r"^Version not found|Table version not found|/_versions/.*was not found"), TableVersionNotFoundError),
    # a file of the dataset went away under it (the dataset gone whole is found before pylance runs)
    (re.compile(r"\bNot found: \S+|Object at location \S+ not found"), InvalidTableStateError),
    # a file of the dataset that is not what its name says (a manifest planted in _versions/)
    (re.compile(r"does not have sufficient data|file size is too small"), InvalidTableStateError),
    (re.compile(r"Index name '[^']*' already exists"), TableIndexAlreadyExistsError),
    (re.compile(r"Lance index not found|Index with name .* not found"), TableIndexNotFoundError),
    (re.compile(r"not found in schema|CreateIndex: column '[^']*' does not exist"), TableColumnNotFoundError),
    (re.compile(r"^Field '[^\n]*not found"), InvalidInputError),  # an expression's column
    # a query or change the table cannot take: the reference's InvalidInput, whatever type carries it
    (
        re.compile(
            r"InvalidInput|Invalid user input|Cannot perform full text search|SchemaError|^Ref is invalid"
            # a full-text index or search on a column the table has not (the reference's answer to the search)
            r"|FTS field path '[^']*' does not exist"
            r"|^Cannot drop all columns|LanceError\(Schema\)"
            # an expression that fails as it runs over the rows: a bad cast, a division by zero
            r"|Cast error|Divide by zero|Arithmetic overflow"
            # an expression DataFusion parses but does not run in a column or a filter (an aggregate,
            # a window, ``unnest``, a cast to a type it cannot make) or a type name it does not know
            r"|This feature is not implemented|Execution error: Unsupported type '"
            # a regular expression of the filter that compiles past the regex engine's size limit
            # ("a{1000}{1000}"): DataFusion calls it an internal error, pylance an OSError on a count
            r"|Regular expression did not compile|Compiled regex exceeds size limit"
            # rows that do not fit the table: a null in a column that takes none, a value that is not
            # what its column's type says (text that is no JSON in an ``arrow.json`` column)
            r"|declared as non-nullable but contains null|Invalid argument error: Failed to (?:en|de)code JSON"
        ),
        InvalidInputError,
    ),
)

# DataFusion's words after an error it calls internal, which a caller's input caused all the same
_BUG_REPORT_HINT = re.compile(r"(?<!\s)\s*+This issue was likely caused by a bug in DataFusion's code[^,]*+")


@contextmanager
def pylance_failures(operation: str, refs: RefKind = "tag") -> Iterator[None]:
    """Re-raise what pylance raises for input it cannot use as its ``lance_namespace`` error
    (``refs`` says whether a missing or taken ref is a tag or a branch); any other ValueError,
    TypeError or KeyError is InvalidInputError too."""
    try:
        yield
    except LanceNamespaceError:
        raise
    except (ValueError, TypeError, KeyError, OSError, RuntimeError, OverflowError) as exc:
        translated = _translation(exc, refs)
        if translated is None:
            raise
        message = _message(exc)
        if translated is InvalidInputError:  # the caller's mistake: no bug to report to DataFusion
            message = _BUG_REPORT_HINT.sub("", message)
        raise translated(f"{operation}: {message}") from exc


def _translation(exc: BaseException, refs: RefKind) -> type[LanceNamespaceError] | None:
    message = _message(exc)
    for pattern, error in _BY_MESSAGE:
        if pattern.search(message):
            return _REFS[error][refs] if isinstance(error, str) else error
    if isinstance(exc, ValueError | TypeError | KeyError | OverflowError):  # Overflow: a number too large for pylance
        return InvalidInputError
    return None


def _message(exc: BaseException) -> str:
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)


# the bridge's own refusal of a table's state, as pylance passes it on when it opens the table
# through the namespace: "Namespace error: Invalid table state: <ours>, src/namespace.rs:<line>:<col>"
_STATE_REFUSED = re.compile(r"Namespace error: Invalid table state: (?P<why>.+?)(?:, src/\S+\.rs:\d+:\d+)?$", re.S)


def state_refused(exc: BaseException) -> str | None:
    """Why the namespace refused the table's state, when that is what made pylance's open fail."""
    found = _STATE_REFUSED.search(_message(exc))
    return found.group("why") if found else None


def unknown_commit(exc: BaseException) -> int | None:
    """The version whose commit pylance reported as of unknown outcome, when that is the failure."""
    found = _UNKNOWN_COMMIT.search(_message(exc))
    return int(found.group("version")) if found else None
