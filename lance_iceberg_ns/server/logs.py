"""The server's log lines: plain text or one JSON object a line, each with its request's ID, and
never a secret in them.

uvicorn applies ``log_config(...)`` (``logging.config.dictConfig``) in the serving process and in
every worker it spawns. Three things are added to every line: the ID of the request it was logged
for (``request_id``, ``-`` outside a request; set by ``observability.RequestContext`` and carried
into the worker threads with the context), the redaction of every secret the server knows (its
bearer tokens and the bridge's secret properties, registered with ``forget_secrets_in_logs``), and,
in the access log, the path without its query string (a client may put storage options there).

The audit log (``AuditedRequest``) writes two lines for each request that changes something: one
before its operation runs, one with its outcome.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterable, MutableMapping, Sequence
from contextvars import ContextVar
from typing import Any

from pydantic import BaseModel
from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

LOG_FORMATS = ("text", "json")
AUDIT_LOGGER = "lance_iceberg_ns.audit"
AUDITED_REQUEST = "lance_iceberg_ns.audited_request"  # ASGI scope key: an AuditedRequest
_LONGEST_AUDITED_ID = 512  # characters of the identifiers an audit line shows

request_id: ContextVar[str] = ContextVar("lance_iceberg_ns_request_id", default="-")
_audit_log = logging.getLogger(AUDIT_LOGGER)

_secrets: set[str] = set()
# C0 and C1 controls, DEL, and the Unicode line and paragraph separators some viewers break on
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_CONTINUATION = "  | "  # what begins each line of a traceback beneath its record


def forget_secrets_in_logs(secrets: Iterable[str]) -> None:
    """Replace these values by ``***`` in every line the server logs (short values are ignored:
    redacting ``1`` would garble every line)."""
    _secrets.update(secret for secret in secrets if secret and len(secret) >= 4)


def redact(text: str) -> str:
    for secret in sorted(_secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, "***")
        escaped = json.dumps(secret)[1:-1]  # as it appears inside a JSON line
        if escaped != secret and escaped in text:
            text = text.replace(escaped, "***")
    return text


def record_audited_ids(scope: MutableMapping[str, Any], request: BaseModel) -> None:
    """Give the audit lines of a request that changes something the identifiers its parsed
    request names (a batch's every entry). The first call writes the start line, before the
    operation runs; a later one (a bare name placed in the default namespace) only renames what
    the outcome line shows."""
    audited = scope.get(AUDITED_REQUEST)
    if not isinstance(audited, AuditedRequest):  # a read: not audited
        return
    own = getattr(request, "id", None)
    if own is not None:
        audited.named([list(own)])
        return
    named: list[list[str]] = []
    for item in [*(getattr(request, "entries", None) or ()), *(getattr(request, "operations", None) or ())]:
        parts = [item, *(getattr(item, field) for field in type(item).model_fields)]  # an operation's one request
        ids = [getattr(part, "id", None) for part in parts if isinstance(part, BaseModel)]
        named += [list(part_id) for part_id in ids if part_id is not None]
    audited.named(named)


def shown_ids(ids: list[list[str]]) -> str:
    """Identifiers as an audit line shows them: one as a list, several as a list of lists,
    escaped by ``repr`` and cut at ``_LONGEST_AUDITED_ID`` characters; ``-`` for none."""
    if not ids:
        return "-"
    shown = repr(ids[0]) if len(ids) == 1 else repr(ids)
    return shown if len(shown) <= _LONGEST_AUDITED_ID else shown[: _LONGEST_AUDITED_ID - 1] + "…"


def audit_by_the_server(operation: str, ids: Sequence[str], outcome: str) -> None:
    """One audit line for what the server did of its own accord (a create cut off, taken back),
    in the requests' format, under the request that led to it."""
    _audit_log.info(
        "%s %s by the server: %s",
        operation,
        shown_ids([list(ids)]),
        outcome,
        extra={"request_id": request_id.get(), "event": "server", "operation": operation, "table_id": ids},
    )


class AuditedRequest:
    """The two audit lines of one request that changes something, on the ``lance_iceberg_ns.audit``
    logger, in one format: ``<operation> <ids> by <who> from <client>: <event>``. The start line
    (``started``) is written as soon as the identifiers the request names are known, before its
    operation runs, so that a request that ends the process still leaves it; the outcome line
    (``ok in <ms> ms`` or ``error code=<Lance code> status=<HTTP status> in <ms> ms``) after it
    is answered. A request refused before it was read gets both lines at its end, naming the
    identifiers of its path. Both carry the request ID as every line does."""

    def __init__(self, operation: str, principal: str, client: str, path_ids: list[str] | None) -> None:
        self.operation = operation
        self.principal = principal
        self.client = client
        self._ids = shown_ids([path_ids] if path_ids is not None else [])
        self._lock = threading.Lock()  # named in a worker thread, ended in the event loop
        self._started = False
        self._ended = False

    def named(self, ids: list[list[str]]) -> None:
        """What the parsed request names; writes the start line the first time."""
        with self._lock:
            if self._ended:  # a worker thread that outlived its request (its client went away)
                return
            self._ids = shown_ids(ids)
            if not self._started:
                self._start()

    def ended(self, status: int, error_code: int | None, seconds: float) -> None:
        """Write the outcome line (after the start line, if the request never got as far)."""
        with self._lock:
            if not self._started:
                self._start()
            self._ended = True
            ok = status < 400
            result = "ok" if ok else f"error code={error_code if error_code is not None else '-'} status={status}"
            milliseconds = round(seconds * 1000, 1)
            _audit_log.info(
                "%s %s by %s from %s: %s in %s ms",
                self.operation,
                self._ids,
                self.principal,
                self.client,
                result,
                milliseconds,
                extra={
                    **self._fields("end"),
                    "result": "ok" if ok else "error",
                    "status": status,
                    "error_code": error_code,
                    "duration_ms": milliseconds,
                },
            )

    def _start(self) -> None:
        self._started = True
        _audit_log.info(
            "%s %s by %s from %s: started",
            self.operation,
            self._ids,
            self.principal,
            self.client,
            extra=self._fields("start"),
        )

    def _fields(self, event: str) -> dict[str, Any]:
        return {
            "request_id": request_id.get(),  # the handlers' filter sets it too; this line has it whatever handles it
            "event": event,
            "operation": self.operation,
            "table_id": self._ids,
            "principal": self.principal,
            "client": self.client,
        }


class RequestIdFilter(logging.Filter):
    """Gives every record the ID of the request it was logged for."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


class AccessLogWithoutQuery(logging.Filter):
    """uvicorn's access line without the query string: a client may send secrets there (a data
    request's ``storage_options``); the path and the operation are what an access log is for."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and len(record.args) == 5:
            client, method, path, version, status = record.args
            record.args = (client, method, str(path).split("?", 1)[0], version, status)
        return True


def escape_controls(text: str) -> str:
    """``text`` with its control characters (line breaks, carriage returns, terminal escapes)
    written as escapes (``\\n``, ``\\x1b``): a path a client decoded into a newline cannot
    start a log line of its own."""
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda found: found.group().encode("unicode_escape").decode("ascii"), text)


