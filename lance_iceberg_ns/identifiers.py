"""Lance identifiers: parsed and validated once, then carried as value objects.

A namespace id is ``[warehouse, level1, level2, ...]`` and a table id is
``[warehouse, level1, ..., table]``. Every part must be usable as a directory name under the
storage root, since default table locations are derived from them, and must name one thing only:

* parts are normalized to Unicode NFC, so an NFD spelling addresses the same table as its NFC
  twin (and the two cannot both be created);
* invisible, format, bidirectional-control, private-use, unassigned and line/paragraph-separator
  characters are refused: two names that look alike must be alike;
* the trash namespace (``lance_iceberg_ns_trash``, any case) is reserved for soft-deleted tables,
  and so is ``__lance_trash__``, where earlier versions kept them;
* namespace levels may not contain ``.``: catalogs join levels with dots, so ``ns.x`` would alias
  the nested namespace ``ns`` / ``x``. The warehouse and a table's name may keep dots.
"""

from __future__ import annotations

import re
import unicodedata
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lance_namespace.errors import InvalidInputError

# The namespace at the top of each warehouse that holds its soft-deleted tables (``tables.tombstones``).
# Made of lowercase letters and underscores, starting and ending with a letter, not starting with
# "aws": the strictest catalogs (S3 Tables and its look-alikes) refuse any other namespace name.
TRASH_NAMESPACE = "lance_iceberg_ns_trash"
# Where earlier versions kept a namespace's soft-deleted tables: its child namespace of this name,
# which those catalogs refuse. Still reserved, still read, and emptied into ``TRASH_NAMESPACE``.
LEGACY_TRASH_NAMESPACE = "__lance_trash__"
TRASH_NAMESPACES = frozenset({TRASH_NAMESPACE, LEGACY_TRASH_NAMESPACE})
_PATH_CHARACTERS = re.compile(r"[/\\]")
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")
# Unicode categories of characters that do not show, or change how the others show: controls (Cc),
# format characters (Cf: zero-width spaces and joiners, U+FEFF, U+2060, the bidi embeddings,
# overrides and isolates), surrogates (Cs), private use (Co), unassigned (Cn), line and paragraph
# separators (Zl, Zp).
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
MAX_PART_BYTES = 255  # a directory name on common file systems and object-store key segments
MAX_PARTS = 32


def _invisible_character(part: str) -> str | None:
    """The first character of ``part`` that does not show (see ``_INVISIBLE_CATEGORIES``)."""
    return next((c for c in part if unicodedata.category(c) in _INVISIBLE_CATEGORIES), None)


def _check_part(part: object, kind: str) -> str:
    """A valid identifier part, in NFC; ``InvalidInputError`` otherwise."""
    if not isinstance(part, str) or not part:
        raise InvalidInputError(f"Every {kind} identifier part must be a non-empty string, got {part!r}")
    if _CONTROL_CHARACTERS.search(part):
        raise InvalidInputError(f"Identifier part {part!r} contains a control character")
    invisible = _invisible_character(part)
    if invisible is not None:
        raise InvalidInputError(
            f"Identifier part {part!r} contains the invisible or formatting character U+{ord(invisible):04X}"
        )
    part = unicodedata.normalize("NFC", part)
    if part in (".", "..") or _PATH_CHARACTERS.search(part):
        raise InvalidInputError(f"Identifier part {part!r} is not allowed: it could leave the storage root")
    if part != part.strip():
        raise InvalidInputError(f"Identifier part {part!r} has leading or trailing whitespace")
    if part.casefold() in TRASH_NAMESPACES:
        raise InvalidInputError(f"{part.casefold()} is reserved for soft-deleted tables: {part!r} cannot be used")
    if len(part.encode()) > MAX_PART_BYTES:
        raise InvalidInputError(f"Identifier part {part[:40]!r}... is longer than {MAX_PART_BYTES} bytes")
    return part


def _check_namespace_levels(levels: tuple[str, ...]) -> tuple[str, ...]:
    """Namespace levels below the warehouse: catalogs join them with dots, so none may hold one."""
    for level in levels:
        if "." in level:
            raise InvalidInputError(
                f"Namespace level {level!r} contains '.': levels are joined with dots, so it would alias "
                "a nested namespace; give each level as its own part"
            )
    return levels


def _parts(raw: Sequence[str] | None, kind: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str):
        raise InvalidInputError(f"A {kind} identifier is a list of strings, not the string {raw!r}")
    if len(raw) > MAX_PARTS:
        raise InvalidInputError(f"A {kind} identifier has at most {MAX_PARTS} parts, got {len(raw)}")
    return tuple(_check_part(part, kind) for part in raw)


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
    """Parse a namespace id (parts in NFC); ``None`` stands for the root (the catalog server
    itself). Raises ``InvalidInputError`` for a part that breaks the rules of the module docstring."""
    parts = _parts(raw, "namespace")
    if not parts:
        return None
    return NamespaceId(parts[0], _check_namespace_levels(parts[1:]))


def parse_table_id(raw: Sequence[str] | None) -> TableId:
    """Parse a table id of at least ``[warehouse, namespace, table]`` (parts in NFC). Raises
    ``InvalidInputError`` for a part that breaks the rules of the module docstring."""
    parts = _parts(raw, "table")
    if len(parts) < 3:
        raise InvalidInputError(
            f"A table identifier needs a warehouse, a namespace and a table name, got {list(parts)}"
        )
    return TableId(NamespaceId(parts[0], _check_namespace_levels(parts[1:-1])), parts[-1])


def in_default_namespace(raw: Any, default: Sequence[str]) -> Any:
    """A table id of one part (a bare table name, as single-level clients send it) placed in the
    ``default`` namespace, when one is configured; any other id as it is."""
    if default and isinstance(raw, list | tuple) and len(raw) == 1:
        return [*default, raw[0]]
    return raw


def trash_path(namespace_path: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The trash namespace that holds the soft-deleted tables of ``namespace_path``: the
    warehouse's one, at its top, whatever the namespace (inside the warehouse's catalog). Being
    no namespace's child, it never keeps a namespace whose tables were all dropped from being
    dropped, and no drop ever needs to remove it."""
    return (TRASH_NAMESPACE,)


def legacy_trash_path(namespace_path: tuple[str, ...]) -> tuple[str, ...]:
    """Where earlier versions kept the soft-deleted tables of ``namespace_path``: its child
    namespace ``__lance_trash__``."""
    return (*namespace_path, LEGACY_TRASH_NAMESPACE)


def aside_name(why: str) -> str:
    """A new name for an entry set aside in the trash while it is ``why`` (``deregistered``,
    ``replaced``, ``dropped``): lowercase letters, digits and underscores, as the strictest
    catalogs require, and never a tombstone's (``tables.tombstones``)."""
    return f"{why}_{uuid.uuid4().hex[:12]}"
