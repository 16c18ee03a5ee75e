"""The one duration grammar: plain seconds or a number with a unit, never negative, NaN or infinite,
and every form one of the three grammars before it accepted keeps its meaning."""

from __future__ import annotations

import pytest
from lance_namespace.errors import InvalidInputError

from lance_iceberg_ns.config.durations import duration_seconds
from lance_iceberg_ns.config.settings import Settings


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1ms", 0.001), ("1s", 1), ("1m", 60), ("1h", 3600), ("1d", 86400), ("1w", 604800)],
)
def test_each_unit(text: str, seconds: float) -> None:
    assert duration_seconds(text, "x") == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("7d", 604800),
        ("30", 30),
        ("0.5", 0.5),
        ("0", 0),
        ("7D", 604800),  # the soft-delete TTL's grammar ignored case
        ("7 d", 604800),
        ("10 ms", 0.01),  # a merge-insert timeout's grammar allowed a space before the unit
        ("1.5s", 1.5),
        ("1.5h", 5400),
        (" 2.5 ", 2.5),
        (".5", 0.5),
        ("5.", 5),
        ("36500d", 36500 * 86400),  # the longest: 100 years
    ],
)
def test_plain_seconds_and_numbers_with_units(text: str, seconds: float) -> None:
    assert duration_seconds(text, "x") == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "-1",
        "-1s",
        "-0.5",
        "nan",
        "NaNs",
        "inf",
        "-inf",
        "1e999",
        "1e308w",
        "1e300",  # past any date: refused, never an overflow later
        "36501d",
        "1e3",  # ASCII digits and a decimal point only: no exponent, sign or separator
        "+5",
        "-0",
        "1_000",
        "\u0663",  # an Arabic-Indic three, which float() reads
        ".",
        "soon",
        "5x",
        "1y",
        "ms",
        "5 m s",
        "s5",
    ],
)
def test_anything_else_is_invalid_input_naming_the_setting(text: str) -> None:
    with pytest.raises(InvalidInputError, match="the_setting"):
        duration_seconds(text, "the_setting")


def test_a_maximum_bounds_the_duration() -> None:
    assert duration_seconds("1h", "timeout", maximum=3600) == 3600
    for beyond in ("3601", "61m", "1d"):
        with pytest.raises(InvalidInputError, match="timeout may be at most 3600 seconds"):
            duration_seconds(beyond, "timeout", maximum=3600)


@pytest.mark.parametrize(
    ("key", "field"),
    [
        ("soft_delete_ttl", "soft_delete_ttl_seconds"),
        ("read_consistency_interval", "read_consistency_interval"),
        ("commit_cache_seconds", "commit_cache_seconds"),
        ("table_type_cache_seconds", "table_type_cache_seconds"),
        ("oauth2_refresh_margin_seconds", "oauth2_refresh_margin_seconds"),
    ],
)
def test_every_duration_setting_reads_the_grammar(key: str, field: str) -> None:
    def parsed(value: str) -> object:
        return getattr(Settings.from_properties({"endpoint": "http://catalog", key: value}), field)

    assert (parsed("500ms"), parsed("2m"), parsed("7d"), parsed("30")) == (0.5, 120, 604800, 30)
    for refused in ("-1", "nan", "soon"):
        with pytest.raises(InvalidInputError, match=key):
            parsed(refused)
