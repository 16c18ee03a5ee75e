"""The one grammar of durations, for every setting, option and argument that takes one.

A duration is plain seconds (``30``, ``0.5``, ``1e3``) or a number with a unit: ``ms``, ``s``,
``m``, ``h``, ``d`` or ``w`` (``500ms``, ``15m``, ``7d``, ``2w``), in any case, with spaces
around the unit allowed (``7 d``). It is finite and not negative.
"""

from __future__ import annotations

import math

from lance_namespace.errors import InvalidInputError

# "ms" before "s": a unit is found by the end of the text.
SECONDS_PER_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_SHOWN = 40  # characters of a refused value quoted back


def duration_seconds(text: object, setting: str, maximum: float | None = None) -> float:
    """``text`` as a number of seconds. ``setting`` names what is parsed in the error message
    (``"Property 'soft_delete_ttl'"``, ``"timeout"``); ``maximum``, when given, bounds the
    result. Raises ``InvalidInputError`` for anything not a duration: empty, negative, NaN,
    infinite, an unknown unit, or beyond ``maximum``."""
    raw = str(text)
    number, unit = _split_unit(raw.strip().lower())
    try:
        # float() reads the number, so every plain number of seconds accepted before units
        # came (" 2.5 ", "1e3") keeps its meaning.
        seconds = float(number) * SECONDS_PER_UNIT[unit]
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidInputError(
            f"{setting} must be a duration, 0 or more: seconds (30, 0.5) or a number with a unit"
            f" among ms, s, m, h, d, w (500ms, 7d); got {raw[:_SHOWN]!r}"
        )
    if maximum is not None and seconds > maximum:
        raise InvalidInputError(f"{setting} may be at most {maximum:g} seconds, got {raw[:_SHOWN]!r}")
    return seconds + 0.0  # -0.0 (from "-0") is 0


def _split_unit(text: str) -> tuple[str, str]:
    for unit in SECONDS_PER_UNIT:
        if text.endswith(unit):
            return text[: -len(unit)], unit
    return text, "s"
