"""The one table from Lance error code to HTTP status, and what follows from a code's status.

``HTTP_STATUS`` follows the Lance REST Namespace spec's table. From each code's status come the
REST server's answer (``http_status_for``), the command line's exit code (``exit_code_for``, by
the kind of status) and whether a failure was a refusal that changed nothing (``is_refusal``).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from http import HTTPStatus
from types import MappingProxyType

from lance_namespace.errors import ErrorCode

HTTP_STATUS: Mapping[ErrorCode, HTTPStatus] = MappingProxyType(
    {
        ErrorCode.UNSUPPORTED: HTTPStatus.NOT_ACCEPTABLE,
        ErrorCode.NAMESPACE_NOT_FOUND: HTTPStatus.NOT_FOUND,
        ErrorCode.NAMESPACE_ALREADY_EXISTS: HTTPStatus.CONFLICT,
        ErrorCode.NAMESPACE_NOT_EMPTY: HTTPStatus.CONFLICT,
        ErrorCode.TABLE_NOT_FOUND: HTTPStatus.NOT_FOUND,
        ErrorCode.TABLE_ALREADY_EXISTS: HTTPStatus.CONFLICT,
        ErrorCode.TABLE_INDEX_NOT_FOUND: HTTPStatus.NOT_FOUND,
        ErrorCode.TABLE_INDEX_ALREADY_EXISTS: HTTPStatus.CONFLICT,
        ErrorCode.TABLE_TAG_NOT_FOUND: HTTPStatus.NOT_FOUND,
        ErrorCode.TABLE_TAG_ALREADY_EXISTS: HTTPStatus.CONFLICT,
        ErrorCode.TRANSACTION_NOT_FOUND: HTTPStatus.NOT_FOUND,
        ErrorCode.TABLE_VERSION_NOT_FOUND: HTTPStatus.NOT_FOUND,
        ErrorCode.TABLE_COLUMN_NOT_FOUND: HTTPStatus.NOT_FOUND,
        ErrorCode.INVALID_INPUT: HTTPStatus.BAD_REQUEST,
        ErrorCode.CONCURRENT_MODIFICATION: HTTPStatus.CONFLICT,
        ErrorCode.PERMISSION_DENIED: HTTPStatus.FORBIDDEN,
        ErrorCode.UNAUTHENTICATED: HTTPStatus.UNAUTHORIZED,
        ErrorCode.SERVICE_UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE,
        ErrorCode.INTERNAL: HTTPStatus.INTERNAL_SERVER_ERROR,
        ErrorCode.INVALID_TABLE_STATE: HTTPStatus.CONFLICT,
        ErrorCode.TABLE_SCHEMA_VALIDATION_ERROR: HTTPStatus.BAD_REQUEST,
        ErrorCode.THROTTLING: HTTPStatus.TOO_MANY_REQUESTS,  # not in the spec's table: the usual status
        ErrorCode.TABLE_BRANCH_NOT_FOUND: HTTPStatus.NOT_FOUND,
        ErrorCode.TABLE_BRANCH_ALREADY_EXISTS: HTTPStatus.CONFLICT,
    }
)
"""The HTTP status of every Lance error code (``tests/errors/test_errors_and_secrets.py`` holds it to the enum)."""


class ExitCode(IntEnum):
    """The command line's exit codes for failures, one per kind of status a script branches on."""

    UNEXPECTED = 1
    INVALID_INPUT = 2
    NOT_FOUND = 3
    CONFLICT = 4
    UNAVAILABLE = 5  # or throttled: worth trying again later
    NOT_ALLOWED = 6  # not authenticated, or not permitted
    UNSUPPORTED = 7


_EXIT_CODE_BY_STATUS: Mapping[HTTPStatus, ExitCode] = MappingProxyType(
    {
        HTTPStatus.BAD_REQUEST: ExitCode.INVALID_INPUT,
        HTTPStatus.UNAUTHORIZED: ExitCode.NOT_ALLOWED,
        HTTPStatus.FORBIDDEN: ExitCode.NOT_ALLOWED,
        HTTPStatus.NOT_FOUND: ExitCode.NOT_FOUND,
        HTTPStatus.NOT_ACCEPTABLE: ExitCode.UNSUPPORTED,
        HTTPStatus.CONFLICT: ExitCode.CONFLICT,
        HTTPStatus.TOO_MANY_REQUESTS: ExitCode.UNAVAILABLE,
        HTTPStatus.SERVICE_UNAVAILABLE: ExitCode.UNAVAILABLE,
    }
)


def http_status_for(code: int) -> int:
    """The HTTP status a REST server answers with for a Lance error code (500 for a code not in
    ``HTTP_STATUS``)."""
    return int(_status(code))


def exit_code_for(code: int) -> int:
    """The command line's exit code for a Lance error code, by the kind of its HTTP status: any
    status without its own kind (500 and an unknown code among them) is unexpected."""
    return int(_EXIT_CODE_BY_STATUS.get(_status(code), ExitCode.UNEXPECTED))


def is_refusal(code: int) -> bool:
    """Whether a failure of this code is a refusal, a 4xx: the server changed nothing. A 5xx leaves
    open whether what was asked happened (an answer lost on its way back, say)."""
    return 400 <= _status(code) < 500


def _status(code: int) -> HTTPStatus:
    try:
        return HTTP_STATUS[ErrorCode(code)]
    except (ValueError, KeyError):  # a code this table (or the installed lance_namespace) does not know
        return HTTPStatus.INTERNAL_SERVER_ERROR
