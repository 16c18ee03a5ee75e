"""The small rules every request shares: reading a Lance mode, and refusing branches where the
catalog keeps one line of versions."""

from __future__ import annotations

from collections.abc import Collection

from lance_namespace.errors import InvalidInputError, UnsupportedOperationError


def parse_mode(raw: str | None, default: str, allowed: Collection[str], operation_name: str) -> str:
    """A Lance mode, case-insensitive, in PascalCase or snake_case (``ExistOk``, ``exist_ok``),
    as one of ``allowed`` (lower case, no underscores). Raises InvalidInputError naming them."""
    mode = (raw or default).replace("_", "").lower()
    if mode not in allowed:
        raise InvalidInputError(
            f"Unsupported {operation_name} mode {raw!r}. Supported modes are: {', '.join(sorted(allowed))}"
        )
    return mode


def refuse_branch(branch: str | None, what: str) -> None:
    """Branches other than ``main`` are refused where the catalog keeps one line of versions."""
    if branch and branch != "main":
        refuse_branches(what)


def refuse_branches(what: str) -> None:
    """Refuse ``what``, a change to a table's branches, where the catalog keeps one line of versions."""
    raise UnsupportedOperationError(
        f"{what}: branches are not supported here (the catalog keeps one line of versions per table)"
    )
