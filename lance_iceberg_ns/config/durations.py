"""The one grammar of durations, for every setting, option and argument that takes one.

A duration is plain seconds (``30``, ``0.5``) or a number with a unit: ``ms``, ``s``, ``m``,
``h``, ``d`` or ``w`` (``500ms``, ``15m``, ``7d``, ``2w``), in any case, with spaces around the
unit allowed (``7 d``). The number is written in ASCII digits, with a decimal point if any: no
sign, exponent or digit separator. No duration is longer than ``MAX_SECONDS`` (100 years), so
that every date computed from one exists.
"""

from __future__ import annotations

import re

from lance_namespace.errors import InvalidInputError

# "ms" before "s": a unit is found by the end of the text.
SECONDS_PER_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_SHOWN = 40  # characters of a refused value quoted back
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d|w)?", re.ASCII)
MAX_SECONDS = 100 * 365 * 86400.0


def duration_seconds(text: object, setting: str, maximum: float | None = None) -> float:
    """``text`` as a number of seconds. ``setting`` names what is parsed in the error message
    (``"Property 'soft_delete_ttl'"``, ``"timeout"``); ``maximum``, when given, bounds the
    result. Raises ``InvalidInputError`` for anything not a duration: empty, negative, NaN,
    infinite, an unknown unit, or beyond ``maximum``."""
    raw = str(text)
    match = _DURATION.fullmatch(raw.strip().lower())
    if match is None:
        raise InvalidInputError(
            f"{setting} must be a duration, 0 or more: seconds (30, 0.5) or a number with a unit"
            f" among ms, s, m, h, d, w (500ms, 7d); got {raw[:_SHOWN]!r}"
        )
    seconds = float(match[1]) * SECONDS_PER_UNIT[match[2] or "s"]
    bound = MAX_SECONDS if maximum is None else min(maximum, MAX_SECONDS)
    if seconds > bound:
        raise InvalidInputError(f"{setting} may be at most {bound:g} seconds, got {raw[:_SHOWN]!r}")
    return seconds
