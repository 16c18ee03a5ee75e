"""Turns on one table between the data requests that name it and the take-back of a create cut off.

A create whose worker ends in the middle of its write is undone by the server (``isolation``): a
table it declared is removed if nothing was written there, one it brought back from the trash is
dropped again if it was not written since. What the take-back finds must stay true until it has
acted: another client's create, insert or overwrite of that very table, under way meanwhile, would
otherwise have its rows deleted under it or its acknowledged write dropped. So every data request
that may write a table (all but ``routes.ONLY_READING``) holds a shared turn on it, by the id the
bridge parses (Unicode normalized), while its worker runs, and a take-back waits until it is alone
on the table, holding back new writes of that table meanwhile; one that is not alone within
``ALONE_WITHIN_SECONDS`` leaves the table as it is (others are writing to it: it is theirs now).
Reads take no turn: a take-back removes a table only where nothing was written, and drops one
brought back from the trash as a soft delete, which leaves its files to the reads under way.

Turns are this server process's: a writer in another process is not held back, and the take-back's
own checks (the entry, the versions) are all that stands between it and such a writer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

ALONE_WITHIN_SECONDS = 10.0

TableKey = tuple[str, ...]


class TableTurns:
    """Shared turns for requests, a turn alone for a take-back, by table id."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._sharing: dict[TableKey, int] = {}
        self._wanted: dict[TableKey, int] = {}  # take-backs waiting to be alone: new requests wait behind them
        self._alone: set[TableKey] = set()

    @contextmanager
    def shared(self, table: Sequence[str]) -> Iterator[None]:
        """A request's turn on ``table`` (none for an empty id): waits while a take-back of it waits or runs."""
        key = tuple(table)
        if not key:
            yield
            return
        with self._changed:
            self._changed.wait_for(lambda: key not in self._alone and not self._wanted.get(key))
            self._sharing[key] = self._sharing.get(key, 0) + 1
        try:
            yield
        finally:
            with self._changed:
                self._sharing[key] -= 1
                if not self._sharing[key]:
                    del self._sharing[key]
                self._changed.notify_all()

    @contextmanager
    def alone(self, table: Sequence[str], within: float = ALONE_WITHIN_SECONDS) -> Iterator[bool]:
        """A take-back's turn on ``table``: True once no request holds a turn on it (new ones wait),
        False, holding nothing, when requests still held one after ``within`` seconds."""
        key = tuple(table)
        deadline = time.monotonic() + within
        with self._changed:
            self._wanted[key] = self._wanted.get(key, 0) + 1
            try:
                alone = self._changed.wait_for(
                    lambda: key not in self._alone and not self._sharing.get(key), max(0.0, deadline - time.monotonic())
                )
                if alone:
                    self._alone.add(key)
            finally:
                self._wanted[key] -= 1
                if not self._wanted[key]:
                    del self._wanted[key]
                self._changed.notify_all()
        try:
            yield alone
        finally:
            if alone:
                with self._changed:
                    self._alone.discard(key)
                    self._changed.notify_all()
