"""The Arrow IPC stream that carries the rows of a write (create, insert, merge-insert)."""

from __future__ import annotations

import pyarrow as pa
from lance_namespace.errors import InvalidInputError


def read_arrow_stream(data: bytes | None, operation: str) -> pa.Table:
    """The rows of a request body in the Arrow IPC stream format. Raises InvalidInputError for a
    missing body or one that is not an Arrow IPC stream (read whole, before anything is written)."""
    if not data:
        raise InvalidInputError(f"{operation} needs its rows as an Arrow IPC stream in the request body")
    try:
        with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
            return reader.read_all()
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
        raise InvalidInputError(f"{operation}: the request body is not an Arrow IPC stream ({exc})") from None
