"""Bounds on what one request may carry: page sizes, property maps and query windows.

They are checked before anything is done, by the namespace (every operation, where it coerces
its request) and by the REST server (for whatever namespace it fronts, once it has built the
request from the path, query string and body), so the rule lives here once. A request out of
bounds is ``InvalidInputError`` (HTTP 400), never a failure further down.
"""

from __future__ import annotations

from collections.abc import Mapping

from lance_namespace.errors import InvalidInputError

MAX_PAGE_LIMIT = 10_000  # names or versions in one page; more pages are a page_token away
MAX_PROPERTIES = 100  # entries in one request's properties
MAX_PROPERTY_KEY_BYTES = 255  # UTF-8 bytes of a property key
MAX_PROPERTY_VALUE_BYTES = 8 * 1024  # UTF-8 bytes of a property value
MAX_QUERY_ROWS = 2**31 - 1  # a scan's k (its limit) or offset: a 32-bit count, as the reference reads them
MAX_NEAREST = 1_000_000  # a vector search's k + offset: the search sets room aside for that many rows up front


def check_page_limit(limit: int | None) -> int | None:
    """``limit`` if it is absent or between 1 and ``MAX_PAGE_LIMIT``; ``InvalidInputError`` otherwise."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidInputError(f"limit must be a whole number, got {type(limit).__name__}")
    if not 1 <= limit <= MAX_PAGE_LIMIT:
        raise InvalidInputError(f"limit must be between 1 and {MAX_PAGE_LIMIT}, got {limit}")
    return limit


def check_properties(properties: Mapping[str, str] | None) -> Mapping[str, str] | None:
    """``properties`` if it has at most ``MAX_PROPERTIES`` entries, keys of at most
    ``MAX_PROPERTY_KEY_BYTES`` and values of at most ``MAX_PROPERTY_VALUE_BYTES`` (UTF-8);
    ``InvalidInputError`` otherwise. The message names the key, never the value."""
    if not properties:
        return properties
    if len(properties) > MAX_PROPERTIES:
        raise InvalidInputError(f"At most {MAX_PROPERTIES} properties are accepted, got {len(properties)}")
    for key, value in properties.items():
        if len(str(key).encode("utf-8", "replace")) > MAX_PROPERTY_KEY_BYTES:
            raise InvalidInputError(f"Property key {str(key)[:40]!r}... is longer than {MAX_PROPERTY_KEY_BYTES} bytes")
        if len(str(value).encode("utf-8", "replace")) > MAX_PROPERTY_VALUE_BYTES:
            raise InvalidInputError(f"The value of property {key!r} is longer than {MAX_PROPERTY_VALUE_BYTES} bytes")
    return properties


def check_request_bounds(request: object) -> None:
    """Apply the bounds to a request model's ``limit`` and ``properties``, where it has them.
    Raises ``InvalidInputError``."""
    check_page_limit(getattr(request, "limit", None))
    check_properties(getattr(request, "properties", None))


def check_query_window(k: int, offset: int | None, nearest: bool) -> None:
    """A query's ``k`` and ``offset`` within 0 and ``MAX_QUERY_ROWS``, and for a vector search
    their sum within ``MAX_NEAREST`` (pylance reserves memory for that many neighbours before it
    searches: a huge ``k`` would end the server process). Raises ``InvalidInputError``."""
    for name, value in (("k", k), ("offset", offset or 0)):
        if not 0 <= value <= MAX_QUERY_ROWS:
            raise InvalidInputError(f"{name} must be between 0 and {MAX_QUERY_ROWS}, got {value}")
    if nearest and k + (offset or 0) > MAX_NEAREST:
        raise InvalidInputError(
            f"A vector search returns at most {MAX_NEAREST} rows (k + offset), got {k + (offset or 0)}"
        )
