"""The one small cache (``lance_iceberg_ns.cache``) and the managed-version state built on it."""

from __future__ import annotations

import pytest

from lance_iceberg_ns.cache import RecentlyUsed
from lance_iceberg_ns.catalog.managed_state import DESCRIBED_JUST_NOW_SECONDS, ManagedState
from lance_iceberg_ns.identifiers import parse_table_id

from .helpers import all_succeed


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_beyond_capacity_the_least_recently_used_entry_goes() -> None:
    cache: RecentlyUsed[str, int] = RecentlyUsed(2)
    cache.keep("a", 1)
    cache.keep("b", 2)
    assert cache.get("a") == 1  # "a" is now the most recently used
    cache.keep("c", 3)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)
    assert len(cache) == 2


def test_entries_expire_after_their_time_to_live() -> None:
    clock = Clock()
    cache: RecentlyUsed[str, bool] = RecentlyUsed(10, ttl_seconds=30, clock=clock)
    cache.keep("t", False)
    clock.now += 29.9
    assert cache.get("t") is False  # a remembered False is an answer, not a miss
    clock.now += 0.1
    assert cache.get("t") is None
    assert len(cache) == 0  # the expired entry is gone, not only hidden


def test_a_lookup_can_ask_for_younger_entries_than_the_time_to_live() -> None:
    clock = Clock()
    cache: RecentlyUsed[str, str] = RecentlyUsed(10, ttl_seconds=60, clock=clock)
    cache.keep("t", "state")
    clock.now += 1
    assert cache.get("t", max_age=0.5) is None
    assert cache.get("t", max_age=2) == "state"
    cache.keep("t", "newer")  # keeping again starts the age afresh
    assert cache.get("t", max_age=0.5) == "newer"


def test_a_time_to_live_of_zero_keeps_nothing() -> None:
    cache: RecentlyUsed[str, int] = RecentlyUsed(10, ttl_seconds=0)
    cache.keep("a", 1)
    assert cache.get("a") is None and len(cache) == 0


def test_forget_and_forget_where_let_entries_go() -> None:
    cache: RecentlyUsed[tuple[str, int], str] = RecentlyUsed(10)
    for number in range(4):
        cache.keep(("loc", number), f"v{number}")
    assert cache.forget(("loc", 0)) == "v0" and cache.forget(("loc", 0)) is None
    cache.forget_where(lambda key, value: key[1] % 2 == 1)
    assert cache.values() == ["v2"]


def test_values_let_go_for_want_of_room_are_handed_to_on_evict() -> None:
    closed: list[str] = []
    cache: RecentlyUsed[str, str] = RecentlyUsed(1, on_evict=closed.append)
    cache.keep("a", "first")
    cache.keep("b", "second")
    cache.forget("b")  # a value forgotten on purpose is the caller's, not evicted
    assert closed == ["first"]


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError):
        RecentlyUsed(0)


def test_threads_keeping_and_reading_at_once_never_exceed_the_capacity() -> None:
    cache: RecentlyUsed[int, int] = RecentlyUsed(50)

    def work(index: int) -> None:
        offset = index * 40
        for number in range(2000):
            cache.keep(offset + number % 80, number)
            cache.get(offset + (number * 7) % 80)
            if number % 97 == 0:
                cache.forget_where(lambda key, value: key % 5 == 0)

    all_succeed(4, work)
    assert len(cache) <= 50


def test_managed_state_answers_own_commits_only_while_the_commit_cache_allows() -> None:
    table = parse_table_id(["wh", "db", "t"])
    state = ManagedState(commit_cache_seconds=2)
    state.loaded(table, "loaded")
    assert state.own_commit(table) is None  # loaded, not committed here
    assert state.recent(table, DESCRIBED_JUST_NOW_SECONDS) == "loaded"
    state.committed(table, "committed")
    assert state.own_commit(table) == "committed" and state.recent(table, 0) == "committed"
    state.forget(table)
    assert state.own_commit(table) is None and state.recent(table, 60) is None

    never = ManagedState(commit_cache_seconds=0)
    never.committed(table, "committed")
    assert never.own_commit(table) is None and never.recent(table, 60) is None
