"""Arrow IPC in and out of the data operations: the rows of a write, the answer of a query."""

from __future__ import annotations

import pyarrow as pa
from lance_namespace.errors import InvalidInputError


class QueryAnswer(bytes):
    """A query's answer: the Arrow IPC file bytes themselves, which lancedb's in-process pushdown
    reads as bytes, carrying the ``data`` of the spec's ``QueryTableResponse`` too."""

    @property
    def data(self) -> bytes:
        return bytes(self)


def to_ipc_file(table: pa.Table) -> bytes:
    """``table`` as Arrow IPC *file* bytes holding one record batch (empty or not), as the reference
    answers a query: its clients read the answer with ``pyarrow.ipc.open_file``."""
    batches = table.combine_chunks().to_batches() or [pa.RecordBatch.from_pylist([], schema=table.schema)]
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_batch(batches[0])
    return bytes(sink.getvalue().to_pybytes())


def read_arrow_stream(data: bytes | None, operation: str) -> pa.Table:
    """The rows of a request body in the Arrow IPC stream format. Raises InvalidInputError for a
    missing body, one that is not an Arrow IPC stream, or one without columns (read whole, before
    anything is written)."""
    if not data:
        raise InvalidInputError(f"{operation} needs its rows as an Arrow IPC stream in the request body")
    try:
        with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
            rows = reader.read_all()
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
        raise InvalidInputError(f"{operation}: the request body is not an Arrow IPC stream ({exc})") from None
    if not rows.schema.names:
        raise InvalidInputError(f"{operation}: the Arrow IPC stream has no columns")
    return rows
