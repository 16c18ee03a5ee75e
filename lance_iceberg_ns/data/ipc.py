"""Arrow IPC in and out of the data operations."""

from __future__ import annotations

import pyarrow as pa


def to_ipc_file(table: pa.Table) -> bytes:
    """``table`` as Arrow IPC *file* bytes holding one record batch (empty or not), as the reference
    answers a query: its clients read the answer with ``pyarrow.ipc.open_file``."""
    batches = table.combine_chunks().to_batches() or [pa.RecordBatch.from_pylist([], schema=table.schema)]
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_batch(batches[0])
    return bytes(sink.getvalue().to_pybytes())
