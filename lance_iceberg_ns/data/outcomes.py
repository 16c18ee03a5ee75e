"""What became of the commits this process refused or could not answer, by table and version.

pylance reports a refused commit whose version it cannot read back as of unknown outcome, whatever
the refusal was. The data plane asks here what became of it (``DataPlane._committing``): refused
before the catalog took it, or taken back (the refusal stands, with its own code: a conflict may be
retried, bad input may not), or possibly landed (the catalog's answer was lost, or a writer by
location took the version's final name and the commit could not be taken back: the client must
look before writing again). Nothing recorded is unknown too. Kept per process for ten minutes.
"""

from __future__ import annotations

from collections.abc import Sequence

from lance_namespace.errors import LanceNamespaceError

from lance_iceberg_ns.cache import RecentlyUsed

OUTCOMES_KEPT_SECONDS = 600.0
LANDED = "landed"  # the commit may have landed though it was answered with an error
_outcomes: RecentlyUsed[tuple[str, ...], LanceNamespaceError | str] = RecentlyUsed(1_024, OUTCOMES_KEPT_SECONDS)


def landed_unanswered(table_id: Sequence[str], version: int) -> None:
    """The commit of ``version`` of ``table_id`` may have landed, though it is answered with an error."""
    _outcomes.keep((*table_id, str(version)), LANDED)


def refused(table_id: Sequence[str], version: int, refusal: LanceNamespaceError) -> None:
    """The commit of ``version`` of ``table_id`` was refused with ``refusal``, the catalog never
    having taken it (or having it taken back); a commit of it that may have landed stays so."""
    key = (*table_id, str(version))
    if _outcomes.get(key) != LANDED:
        _outcomes.keep(key, refusal)


def refusal_of(table_id: Sequence[str], version: int) -> LanceNamespaceError | None:
    """The refusal of this process's commit of ``version`` of ``table_id``, when every such commit
    was refused without the catalog taking it; None when one may have landed, or none is known."""
    outcome = _outcomes.get((*table_id, str(version)))
    return outcome if isinstance(outcome, LanceNamespaceError) else None
