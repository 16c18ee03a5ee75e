"""What the CLI tells a person beside the answer: how long work takes, the hints that keep a typo
from passing for success, and property keys checked before anything is done."""

from __future__ import annotations

import difflib
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import click

EXIT_SKIPPED = 1  # the work ran but left something undone; what and why are in the output


def check_property_keys(properties: Mapping[str, Any]) -> None:
    """A key the bridge would only warn about and ignore (``rot=``) is a usage error, with the
    nearest known key as a hint: a typo must not pass for a setting."""
    from lance_iceberg_ns.config.settings import ICEBERG_PREFIX, KNOWN_KEYS, STORAGE_PREFIX

    for key in properties:
        if key in KNOWN_KEYS or _prefixed(key, STORAGE_PREFIX) or _prefixed(key, ICEBERG_PREFIX):
            continue
        close = difflib.get_close_matches(key, sorted(KNOWN_KEYS), n=1)
        hint = f"did you mean {close[0]!r}?" if close else "see docs/configuration.md"
        raise click.UsageError(
            f"Unknown property {key!r} (from -p, --property-file or LANCE_ICEBERG_{key.upper()}): {hint}"
        )


def _prefixed(key: str, prefix: str) -> bool:
    return key.startswith(prefix) and len(key) > len(prefix)


@dataclass
class Stopwatch:
    """How long a piece of work took, in seconds (rounded to tenths once stopped)."""

    started: float
    seconds: float = 0.0

    def stop(self) -> None:
        self.seconds = round(time.monotonic() - self.started, 1)


@contextmanager
def working(message: str, as_json: bool) -> Iterator[Stopwatch]:
    """A spinner on stderr while the work runs, only on a terminal and never with ``--json``;
    the stopwatch says afterwards how long it took."""
    from rich.console import Console

    shown = not as_json and sys.stderr.isatty()
    watch = Stopwatch(time.monotonic())
    with Console(stderr=True).status(message) if shown else nullcontext():
        try:
            yield watch
        finally:
            watch.stop()


def done(watch: Stopwatch, as_json: bool) -> None:
    """``done in 12.3 s`` on stderr (``--json`` carries ``elapsed_seconds`` instead)."""
    if not as_json:
        click.echo(f"done in {watch.seconds} s", err=True)


def hint(text: str) -> None:
    """One line on stderr, so that stdout stays the answer."""
    click.echo(f"hint: {text}", err=True)


def hint_if_unprefixed(ns: Any, identifier: list[str]) -> None:
    """On a catalog that serves one set of namespaces with no warehouse prefix, the warehouse part
    of an id names nothing: say so, or ``wh1.sales`` and ``wh2.sales`` look like two namespaces."""
    if not identifier:
        return
    try:
        unprefixed = ns.prefix(identifier[0]) == ""
    except Exception:  # the command has answered already; a hint never turns it into a failure
        return
    if unprefixed:
        endpoint = ns.settings.redact(ns.settings.endpoint)
        hint(
            f"the catalog at {endpoint} has no warehouse prefix: {identifier[0]!r} is only a label here, "
            "and every warehouse name reaches the same namespaces"
        )
