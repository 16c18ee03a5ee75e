"""The commits this process answered with an error though they may have landed: the catalog's
answer was lost, or a writer by location took the version's final name and the catalog's commit
could not be taken back. pylance reports a refused commit whose version it cannot read back as of
unknown outcome; the data plane asks here whether the catalog may have taken it, so that a writer
is told to retry only when it did not (``DataPlane._committing``). Kept per process, by table and
version, for ten minutes.
"""

from __future__ import annotations

from collections.abc import Sequence

from lance_iceberg_ns.cache import RecentlyUsed

UNCERTAIN_KEPT_SECONDS = 600.0
_uncertain: RecentlyUsed[tuple[str, ...], bool] = RecentlyUsed(1_024, UNCERTAIN_KEPT_SECONDS)


def landed_unanswered(table_id: Sequence[str], version: int) -> None:
    """Note that the commit of ``version`` of ``table_id`` may have landed, though it is answered with an error."""
    _uncertain.keep((*table_id, str(version)), True)


def commit_may_have_landed(table_id: Sequence[str], version: int) -> bool:
    """Whether a commit of ``version`` of ``table_id`` by this process may have landed though it
    was answered with an error; False when every one was refused before the catalog took it, or
    taken back."""
    return bool(_uncertain.get((*table_id, str(version))))
