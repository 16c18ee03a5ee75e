"""Errors: the one table from Lance error code to HTTP status and what follows from it (``codes``),
and the translation of catalog, transport and pylance failures into ``lance_namespace.errors``
(``translation``, ``pylance``)."""

from lance_iceberg_ns.errors.codes import HTTP_STATUS, ExitCode, exit_code_for, http_status_for, is_refusal
from lance_iceberg_ns.errors.translation import (
    error_class_for,
    http_status,
    is_panic,
    public_message,
    translate,
    translated_errors,
)

__all__ = [
    "HTTP_STATUS",
    "ExitCode",
    "error_class_for",
    "exit_code_for",
    "http_status",
    "http_status_for",
    "is_panic",
    "is_refusal",
    "public_message",
    "translate",
    "translated_errors",
]
