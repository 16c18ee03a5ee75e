"""Arrow IPC in and out of the data operations: the rows of a write, the answer of a query.

The rows of a write come from a caller, so they are checked before pylance sees them: their
decoded size is bounded before anything is decompressed (a 16 KB zstd body can expand to 512 MiB),
their columns are counted (``limits.MAX_COLUMNS``) before any batch is read, their buffers are
aligned for their types (pylance panics on a misaligned ``decimal256`` or ``string_view``
buffer), their contents are validated in full (offsets that go backwards, a dictionary index out
of range), every column has a type Lance can store, and what they take once their views and
dictionaries are expanded is bounded as their decoded size is (see ``materialised_size``).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lance.schema import LanceSchema, schema_to_json
from lance_namespace.errors import InvalidInputError

from lance_iceberg_ns.data.schema import column_count, unreadable_name
from lance_iceberg_ns.limits import (
    MAX_IPC_MESSAGES,
    MAX_SCHEMA_METADATA_BYTES,
    DataTooLargeError,
    check_column_count,
    max_data_bytes,
)

# Buffers copied to 64-byte boundaries where the body left them elsewhere: pyarrow's own
# "DataTypeSpecific" leaves a string_view's 16-byte views at 8, and pylance panics on them.
_ALIGNED = pa.ipc.IpcReadOptions(ensure_alignment=pa.ipc.Alignment.At64Byte)
# Arrow's Message.fbs: the header's union types, and the field slots this module reads.
_DICTIONARY_BATCH, _RECORD_BATCH = 2, 3
_MESSAGE_HEADER_TYPE, _MESSAGE_HEADER = 1, 2
_BATCH_LENGTH, _BATCH_BUFFERS, _BATCH_COMPRESSION = 0, 2, 3
_DICTIONARY_DATA = 1
_NOT_COMPRESSED = -1  # a compressed batch's buffer prefix when that buffer was left as it was
# Arrow's view layout: 16 bytes per row, holding a value of up to 12 bytes itself.
_VIEW_BYTES, _INLINE_VIEW_BYTES = 16, 12


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
    docstring). Raises DataTooLargeError (an InvalidInputError) for rows that decode, or expand
    once their views and dictionaries are, to more than ``limits.max_data_bytes()``;
    InvalidInputError for a missing body, one that is not an Arrow IPC stream, more than
    ``limits.MAX_COLUMNS`` columns, invalid contents, a type Lance cannot store or no columns;
    read whole, before anything is written."""
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
            check_column_count(column_count(reader.schema), f"{operation}: the rows")  # before any batch is read
            check_schema_metadata(reader.schema, f"{operation}: the rows")
            table = reader.read_all()
        table.validate()  # the buffers' sizes: what the size below reads is there
        if not table.schema.names:
            raise InvalidInputError(f"{operation}: the Arrow IPC stream has no columns")
        check_storable(table.schema, operation)
        # Before the full validation, which checks the UTF-8 of every string_view's bytes each
        # time a view points to them: 100,000 views of one shared megabyte took 5 s.
        check_materialised_size(table, operation)
        table.validate(full=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OSError, UnicodeError) as exc:
        # UnicodeError: a column's name that is not UTF-8, which pyarrow only finds as it reads the name
        raise InvalidInputError(f"{operation}: the request body is not valid Arrow IPC data ({exc})") from None
    return table


def check_schema_metadata(schema: pa.Schema, what: str) -> None:
    """The schema's metadata and its fields' (nested ones too), keys and values together, at most
    ``MAX_SCHEMA_METADATA_BYTES``: a table's schema is read whole by every describe, so its size is
    what each answer costs; ``InvalidInputError`` naming ``what`` otherwise."""
    total = 0
    pending: list[pa.Field] = list(schema)
    for key, value in (schema.metadata or {}).items():
        total += len(key) + len(value)
    while pending:
        field = pending.pop()
        for key, value in (field.metadata or {}).items():
            total += len(key) + len(value)
        pending.extend(field.type.field(index) for index in range(getattr(field.type, "num_fields", 0)))
    if total > MAX_SCHEMA_METADATA_BYTES:
        raise InvalidInputError(f"{what}: schema metadata may take at most {MAX_SCHEMA_METADATA_BYTES} bytes")


# what Lance wraps its reason in: what failed, its error's kind, and where in its sources it was raised
_LANCE_WRAPPING = re.compile(r"^(?:Failed to convert schema: )?(?:LanceError\(\w+\): )?|, \S+\.rs:\d+:\d+$")


