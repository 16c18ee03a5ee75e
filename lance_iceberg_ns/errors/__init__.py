"""Errors: the translation of catalog, transport and pylance failures into
``lance_namespace.errors`` (``translation``, ``pylance``), and the status each code answers with."""

from lance_iceberg_ns.errors.translation import (
    error_class_for,
    http_status,
    http_status_for,
    is_panic,
    public_message,
    translate,
    translated_errors,
)

__all__ = [
    "error_class_for",
    "http_status",
    "http_status_for",
    "is_panic",
    "public_message",
    "translate",
    "translated_errors",
]
