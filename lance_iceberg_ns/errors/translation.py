"""The one place where catalog and transport failures become ``lance_namespace.errors``.

pyiceberg already turns each HTTP status into a typed exception, per operation (a 404 from
``loadTable`` is ``NoSuchTableError``, from ``listTables`` ``NoSuchNamespaceError``), so the
translation is by exception type. Messages keep the server's words, with secrets redacted.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import requests
from lance_namespace.errors import (
    ConcurrentModificationError,
    InternalError,
    InvalidInputError,
    LanceNamespaceError,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NamespaceNotFoundError,
    PermissionDeniedError,
    ServiceUnavailableError,
    TableAlreadyExistsError,
    TableNotFoundError,
    ThrottlingError,
    UnauthenticatedError,
    UnsupportedOperationError,
)
from pyiceberg import exceptions as iceberg

from lance_iceberg_ns.errors.storage import StoreRefused, StoreRejected, StoreUnavailable

# Most specific first: the first matching entry wins.
_TRANSLATIONS: tuple[tuple[type[BaseException], type[LanceNamespaceError]], ...] = (
    (iceberg.NoSuchNamespaceError, NamespaceNotFoundError),
    (iceberg.NoSuchTableError, TableNotFoundError),
    (iceberg.NoSuchIdentifierError, InvalidInputError),
    (iceberg.NamespaceAlreadyExistsError, NamespaceAlreadyExistsError),
    (iceberg.TableAlreadyExistsError, TableAlreadyExistsError),
    (iceberg.NamespaceNotEmptyError, NamespaceNotEmptyError),
    (iceberg.CommitFailedException, ConcurrentModificationError),
    (iceberg.OAuthError, UnauthenticatedError),
    (iceberg.UnauthorizedError, UnauthenticatedError),
    (iceberg.AuthorizationExpiredError, UnauthenticatedError),
    (iceberg.ForbiddenError, PermissionDeniedError),
    (iceberg.ServiceUnavailableError, ServiceUnavailableError),
    (iceberg.TooManyRequestsError, ThrottlingError),
    (iceberg.BadRequestError, InvalidInputError),
    (requests.ConnectionError, ServiceUnavailableError),
    (requests.Timeout, ServiceUnavailableError),
    (requests.exceptions.ChunkedEncodingError, ServiceUnavailableError),  # the answer broke off
    (NotImplementedError, UnsupportedOperationError),
    (MemoryError, InvalidInputError),  # an allocation over a data worker's ceiling: the request asked for it
    (StoreRefused, PermissionDeniedError),
    (StoreRejected, InvalidInputError),
    (StoreUnavailable, ServiceUnavailableError),
)


def http_status(exc: BaseException) -> int | None:
    """The HTTP status behind a failure (a requests error, or a pyiceberg error raised from one)."""
    response = getattr(exc, "response", None)
    if response is None:  # not `or`: a requests Response is falsy when its status is an error
        response = getattr(exc.__cause__, "response", None)
    return getattr(response, "status_code", None)


# For failures pyiceberg had no type for (an OAuth2 token endpoint's answer, say): by status.
_BY_STATUS: dict[int, type[LanceNamespaceError]] = {
    400: InvalidInputError,
    401: UnauthenticatedError,
    403: PermissionDeniedError,
    404: NamespaceNotFoundError,
    419: UnauthenticatedError,
    429: ThrottlingError,
    502: ServiceUnavailableError,  # a gateway could not reach the catalog
    503: ServiceUnavailableError,
    504: ServiceUnavailableError,  # a gateway gave up waiting for it
}


def error_class_for(exc: BaseException) -> type[LanceNamespaceError]:
    """By type where pyiceberg typed the failure, else by its HTTP status, else Internal."""
    for source, target in _TRANSLATIONS:
        if isinstance(exc, source):
            return target
    return _BY_STATUS.get(http_status(exc) or 0, InternalError)


def translate(
    exc: BaseException, context: str, redact: Callable[[str], str] = lambda text: text
) -> LanceNamespaceError:
    """The ``lance_namespace`` error for a failure, its message prefixed by ``context``."""
    if isinstance(exc, LanceNamespaceError):
        return exc
    detail = str(exc) or type(exc).__name__
    return error_class_for(exc)(redact(f"{context}: {detail}"))


@contextmanager
def translated_errors(context: str, redact: Callable[[str], str] = lambda text: text) -> Iterator[None]:
    """Re-raise any failure inside the block as its ``lance_namespace`` error."""
    try:
        yield
    except LanceNamespaceError as exc:
        # Messages of our own errors are already safe, but a secret may still ride in on one we
        # built from a server message; redact once more to be sure.
        if redact(str(exc)) != str(exc):
            raise type(exc)(redact(str(exc))) from None
        raise
    except Exception as exc:
        error = translate(exc, context, redact)
        # Keep the original as the cause for debugging, unless it carries a secret.
        if redact(str(exc)) != str(exc):
            raise error from None
        raise error from exc
    except BaseException as exc:
        if not is_panic(exc):
            raise
        # pylance panics on input it did not validate (misaligned or invalid Arrow buffers): the
        # same request would panic again, so it is the caller's error, not a server fault.
        raise InvalidInputError(redact(f"{context}: pylance could not process the request ({exc})")) from None


def is_panic(exc: BaseException) -> bool:
    """A Rust panic inside pylance, as pyo3 raises it: ``pyo3_runtime.PanicException``, derived from
    BaseException (``except Exception`` misses it). pylance exports no name for the class, which
    pyo3 creates at the first panic, so it is known by its module and name."""
    kind = type(exc)
    return kind.__module__ == "pyo3_runtime" and kind.__name__ == "PanicException"


# What a message shows of the machine and the code behind it, and what stands in for it in an
# answer to a remote caller (most specific first). Messages keep the server's words, not where it
# was built or which classes raised them. A message may echo a caller's input, so every pattern
# runs in linear time: a run of path or name characters is matched possessively and only from its
# first character (the look-behinds), and what it must end with is checked behind it.
_PATH = r"[\w.~/\\-]"
_SOURCE_SUFFIXES = ("py", "pyc", "pyx", "rs", "java", "scala", "kt", "c", "cc", "cpp", "h", "go", "jar", "so")
_ENDS_AS_SOURCE_FILE = "|".join(f"(?<=[\\w-]\\.{suffix})" for suffix in _SOURCE_SUFFIXES)
_INTERNALS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r'(?<!\s)\s*+File "[^"]*+", line \d++(?:, in [\w<>.]++)?'), ""),  # Python traceback lines
    (re.compile(r"(?<!\s)\s*+\bat [\w$./<>-]++\((?:[\w$.-]++:\d++|Native Method|Unknown Source)\)"), ""),  # Java
    # source files, with their line (and column): Rust sources in pylance's messages, Python, Java
    (re.compile(rf"(?:,\s*+)?(?<!{_PATH})(?:[A-Za-z]:)?{_PATH}++(?:{_ENDS_AS_SOURCE_FILE})(?::\d++)++"), ""),
    (re.compile(rf"(?<!{_PATH})(?:[A-Za-z]:)?{_PATH}*?[/\\](?:site|dist)-packages[/\\][^\s'\",()]*+"), "<path>"),
    # system, install and toolchain roots (a table's own location, wherever it is, stays readable)
    (re.compile(r"(?<![\w.~-])/(?:usr|opt|nix|rustc|Library|System)/[^\s'\",()]*+"), "<path>"),
    (re.compile(r"<[\w.]++ object at 0x[0-9a-fA-F]++>"), ""),  # Python object reprs
)
# A dotted name that introduces a message (": ") or arguments ("("): dropped when it names an
# exception class, qualified (org.apache.iceberg.exceptions.X, requests.exceptions.X) or bare
# (pyiceberg's "NoSuchTableException: ..."); a table named ParseError elsewhere in a sentence stays.
_INTRODUCING_NAME = re.compile(r"(?<![\w$.])(?P<name>[A-Za-z_][\w$.]*+)(?::\s*+|(?=\())")
_EXCEPTION_CLASS = re.compile(r"(?:[a-z_]\w*+\.)*+[A-Z][\w$]*?(?:Exception|Error|Throwable)")
# Echoed input is cut short: one word (a location, a filter, a name) and the whole message.
_LONGEST_WORD = 256
_LONGEST_MESSAGE = 2048
_LONG_WORD = re.compile(rf"(?<!\S)\S{{{_LONGEST_WORD + 1},}}+")


def _unless_exception_class(match: re.Match[str]) -> str:
    return "" if _EXCEPTION_CLASS.fullmatch(match["name"]) else match[0]


def _shortened(word: re.Match[str]) -> str:
    return f"{word[0][: _LONGEST_WORD * 3 // 4]}…{word[0][-_LONGEST_WORD // 4 :]}"


def public_message(message: str) -> str:
    """``message`` as a remote caller may see it: without build or install paths, source file
    references and internal class names (see ``_INTERNALS``), and with long words and the whole
    cut short, so that echoed input cannot swell an answer; the rest of the words stay."""
    for pattern, replacement in _INTERNALS:
        message = pattern.sub(replacement, message)
    message = _INTRODUCING_NAME.sub(_unless_exception_class, message)
    message = _LONG_WORD.sub(_shortened, message)
    message = re.sub(r"[ \t]{2,}+", " ", message).strip(" \t,")
    if len(message) > _LONGEST_MESSAGE:
        message = message[: _LONGEST_MESSAGE - 1] + "…"
    return message or "An error occurred"