def check_storable(schema: pa.Schema, operation: str) -> None:
    """Every column of ``schema`` of a type Lance can store (as Lance's own schema conversion
    says: not decimal32/64, list views, unions, run-end encoding, month-day-nano intervals, ...)
    and that the Lance namespace's JSON schema can describe, as stored (not a map: every detailed
    describe of the table would fail), and named so that queries read it (``schema.unreadable_name``,
    a struct's fields included). Raises InvalidInputError naming the column."""
    for field in schema:
        for name in _names(field):
            if why := unreadable_name(name):
                column = f"column {field.name[:100]!r}" + ("" if name == field.name else f", field {name[:100]!r},")
                raise InvalidInputError(f"{operation}: {column} cannot be read by name: {why}")
        try:
            stored = LanceSchema.from_pyarrow(pa.schema([field])).to_pyarrow()
        except (ValueError, TypeError, OSError, pa.ArrowException) as exc:
            why = _LANCE_WRAPPING.sub("", str(exc))[:300]
            if not _refused_by_lance(pa.field("c", field.type)):  # its name, or what its metadata asks
                raise InvalidInputError(f"{operation}: column {field.name!r} is refused by Lance: {why}") from None
            raise InvalidInputError(
                f"{operation}: column {field.name!r} has a type Lance cannot store: {field.type}"
            ) from None
        try:
            schema_to_json(stored)
        except (ValueError, TypeError, OSError, pa.ArrowException):
            raise InvalidInputError(
                f"{operation}: column {field.name!r} has a type the Lance namespace's JSON schema cannot "
                f"describe: {field.type}"
            ) from None


def _names(field: pa.Field) -> Iterator[str]:
    """The name of ``field`` and of every struct field in it (at any depth, in lists too)."""
    yield field.name
    kind = field.type
    while pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        kind = kind.value_type
    if pa.types.is_struct(kind):
        for i in range(kind.num_fields):
            yield from _names(kind.field(i))


def _refused_by_lance(field: pa.Field) -> bool:
    """Whether Lance's own schema conversion refuses ``field``."""
    try:
        LanceSchema.from_pyarrow(pa.schema([field]))
    except (ValueError, TypeError, OSError, pa.ArrowException):
        return True
    return False


def check_materialised_size(table: pa.Table, operation: str) -> None:
    """The table's columns take at most ``limits.max_data_bytes()`` once their views and
    dictionaries are expanded (``materialised_size``), counted column by column; DataTooLargeError
    naming the column that goes beyond otherwise. Needs only the table's structure validated (the
    sizes of its buffers): InvalidInputError for offsets or indices out of range."""
    limit, total = max_data_bytes(), 0
    for name, column in zip(table.column_names, table.columns, strict=True):
        try:
            total += sum(materialised_size(chunk) for chunk in column.chunks)
        except (IndexError, ValueError, pa.ArrowException):  # offsets or indices out of range
            raise InvalidInputError(f"{operation}: column {name!r} holds offsets or indices out of range") from None
        if total > limit:
            raise DataTooLargeError(
                f"{operation}: column {name!r} brings the rows past {limit} bytes once its views or "
                f"dictionary values are expanded (a value referenced by many rows counts once per row)"
            )


def materialised_size(array: pa.Array) -> int:
    """The bytes ``array`` takes once its views and dictionaries are expanded: a string_view or
    binary_view counts each view and the bytes it points to, however many views share them; a
    dictionary counts, for each row, the size of the value it names. A column with neither counts
    its buffers. Read from lengths, offsets and index counts: nothing is expanded, no value is
    read. Validity bitmaps are left out. Raises IndexError for an index or offset out of range."""
    kind = array.type
    if not _expands(kind):
        return int(array.nbytes)
    if pa.types.is_dictionary(kind):
        counts = pc.value_counts(array.indices)  # (index, rows): as many entries as distinct indices
        named = counts.field("values")
        used = named.is_valid()  # null rows name no value
        indices = named.filter(used).to_numpy(zero_copy_only=False).astype(np.int64)
        rows = counts.field("counts").filter(used).to_numpy(zero_copy_only=False)
        return int(np.dot(_taken(_entry_sizes(array.dictionary), indices), rows))
    if pa.types.is_string_view(kind) or pa.types.is_binary_view(kind):
        return int(_view_sizes(array).sum())
    own = (len(array) + 1) * _offset_bytes(kind) if _has_offsets(kind) else 0
    return own + sum(materialised_size(child) for child in _children(array))


