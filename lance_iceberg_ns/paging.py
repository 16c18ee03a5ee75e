"""Pages of a listing, one way for every listing: names, tables, versions, tags, branches, indices.

Items are sorted by a key; a page holds the items after the page token (the key of the previous
page's last item), at most ``limit`` of them. The one next-token rule: the key of the page's last
item when more items may follow it, else no token.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def page_after(names: Sequence[str], page_token: str | None) -> list[str]:
    """The sorted, distinct names that come after ``page_token``."""
    ordered = sorted(set(names))
    if page_token:
        return [name for name in ordered if name > page_token]
    return ordered


def page_of(
    items: Iterable[T],
    key: Callable[[T], Any],
    page_token: Any | None,
    limit: int | None,
    descending: bool = False,
) -> tuple[list[T], Any | None]:
    """The items after ``page_token`` in the order of ``key`` (reversed when ``descending``), at
    most ``limit`` (all when None), and the next page's token (a key)."""
    ordered = sorted(items, key=key, reverse=descending)
    if page_token is not None:
        ordered = [item for item in ordered if (key(item) < page_token if descending else key(item) > page_token)]
    return _cut(ordered, limit, key)


def _cut(ordered: list[T], limit: int | None, key: Callable[[T], Any]) -> tuple[list[T], Any | None]:
    if limit is None or len(ordered) <= limit:
        return ordered, None
    page = ordered[:limit]
    return page, key(page[-1]) if page else None


def take_page(
    candidates: list[str],
    limit: int | None,
    keep: Callable[[list[str]], Iterable[str]],
    batch_size: int,
) -> tuple[list[str], str | None]:
    """A page of the sorted ``candidates`` that ``keep`` keeps, looking at them in batches until
    ``limit`` names are kept, so that a small page costs lookups only for the names it had to
    look at. The token follows the one rule: the last name, when candidates are left after it."""
    page: list[str] = []
    position = 0
    while position < len(candidates) and (limit is None or len(page) < limit):
        wanted = batch_size if limit is None else max(batch_size, limit - len(page))
        batch = candidates[position : position + wanted]
        position += len(batch)
        page.extend(keep(batch))
    if limit is not None and len(page) > limit:
        return page[:limit], page[limit - 1]
    if limit is not None and len(page) == limit and position < len(candidates):
        return page, page[-1]
    return page, None
