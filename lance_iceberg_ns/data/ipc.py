"""Arrow IPC in and out of the data operations: the rows of a write, the answer of a query.

The rows of a write come from a caller, so they are checked before pylance sees them: their
decoded size is bounded before anything is decompressed (a 16 KB zstd body can expand to 512 MiB),
their buffers are aligned for their types (pylance panics on a misaligned ``decimal256`` or
``string_view`` buffer), their contents are validated in full (offsets that go backwards, a
dictionary index out of range) and every column has a type Lance can store.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pyarrow as pa
from lance.schema import LanceSchema
from lance_namespace.errors import InvalidInputError

from lance_iceberg_ns.limits import MAX_IPC_MESSAGES, DataTooLargeError, max_data_bytes

# Buffers copied to 64-byte boundaries where the body left them elsewhere: pyarrow's own
# "DataTypeSpecific" leaves a string_view's 16-byte views at 8, and pylance panics on them.
_ALIGNED = pa.ipc.IpcReadOptions(ensure_alignment=pa.ipc.Alignment.At64Byte)
# Arrow's Message.fbs: the header's union types, and the field slots this module reads.
_DICTIONARY_BATCH, _RECORD_BATCH = 2, 3
_MESSAGE_HEADER_TYPE, _MESSAGE_HEADER = 1, 2
_BATCH_LENGTH, _BATCH_BUFFERS, _BATCH_COMPRESSION = 0, 2, 3
_DICTIONARY_DATA = 1
_NOT_COMPRESSED = -1  # a compressed batch's buffer prefix when that buffer was left as it was


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
    """The rows of a request body in the Arrow IPC stream format, checked (see the module's
    docstring). Raises DataTooLargeError (an InvalidInputError) for rows that decode to more than
    ``limits.max_data_bytes()``, InvalidInputError for a missing body, one that is not an Arrow
    IPC stream, invalid contents, a type Lance cannot store or no columns; read whole, before
    anything is written."""
    if not data:
        raise InvalidInputError(f"{operation} needs its rows as an Arrow IPC stream in the request body")
    if not isinstance(data, bytes | bytearray | memoryview):  # a pyarrow Table, say, from a caller in process
        raise InvalidInputError(f"{operation} takes its rows as Arrow IPC stream bytes, not {type(data).__name__}")
    decoded, rows = decoded_size(data, operation)
    limit = max_data_bytes()
    if decoded > limit or rows > limit:
        raise DataTooLargeError(f"{operation}: the rows decode to more than {limit} bytes (or rows)")
    try:
        with pa.ipc.open_stream(pa.py_buffer(data), options=_ALIGNED) as reader:
            table = reader.read_all()
        table.validate(full=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OSError) as exc:
        raise InvalidInputError(f"{operation}: the request body is not valid Arrow IPC data ({exc})") from None
    if not table.schema.names:
        raise InvalidInputError(f"{operation}: the Arrow IPC stream has no columns")
    check_storable(table.schema, operation)
    return table


def check_storable(schema: pa.Schema, operation: str) -> None:
    """Every column of ``schema`` of a type Lance can store (as Lance's own schema conversion
    says: not decimal32/64, list views, unions, run-end encoding, month-day-nano intervals, ...).
    Raises InvalidInputError naming the column."""
    for field in schema:
        try:
            LanceSchema.from_pyarrow(pa.schema([field]))
        except (ValueError, TypeError, OSError, pa.ArrowException):
            raise InvalidInputError(
                f"{operation}: column {field.name!r} has a type Lance cannot store: {field.type}"
            ) from None


def decoded_size(data: bytes, operation: str) -> tuple[int, int]:
    """The bytes the stream's buffers take once decompressed, and its rows, read from each
    message's metadata and the 8-byte length before each compressed buffer: nothing is
    decompressed. Raises InvalidInputError for a body that is not an Arrow IPC stream or holds
    more than ``MAX_IPC_MESSAGES`` messages."""
    decoded = rows = 0
    try:
        for count, message in enumerate(_messages(data), 1):
            if count > MAX_IPC_MESSAGES:
                raise InvalidInputError(
                    f"{operation}: an Arrow IPC stream may hold at most {MAX_IPC_MESSAGES} messages"
                )
            metadata = memoryview(message.metadata)
            header_type = _scalar(metadata, _root(metadata), _MESSAGE_HEADER_TYPE, "B")
            if header_type not in (_RECORD_BATCH, _DICTIONARY_BATCH):
                continue
            batch = _table(metadata, _root(metadata), _MESSAGE_HEADER)
            if header_type == _DICTIONARY_BATCH:
                batch = _table(metadata, batch, _DICTIONARY_DATA)
            body = memoryview(message.body) if message.body is not None else memoryview(b"")
            compressed = _field(metadata, batch, _BATCH_COMPRESSION) is not None
            for offset, length in _buffers(metadata, batch):
                decoded += _buffer_size(body, offset, length, compressed)
            if header_type == _RECORD_BATCH:
                rows += _scalar(metadata, batch, _BATCH_LENGTH, "q")
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError, struct.error, IndexError, ValueError) as exc:
        raise InvalidInputError(f"{operation}: the request body is not an Arrow IPC stream ({exc})") from None
    return decoded, rows


def _messages(data: bytes) -> Iterator[pa.ipc.Message]:
    reader = pa.ipc.MessageReader.open_stream(pa.BufferReader(pa.py_buffer(data)))
    while True:
        try:
            yield reader.read_next_message()
        except StopIteration:
            return


def _buffer_size(body: memoryview, offset: int, length: int, compressed: bool) -> int:
    """A buffer's size once decoded: in a compressed batch, the int64 before its bytes (or, when
    that is -1, its own length less those 8 bytes)."""
    if offset < 0 or length < 0 or offset + length > len(body):
        raise ValueError("a buffer lies outside the message body")
    if not compressed or length == 0:
        return length
    (size,) = struct.unpack_from("<q", body, offset)
    if size == _NOT_COMPRESSED:
        return length - 8
    if size < 0:
        raise ValueError("a compressed buffer has a negative length")
    return int(size)


# A minimal reader of the FlatBuffers the messages' metadata is written in (flatbuffers.dev,
# "internals"): only what the size check needs. Every offset is checked by struct's bounds.


def _root(buffer: memoryview) -> int:
    return int(struct.unpack_from("<I", buffer, 0)[0])


def _field(buffer: memoryview, table: int, slot: int) -> int | None:
    """Where field ``slot`` of the table at ``table`` is, or None when it is absent."""
    vtable = table - struct.unpack_from("<i", buffer, table)[0]
    vtable_size = struct.unpack_from("<H", buffer, vtable)[0]
    entry = 4 + 2 * slot
    if entry + 2 > vtable_size:
        return None
    offset = struct.unpack_from("<H", buffer, vtable + entry)[0]
    return table + offset if offset else None


def _scalar(buffer: memoryview, table: int, slot: int, kind: str) -> int:
    where = _field(buffer, table, slot)
    return 0 if where is None else int(struct.unpack_from(f"<{kind}", buffer, where)[0])


def _table(buffer: memoryview, table: int, slot: int) -> int:
    where = _field(buffer, table, slot)
    if where is None:
        raise ValueError("a message lacks its header")
    return where + int(struct.unpack_from("<I", buffer, where)[0])


def _buffers(buffer: memoryview, batch: int) -> Iterator[tuple[int, int]]:
    """A batch's buffers: (offset, length) in the message body (Buffer structs, 16 bytes each)."""
    where = _field(buffer, batch, _BATCH_BUFFERS)
    if where is None:
        return
    vector = where + int(struct.unpack_from("<I", buffer, where)[0])
    count = struct.unpack_from("<I", buffer, vector)[0]
    for index in range(count):
        offset, length = struct.unpack_from("<qq", buffer, vector + 4 + 16 * index)
        yield int(offset), int(length)