def _expands(kind: pa.DataType) -> bool:
    """Whether a type holds a view or a dictionary, at any depth."""
    if pa.types.is_dictionary(kind) or pa.types.is_string_view(kind) or pa.types.is_binary_view(kind):
        return True
    return any(_expands(kind.field(index).type) for index in range(kind.num_fields))


def _has_offsets(kind: pa.DataType) -> bool:
    return pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind)


def _children(array: pa.Array) -> list[pa.Array]:
    """The child arrays of a nested array, cut to the part its rows use (no copy)."""
    kind = array.type
    if pa.types.is_struct(kind):
        return [array.field(index) for index in range(kind.num_fields)]  # the struct's own slice
    if pa.types.is_fixed_size_list(kind):
        return [array.values.slice(array.offset * kind.list_size, len(array) * kind.list_size)]
    if _has_offsets(kind):
        offsets = array.offsets
        start, end = offsets[0].as_py(), offsets[-1].as_py()
        return [array.values.slice(start, end - start)]
    return []


def _view_sizes(array: pa.Array) -> np.ndarray:
    """Per row of a string_view or binary_view: its 16-byte view and the bytes it points to (none
    for a null row, or a value of at most 12 bytes, held within the view)."""
    if not len(array):  # its views buffer may be absent
        return np.zeros(0, np.int64)
    views = np.frombuffer(array.buffers()[1], dtype=np.int32).reshape(-1, 4)[array.offset : array.offset + len(array)]
    lengths = views[:, 0].astype(np.int64)
    outside = lengths > _INLINE_VIEW_BYTES
    if array.null_count:
        outside &= array.is_valid().to_numpy(zero_copy_only=False)
    return np.where(outside, lengths, 0) + _VIEW_BYTES


def _entry_sizes(array: pa.Array) -> np.ndarray:
    """Per row of ``array`` (a dictionary's values, which lie in the body: each row takes some of
    its bytes), what it takes once expanded: as ``materialised_size``, row by row."""
    kind = array.type
    width = _fixed_width(kind)
    if width is not None:
        return np.full(len(array), width, dtype=np.int64)
    if pa.types.is_dictionary(kind):
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        indices = array.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)[valid]
        taken = np.zeros(len(array), np.int64)
        taken[valid] = _taken(_entry_sizes(array.dictionary), indices)
        return taken
    if pa.types.is_string_view(kind) or pa.types.is_binary_view(kind):
        return _view_sizes(array)
    if pa.types.is_struct(kind):
        return sum((_entry_sizes(child) for child in _children(array)), np.zeros(len(array), np.int64))
    if pa.types.is_fixed_size_list(kind):
        (child,) = _children(array)
        return _entry_sizes(child).reshape(len(array), kind.list_size).sum(axis=1)
    if _has_offsets(kind):  # a list's values as its child's, summed between its offsets
        (child,) = _children(array)
        offsets = array.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
        offsets -= offsets[0]
        running = np.concatenate(([0], np.cumsum(_entry_sizes(child))))
        sizes = _taken(running, offsets[1:]) - _taken(running, offsets[:-1])
        return np.maximum(sizes, 0) + _offset_bytes(kind)  # offsets going backwards take nothing
    try:  # binary and string, large or not
        lengths = pc.binary_length(array).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    except pa.ArrowNotImplementedError:  # no type Lance stores (check_storable refused it already)
        return np.zeros(len(array), np.int64)
    return np.maximum(lengths, 0) + _offset_bytes(kind)


def _taken(sizes: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """``sizes`` at ``indices``; IndexError for an index out of range (numpy would read a
    negative one from the end)."""
    if len(indices) and (indices.min() < 0 or indices.max() >= len(sizes)):
        raise IndexError("an index out of range")
    return sizes[indices]


def _offset_bytes(kind: pa.DataType) -> int:
    large = pa.types.is_large_list(kind) or pa.types.is_large_string(kind) or pa.types.is_large_binary(kind)
    return 8 if large else 4


def _fixed_width(kind: pa.DataType) -> int | None:
    """The bytes every row of a type takes, where all rows take the same (null: none)."""
    if pa.types.is_null(kind):
        return 0
    if pa.types.is_struct(kind):
        widths = [_fixed_width(kind.field(index).type) for index in range(kind.num_fields)]
        return None if None in widths else sum(width or 0 for width in widths)
    if pa.types.is_fixed_size_list(kind):
        width = _fixed_width(kind.value_type)
        return None if width is None else width * kind.list_size
    if pa.types.is_dictionary(kind) or kind.num_fields:
        return None
    try:
        return (kind.bit_width + 7) // 8
    except ValueError:  # not of fixed width
        return None


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
