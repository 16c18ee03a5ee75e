"""The server's log lines: plain text or one JSON object a line, each with its request's ID, and
never a secret in them.

uvicorn applies ``log_config(...)`` (``logging.config.dictConfig``) in the serving process and in
every worker it spawns. Three things are added to every line: the ID of the request it was logged
for (``request_id``, ``-`` outside a request; set by ``observability.RequestContext`` and carried
into the worker threads with the context), the redaction of every secret the server knows (its
bearer tokens and the bridge's secret properties, registered with ``forget_secrets_in_logs``), and,
in the access log, the path without its query string (a client may put storage options there).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, MutableMapping
from contextvars import ContextVar
from typing import Any

from pydantic import BaseModel
from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

LOG_FORMATS = ("text", "json")
AUDIT_LOGGER = "lance_iceberg_ns.audit"
AUDITED_IDS = "lance_iceberg_ns.audited_ids"  # ASGI scope key: the identifiers the endpoint parsed

request_id: ContextVar[str] = ContextVar("lance_iceberg_ns_request_id", default="-")

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
    """Keep the identifiers an operation's parsed request names (a batch's every entry) for its
    audit line."""
    own = getattr(request, "id", None)
    if own is not None:
        scope[AUDITED_IDS] = [list(own)]
        return
    named: list[list[str]] = []
    for item in [*(getattr(request, "entries", None) or ()), *(getattr(request, "operations", None) or ())]:
        parts = [item, *(getattr(item, field) for field in type(item).model_fields)]  # an operation's one request
        ids = [getattr(part, "id", None) for part in parts if isinstance(part, BaseModel)]
        named += [list(part_id) for part_id in ids if part_id is not None]
    scope[AUDITED_IDS] = named


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
