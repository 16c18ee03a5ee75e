"""Schema evolution: add, alter and drop columns, and the schema's metadata; each a new version."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import lance
import pyarrow as pa
from lance_namespace.errors import InvalidInputError, UnsupportedOperationError
from lance_namespace_urllib3_client.models import AddColumnsEntry, AlterColumnsEntry

from lance_iceberg_ns.errors.pylance import pylance_failures
from lance_iceberg_ns.limits import (
    MAX_LITERAL_BYTES,
    MAX_SCHEMA_METADATA_BYTES,
    MAX_VECTOR_DIMENSION,
    check_column_count,
)

# Lance's own columns, which it refuses to store under a table's names (a table renamed to one
# answered every query with a panic)
LANCE_RESERVED_COLUMNS = frozenset(
    {"_rowid", "_rowaddr", "_rowoffset", "_row_created_at_version", "_row_last_updated_at_version"}
)
MAX_TYPE_NESTING = 32  # lists within lists in one data_type: deeper is no column anyone stores

# The Lance spec's JSON Arrow types (JsonArrowDataType.type) that a column can be cast to.
_PRIMITIVES: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "boolean": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float16": pa.float16(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "utf8": pa.string(),
    "string": pa.string(),
    "large_utf8": pa.large_string(),
    "large_string": pa.large_string(),
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
    "date32": pa.date32(),
    "date64": pa.date64(),
}


def column_count(schema: pa.Schema) -> int:
    """The columns of ``schema`` as ``limits.MAX_COLUMNS`` counts them: every field, nested ones
    too (a struct's fields, a list's item, a dictionary's values), as Lance gives each its own id.
    Counted level by level, so a schema of any depth is counted."""
    count, types = 0, [field.type for field in schema]
    while types:
        count += len(types)
        types = [child for kind in types for child in _child_types(kind)]
    return count


def metadata_bytes(schema: pa.Schema) -> int:
    """The bytes of the keys and values of ``schema``'s metadata and of its fields' (nested ones
    too), as ``limits.MAX_SCHEMA_METADATA_BYTES`` counts them."""
    total = sum(len(key) + len(value) for key, value in (schema.metadata or {}).items())
    pending: list[pa.Field] = list(schema)
    while pending:
        field = pending.pop()
        total += sum(len(key) + len(value) for key, value in (field.metadata or {}).items())
        pending.extend(field.type.field(index) for index in range(getattr(field.type, "num_fields", 0)))
    return total


def _child_types(kind: pa.DataType) -> list[pa.DataType]:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return [kind.field(index).type for index in range(kind.num_fields)]


def arrow_type(json_type: Mapping[str, Any], nesting: int = 0) -> pa.DataType:
    """The Arrow type of a JSON Arrow type (``{"type": "int32"}``, ``{"type": "fixed_size_list",
    "length": 4, "fields": [{"name": "item", "type": {...}, "nullable": true}]}``). A fixed-size
    list is at most ``limits.MAX_VECTOR_DIMENSION`` long (the cast reserves rows × length up
    front), lists nest at most ``MAX_TYPE_NESTING`` deep.
    Raises InvalidInputError for a type this cast does not know."""
    if not isinstance(json_type, Mapping) or nesting > MAX_TYPE_NESTING:
        raise InvalidInputError(f"A data_type is a JSON Arrow type nested at most {MAX_TYPE_NESTING} deep")
    name = str(json_type.get("type", "")).lower()
    if name in _PRIMITIVES:
        return _PRIMITIVES[name]
    fields = json_type.get("fields") or []
    if name in ("list", "large_list", "fixed_size_list") and isinstance(fields, list) and len(fields) == 1:
        field = fields[0] if isinstance(fields[0], Mapping) else {}
        item_type = arrow_type(field.get("type"), nesting + 1)  # type: ignore[arg-type]  # a Mapping is checked
        item = pa.field(str(field.get("name", "item")), item_type, bool(field.get("nullable", True)))
        if name == "fixed_size_list":
            length = json_type.get("length")
            if isinstance(length, bool) or not isinstance(length, int) or not 1 <= length <= MAX_VECTOR_DIMENSION:
                raise InvalidInputError(f"A fixed_size_list type needs its length, from 1 to {MAX_VECTOR_DIMENSION}")
            return pa.list_(item, length)
        return pa.large_list(item) if name == "large_list" else pa.list_(item)
    raise InvalidInputError(f"Unsupported data_type {str(dict(json_type))[:200]} for a column cast")


def add_columns(dataset: lance.LanceDataset, entries: Sequence[AddColumnsEntry]) -> int:
    """Add columns computed by SQL expressions over the existing ones; the new version.
    Raises InvalidInputError (no expression, a bad one, a taken name, more columns in all than
    ``limits.MAX_COLUMNS``), UnsupportedOperationError (virtual columns: they need a UDF runtime
    this namespace does not have)."""
    if not entries:
        raise InvalidInputError("alter_table_add_columns needs at least one new column")
    check_column_count(column_count(dataset.schema) + len(entries), "alter_table_add_columns: the table")
    expressions: dict[str, str] = {}
    for entry in entries:
        if entry.virtual_column is not None:
            raise UnsupportedOperationError(f"Column {entry.name!r}: virtual (UDF) columns are not supported here")
        expression = entry.expression or entry.computed
        if not expression:
            raise InvalidInputError(f"Expression is required for new column {entry.name!r}")
        if entry.name in expressions:
            raise InvalidInputError(f"Each new column needs a name of its own, got {entry.name!r}")
        expressions[check_new_column_name(entry.name or "")] = expression
    with pylance_failures("alter_table_add_columns"):
        dataset.add_columns(expressions)
    return int(dataset.version)


def unreadable_name(name: str) -> str | None:
    """Why ``name`` cannot name a column (or a struct's field) that queries read, or None: an empty
    name is written, but no query can then read the table; one longer than an expression may name
    (``MAX_LITERAL_BYTES``) no filter or projection can reach."""
    if not name:
        return "it is empty"
    if len(name.encode()) > MAX_LITERAL_BYTES:
        return f"it is over {MAX_LITERAL_BYTES} bytes, more than an expression may name"
    return None


def check_new_column_name(name: str) -> str:
    """``name`` for a column a table gains or a column renamed: InvalidInputError for a name Lance
    takes for its own or cannot read back (empty, too long to name, or with a dot, which Lance
    reads as a path)."""
    if unreadable_name(name) or "." in name or name in LANCE_RESERVED_COLUMNS:
        raise InvalidInputError(
            f"{name[:100]!r} cannot name a column: a name is not empty, at most {MAX_LITERAL_BYTES} bytes, holds "
            f"no dot, and is none of Lance's own ({', '.join(sorted(LANCE_RESERVED_COLUMNS))})"
        )
    return name


def alter_columns(dataset: lance.LanceDataset, entries: Sequence[AlterColumnsEntry]) -> int:
    """Rename columns, change their nullability or cast them; the new version.
    Raises InvalidInputError (an unknown column, an impossible cast)."""
    if not entries:
        raise InvalidInputError("alter_table_alter_columns needs at least one alteration")
    alterations: list[dict[str, Any]] = []
    for entry in entries:
        if entry.virtual_column is not None:
            raise UnsupportedOperationError(f"Column {entry.path!r}: virtual (UDF) columns are not supported here")
        alteration: dict[str, Any] = {"path": entry.path}
        if entry.rename is not None:
            alteration["name"] = check_new_column_name(entry.rename)
        if entry.nullable is not None:
            alteration["nullable"] = entry.nullable
        if entry.data_type is not None:
            alteration["data_type"] = arrow_type(entry.data_type)
        alterations.append(alteration)
    with pylance_failures("alter_table_alter_columns"):
        dataset.alter_columns(*cast(list[Any], alterations))  # pylance's AlterColumn is a TypedDict
    return int(dataset.version)


def drop_columns(dataset: lance.LanceDataset, columns: Sequence[str]) -> int:
    """Drop columns (their data stays in older versions); the new version.
    Raises InvalidInputError (an unknown column, or all of them)."""
    if not columns:
        raise InvalidInputError("alter_table_drop_columns needs at least one column")
    with pylance_failures("alter_table_drop_columns"):
        dataset.drop_columns(list(columns))
    return int(dataset.version)


def update_schema_metadata(dataset: lance.LanceDataset, metadata: Mapping[str, str | None]) -> dict[str, str]:
    """Merge ``metadata`` into the schema's metadata (a new version; a key given None is removed);
    the schema's metadata after. Raises InvalidInputError, before anything is written, when the
    schema's metadata and its fields' would take more than ``limits.MAX_SCHEMA_METADATA_BYTES``
    after it: every describe answers them, and every version's manifest holds them whole."""
    merged = dict(dataset.schema.metadata or {})
    for key, value in metadata.items():
        if value is None:
            merged.pop(key.encode(), None)
        else:
            merged[key.encode()] = value.encode()
    size = metadata_bytes(dataset.schema.with_metadata(merged))
    if size > MAX_SCHEMA_METADATA_BYTES:
        raise InvalidInputError(
            f"update_table_schema_metadata: the table's schema metadata would take {size} bytes; "
            f"it may take at most {MAX_SCHEMA_METADATA_BYTES} bytes (keys and values, its fields' too)"
        )
    with pylance_failures("update_table_schema_metadata"):
        return dict(dataset.update_schema_metadata(dict(metadata)))