class TextFormatter(logging.Formatter):
    """One record, one line: the message's control characters escaped, and any traceback's lines
    indented beneath it (an exception's message may hold a client's text), so that no line a
    client sends can pass for a record (every record begins with its time)."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802  (logging's name)
        record.message = escape_controls(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:  # noqa: N802
        return _beneath(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:  # noqa: N802
        return _beneath(super().formatStack(stack_info))


def _beneath(text: str) -> str:
    return "\n".join(_CONTINUATION + escape_controls(line) for line in text.split("\n"))


class JsonLineFormatter(JsonFormatter):
    """python-json-logger's formatter, its output redacted as a whole (the message, the extra
    fields and any traceback alike); uvicorn's ``color_message`` left out."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, reserved_attrs=[*RESERVED_ATTRS, "color_message"], **kwargs)

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


_TEXT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"
_JSON_FIELDS = "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s"


def log_config(log_format: str = "text", debug: bool = False) -> dict[str, Any]:
    """The ``dictConfig`` for the server: uvicorn's loggers, the bridge's and the audit log (INFO)
    to stderr in ``log_format``; others at WARNING (DEBUG everywhere with ``debug``)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log_format must be one of {LOG_FORMATS}")
    formatter: dict[str, Any] = (
        {
            "()": f"{__name__}.JsonLineFormatter",
            "fmt": _JSON_FIELDS,
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        }
        if log_format == "json"
        else {"()": f"{__name__}.TextFormatter", "fmt": _TEXT}
    )
    handler = {
        "class": "logging.StreamHandler",
        "stream": "ext://sys.stderr",
        "formatter": "line",
        "filters": ["request_id"],
    }
    level = "DEBUG" if debug else "INFO"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {
            "request_id": {"()": f"{__name__}.RequestIdFilter"},
            "access_without_query": {"()": f"{__name__}.AccessLogWithoutQuery"},
        },
        "formatters": {"line": formatter},
        "handlers": {"stderr": handler},
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": level, "propagate": False},
            "uvicorn.error": {"level": level},
            "uvicorn.access": {
                "handlers": ["stderr"],
                "level": level,
                "propagate": False,
                "filters": ["access_without_query"],
            },
            "lance_iceberg_ns": {"handlers": ["stderr"], "level": "DEBUG" if debug else "WARNING", "propagate": False},
            AUDIT_LOGGER: {"level": "INFO"},
        },
        "root": {"handlers": ["stderr"], "level": "DEBUG" if debug else "WARNING"},
    }
