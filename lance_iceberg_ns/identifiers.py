"""Lance identifiers: parsed and validated once, then carried as value objects.

A namespace id is ``[warehouse, level1, level2, ...]`` and a table id is
``[warehouse, level1, ..., table]``. Every part must be usable as a directory name under the
storage root, since default table locations are derived from them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from lance_namespace.errors import InvalidInputError

_PATH_CHARACTERS = re.compile(r"[/\\]")
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")
MAX_PART_BYTES = 255  # a directory name on common file systems and object-store key segments
MAX_PARTS = 32


def _check_part(part: object, kind: str) -> str:
    if not isinstance(part, str) or not part:
        raise InvalidInputError(f"Every {kind} identifier part must be a non-empty string, got {part!r}")
    if part in (".", "..") or _PATH_CHARACTERS.search(part):
        raise InvalidInputError(f"Identifier part {part!r} is not allowed: it could leave the storage root")
    if _CONTROL_CHARACTERS.search(part):
        raise InvalidInputError(f"Identifier part {part!r} contains a control character")
    if part != part.strip():
        raise InvalidInputError(f"Identifier part {part!r} has leading or trailing whitespace")
    if len(part.encode()) > MAX_PART_BYTES:
        raise InvalidInputError(f"Identifier part {part[:40]!r}... is longer than {MAX_PART_BYTES} bytes")
    return part


def _parts(raw: Sequence[str] | None, kind: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str):
        raise InvalidInputError(f"A {kind} identifier is a list of strings, not the string {raw!r}")
    if len(raw) > MAX_PARTS:
        raise InvalidInputError(f"A {kind} identifier has at most {MAX_PARTS} parts, got {len(raw)}")
    return tuple(_check_part(part, kind) for part in raw)


def check_location(location: str) -> str:
    """An explicit table location, taken as given except for what could make it mean another
    place than it says: ``..`` or ``.`` segments and control characters."""
    path = location.split("://", 1)[-1]
    if any(segment in (".", "..") for segment in path.split("/")):
        raise InvalidInputError(f"A table location must not contain '.' or '..' segments: {location!r}")
    if _CONTROL_CHARACTERS.search(location):
        raise InvalidInputError("A table location must not contain control characters")
    return location


@dataclass(frozen=True)
class NamespaceId:
    """A namespace inside a warehouse; ``path`` is empty for the warehouse itself."""

    warehouse: str
    path: tuple[str, ...]

    @property
    def parts(self) -> list[str]:
        return [self.warehouse, *self.path]

    def __str__(self) -> str:
        return ".".join(self.parts)


@dataclass(frozen=True)
class TableId:
    """A table: the namespace that holds it (never the bare warehouse) and its name."""

    namespace: NamespaceId
    name: str

    @property
    def warehouse(self) -> str:
        return self.namespace.warehouse

    @property
    def iceberg_identifier(self) -> tuple[str, ...]:
        """The identifier inside the warehouse's catalog."""
        return (*self.namespace.path, self.name)

    @property
    def parts(self) -> list[str]:
        return [*self.namespace.parts, self.name]

    def __str__(self) -> str:
        return ".".join(self.parts)


def parse_namespace_id(raw: Sequence[str] | None) -> NamespaceId | None:
    """Parse a namespace id; ``None`` stands for the root (the catalog server itself)."""
    parts = _parts(raw, "namespace")
    if not parts:
        return None
    return NamespaceId(parts[0], parts[1:])


def parse_table_id(raw: Sequence[str] | None) -> TableId:
    """Parse a table id of at least ``[warehouse, namespace, table]``."""
    parts = _parts(raw, "table")
    if len(parts) < 3:
        raise InvalidInputError(
            f"A table identifier needs a warehouse, a namespace and a table name, got {list(parts)}"
        )
    return TableId(NamespaceId(parts[0], parts[1:-1]), parts[-1])


def default_table_location(root: str, table: TableId) -> str:
    """Where a table declared without a location keeps its Lance data: ``{root}/{warehouse}/{ns...}/{table}``."""
    return "/".join([root.rstrip("/"), *table.parts])
