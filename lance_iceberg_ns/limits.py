"""Bounds on what one request may carry: page sizes, property maps, every number that reaches
pylance, search texts, expressions, columns and Arrow bodies.

They are checked before anything is done, by the namespace (every operation, where it coerces
its request) and by the REST server (for whatever namespace it fronts, once it has built the
request from the path, query string and body), so the rule lives here once. A request out of
bounds is ``InvalidInputError`` (HTTP 400), never a failure further down: pylance reserves memory
from several of these numbers before it looks at the data, and a failed allocation in Rust ends
the whole process.

Each bound says why it is what it is. They are generous for real use: the point is that no single
request can ask pylance for terabytes or for hours.
"""

from __future__ import annotations

import functools
import math
import numbers
import operator
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from decimal import Decimal
from typing import Any

from lance_namespace.errors import InvalidInputError
from pydantic import BaseModel

from lance_iceberg_ns.config.durations import duration_seconds

MAX_PAGE_LIMIT = 10_000  # names or versions in one page; more pages are a page_token away
MAX_PROPERTIES = 100  # entries in one request's properties
MAX_PROPERTY_KEY_BYTES = 255  # UTF-8 bytes of a property key
MAX_PROPERTY_VALUE_BYTES = 8 * 1024  # UTF-8 bytes of a property value
# Schema and field metadata of a table's rows, keys and values, in bytes: every describe answers it
MAX_SCHEMA_METADATA_BYTES = 1024 * 1024
# Arrays and objects one within another in any JSON a client sends (a body, a map in the query
# string): Python's own parser recursed 5,000 levels into a RecursionError. A search nested the
# most it may be (MAX_QUERY_NESTING, three levels each) takes 53.
MAX_JSON_DEPTH = 64

# --- queries and vector search -----------------------------------------------------------------
MAX_QUERY_ROWS = 2**31 - 1  # a scan's k (its limit) or offset: a 32-bit count, as the reference reads them
MAX_NEAREST = 1_000_000  # a vector search's k + offset: the search sets room aside for that many rows up front
# Re-ranking reads k × refine_factor candidates and sets room aside for all of them (k = 10^6 with
# 2^32 - 1 aborted the process); lancedb suggests 10 to 50. k × refine_factor is bounded by MAX_NEAREST too.
MAX_REFINE_FACTOR = 1_000
# HNSW keeps ef candidates per partition searched; it needs at least k of them, so k's bound (2^40 aborted).
MAX_EF = MAX_NEAREST
# An IVF index's partitions, and so the partitions a search may probe: k-means keeps a centroid
# per partition; 65,536 is the square root of four billion rows, the usual rule for their number.
MAX_PARTITIONS = 65_536
# Values in one vector: query vectors, and fixed-size lists a cast builds (a cast reserves rows ×
# length up front: 2^30 aborted the process). The largest embedding models give 4,096 to 8,192.
MAX_VECTOR_DIMENSION = 65_536
MAX_QUERY_VECTORS = 1_024  # vectors of one batch search (multi_vector): each is a search of k rows of its own
# Vector values, distances and boosts are float32 in pylance: the largest number that rounds to a
# finite one (3.4028235e38, float32's largest as it prints, among them); beyond is infinity.
FLOAT32_MAX = 3.4028235677973362e38

# --- building indices ---------------------------------------------------------------------------
MAX_SUB_VECTORS = MAX_VECTOR_DIMENSION  # a PQ sub-vector has at least one dimension
MAX_NUM_BITS = 16  # bits of a PQ, SQ or RQ code (4 or 8 in practice): 2^bits centroids are trained per sub-vector
MAX_SAMPLE_RATE = 65_536  # training rows per partition (default 256): k-means reads partitions × rate rows
MAX_ITERATIONS = 1_000  # k-means passes over the training sample (default 50; pylance takes up to 2^32)
MAX_HNSW_M = 256  # HNSW links per row (16 to 64 in practice): the graph keeps 2m of them for every row
# Candidates kept while each row is linked (100 to 500 in practice): pylance reserves
# ef_construction × 8 bytes per building thread up front (2^40 aborted the process).
MAX_EF_CONSTRUCTION = 10_000
MIN_TARGET_PARTITION_SIZE = 16  # rows per IVF partition when their number is derived: fewer is one per row

# --- full-text search ---------------------------------------------------------------------------
MAX_TOKEN_LENGTH = 65_530  # the longest term a full-text index keeps (tantivy's limit): max_token_length, prefix_length
MAX_FUZZINESS = 10  # edit distance of a fuzzy match (Lucene stops at 2; pylance refuses automata past 10,000 states)
MAX_EXPANSIONS = 10_000  # terms a fuzzy term may expand to (default 50): each is one more posting list read
MAX_SLOP = 10_000  # positions allowed between the words of a phrase
MAX_QUERY_TEXT_BYTES = 16 * 1024  # UTF-8 bytes of one search text: a long paragraph
# Words in one search, over all its clauses: each is a posting list read and scored (two million
# words aborted the process; 100,000 copies of one word took 2.2 GB and 12 s). Elasticsearch's
# max_clause_count was 1,024 for years.
MAX_QUERY_TERMS = 1_024
MAX_QUERY_CLAUSES = 1_024  # match, phrase, boolean, boost and multi-match clauses of one structured search
MAX_QUERY_NESTING = 16  # boolean and boost queries within each other (each level recurses in pylance)

# --- versions, durations, other counts -----------------------------------------------------------
MAX_VERSION = 2**63 - 1  # a version is an unsigned 64-bit number in Lance; int64 is what every client can say
MAX_DURATION_SECONDS = 3_600  # a merge-insert's retry timeout, any interval: longer than any client waits
MAX_COUNT = 2**63 - 1  # any other count the spec defines (the operations using them are refused whole)

# --- expressions (filters, projections, updates, new columns: see data/expressions.py) ----------
MAX_EXPRESSION_BYTES = 64 * 1024  # UTF-8 bytes of one SQL expression: an IN list of about 5,000 keys
# Operators applied one within another: pylance's planner recurses once per operator and overflowed
# its stack (ending the process) past about 500 chained additions.
MAX_EXPRESSION_DEPTH = 64
MAX_EXPRESSION_CONNECTIVES = 4_096  # AND and OR in one expression: 50,000 of them overflowed the stack
# Characters or elements a function may build for one row from a size it is given (lpad, repeat,
# array_repeat, range, ...): a value of each row of a batch (8,192 rows) is built at once;
# 8,192 covers an embedding of zeros of the largest models. 50 million aborted the process.
MAX_BUILT_LENGTH = 8_192
MAX_REPLACEMENT_BYTES = 64  # a replacement or delimiter: copied once per match or element
# Calls of functions that build values larger than their arguments (repeat, lpad, replace, ...) in
# one expression: none may take another's result, but their results may still be concatenated.
MAX_GROWING_CALLS = 8
# UTF-8 bytes of one literal (or name) anywhere in an expression: a literal is copied into
# every row that returns it (coalesce, arrow_cast: 60 KB into a million rows took 60 GB). 4 KiB
# holds any key, path, URL or JSON value a filter compares with, and is half what a function
# may build for one row (MAX_BUILT_LENGTH).
MAX_LITERAL_BYTES = 4 * 1024

# --- columns ------------------------------------------------------------------------------------
# Columns of a table, nested fields counted (a struct's, a list's item), and names in one request
# (a projection, aliases, a drop, new columns, alterations, updates, an on list): Lance plans each
# column apart, so its costs grow faster than the count (60,000 one-row columns took 30 s to
# create and 134 s to answer k=1; 4,096 take 0.4 s, and 2 s for a query naming them all).
# 4,096 is MySQL's hard limit; PostgreSQL stops at 1,600.
MAX_COLUMNS = 4_096
# Fields of the request models that name columns, one entry each (an update's SET list too).
COLUMN_LISTS = frozenset(
    {"column_names", "column_aliases", "columns", "on", "input_columns", "new_columns", "alterations", "outputs"}
    | {"updates"}
)

# --- Arrow IPC bodies -----------------------------------------------------------------------------
# What the rows of one write may take once decoded: a compressed body expands to at most what an
# uncompressed one may be (the server's --max-data-body-mb; this default where nothing set it).
DEFAULT_MAX_DATA_BYTES = 256 * 1024 * 1024
# Messages (schema, batches, dictionaries) of one body: each costs a record batch's objects (about
# 600 bytes and a few microseconds) whatever its rows, so 400,000 empty batches in 46 MiB took
# 257 MB and 2.3 s while counting as no data. Writers send batches of thousands of rows.
MAX_IPC_MESSAGES = 10_000
_max_data_bytes: ContextVar[int] = ContextVar("max_data_bytes", default=DEFAULT_MAX_DATA_BYTES)


class DataTooLargeError(InvalidInputError):
    """Rows that decode to more than the data bound: ``InvalidInputError``, answered 413 by the REST
    server, as a body over its cap is."""

    http_status = 413


def max_data_bytes() -> int:
    """The most bytes the rows of one write may decode to, here and now."""
    return _max_data_bytes.get()


@contextmanager
def data_bytes_allowed(limit: int) -> Iterator[None]:
    """Within the block, the rows of a write may decode to ``limit`` bytes (the REST server sets
    its data body cap for each request)."""
    token = _max_data_bytes.set(limit)
    try:
        yield
    finally:
        _max_data_bytes.reset(token)


# Every number of a request model that reaches pylance, by field name: (lowest, highest). A
# number with no entry is bounded by ``_ANY_NUMBER``; tests/data/test_attacks_data.py fails when a
# request model of lance_namespace has a number this table does not name.
NUMBER_BOUNDS: dict[str, tuple[float, float]] = {
    "limit": (1, MAX_PAGE_LIMIT),
    # queries
    "k": (0, MAX_QUERY_ROWS),
    "offset": (0, MAX_QUERY_ROWS),
    "refine_factor": (0, MAX_REFINE_FACTOR),
    "ef": (0, MAX_EF),
    "nprobes": (0, MAX_PARTITIONS),
    "minimum_nprobes": (1, MAX_PARTITIONS),
    "maximum_nprobes": (1, MAX_PARTITIONS),
    "lower_bound": (-FLOAT32_MAX, FLOAT32_MAX),
    "upper_bound": (-FLOAT32_MAX, FLOAT32_MAX),
    "single_vector": (-FLOAT32_MAX, FLOAT32_MAX),  # each value
    "multi_vector": (-FLOAT32_MAX, FLOAT32_MAX),
    # full-text search
    "boost": (0, FLOAT32_MAX),
    "negative_boost": (0, FLOAT32_MAX),
    "fuzziness": (0, MAX_FUZZINESS),
    "max_expansions": (0, MAX_EXPANSIONS),
    "prefix_length": (0, MAX_TOKEN_LENGTH),
    "slop": (0, MAX_SLOP),
    # indices
    "num_partitions": (1, MAX_PARTITIONS),
    "num_sub_vectors": (1, MAX_SUB_VECTORS),
    "num_bits": (1, MAX_NUM_BITS),
    "sample_rate": (1, MAX_SAMPLE_RATE),
    "max_iterations": (1, MAX_ITERATIONS),
    "target_partition_size": (MIN_TARGET_PARTITION_SIZE, MAX_QUERY_ROWS),
    "m": (1, MAX_HNSW_M),
    "ef_construction": (1, MAX_EF_CONSTRUCTION),
    "max_token_length": (0, MAX_TOKEN_LENGTH),
    # versions
    "version": (0, MAX_VERSION),
    "from_version": (0, MAX_VERSION),
    "read_version": (0, MAX_VERSION),
    "src_version": (0, MAX_VERSION),
    "start_version": (0, MAX_VERSION),
    "end_version": (0, MAX_VERSION),
    "manifest_size": (0, MAX_COUNT),
    # backfills and materialized views (refused as unsupported, bounded all the same)
    "batch_checkpoint_flush_interval_seconds": (0, MAX_DURATION_SECONDS),
    **dict.fromkeys(
        (
            "concurrency",
            "intra_applier_concurrency",
            "min_checkpoint_size",
            "max_checkpoint_size",
            "checkpoint_size",
            "task_size",
            "source_task_size",
            "num_frags",
            "commit_granularity",
            "max_rows_per_fragment",
            "output_limit",
            "num_cpus",
            "num_gpus",
            "memory",
        ),
        (0, MAX_COUNT),
    ),
}
_PLAIN_NUMBERS = frozenset({int, float})  # not bool, which is an int
_ANY_NUMBER = (-MAX_COUNT - 1, MAX_COUNT)  # a number the table does not name (a newer spec): int64
# Texts searched for, by (model, field): their bytes and words are bounded.
SEARCH_TEXTS = frozenset({("StringFtsQuery", "query"), ("MatchQuery", "terms"), ("PhraseQuery", "terms")})
SEARCH_CLAUSES = frozenset({"FtsQuery", "MatchQuery", "PhraseQuery"})  # models that are one clause of a search
_WORD = re.compile(r"\w+")


def check_json_depth(value: Any, what: str) -> Any:
    """``value`` (parsed JSON) if its arrays and objects lie at most ``MAX_JSON_DEPTH`` levels one
    within another (``{}`` is one level, ``[[1]]`` two); ``InvalidInputError`` naming ``what``
    otherwise. Measured level by level, never recursively, so a value of any depth is measured."""
    containers = [value] if isinstance(value, dict | list) else []
    depth = 0
    while containers:
        depth += 1
        if depth > MAX_JSON_DEPTH:
            raise InvalidInputError(f"{what} is nested more than {MAX_JSON_DEPTH} levels deep")
        containers = [
            inner
            for outer in containers
            for inner in (outer.values() if isinstance(outer, dict) else outer)
            if isinstance(inner, dict | list)
        ]
    return value


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


def check_column_count(count: int, what: str) -> None:
    """``count`` columns at most ``MAX_COLUMNS``; ``InvalidInputError`` naming ``what`` otherwise."""
    if count > MAX_COLUMNS:
        raise InvalidInputError(f"{what} may have at most {MAX_COLUMNS} columns, got {count}")


def check_request_bounds(request: object) -> None:
    """Apply the bounds to a request model: its ``limit`` and ``properties``, every number in it
    (``NUMBER_BOUNDS``), the columns it names (``COLUMN_LISTS``), its search texts and clauses, its
    durations, the window of a query and the parameters of an index. Raises ``InvalidInputError``,
    also for a value past validation that is no number at all where one belongs (a complex number,
    a fraction too large for a float)."""
    try:
        _check_request_bounds(request)
    except InvalidInputError:
        raise
    except (ArithmeticError, TypeError, ValueError) as exc:  # OverflowError, decimal's errors among them
        raise InvalidInputError(
            f"The request holds a value that is not a number it can take ({type(exc).__name__})"
        ) from None


def _check_request_bounds(request: object) -> None:
    check_page_limit(getattr(request, "limit", None))
    check_properties(getattr(request, "properties", None))
    if isinstance(request, BaseModel):
        _Walk().model(request, 0)
        for query in (request, getattr(request, "query", None)):  # ExplainTableQueryPlanRequest holds its query
            if isinstance(query, BaseModel) and "refine_factor" in type(query).model_fields:
                check_vector_search(query)
        check_index_parameters(request)


class _Walk:
    """One pass over a request model: every number within its bound, every search text within
    its size, the search's clauses, nesting and words counted."""

    def __init__(self) -> None:
        self.clauses = 0
        self.words = 0

    def model(self, model: BaseModel, nesting: int) -> None:
        kind = type(model).__name__
        if kind in SEARCH_CLAUSES:
            self.clauses += 1
            if self.clauses > MAX_QUERY_CLAUSES:
                raise InvalidInputError(f"A search may have at most {MAX_QUERY_CLAUSES} clauses")
        if kind == "FtsQuery":
            nesting += 1
            if nesting > MAX_QUERY_NESTING:
                raise InvalidInputError(f"Searches may be nested at most {MAX_QUERY_NESTING} deep")
        for name in type(model).model_fields:
            value = getattr(model, name, None)
            if value is None:
                continue
            if (kind, name) in SEARCH_TEXTS and isinstance(value, str):
                self.text(name, value)
            elif name == "timeout" and isinstance(value, str):
                duration_seconds(value, name, maximum=MAX_DURATION_SECONDS)
            else:
                self.value(name, value, nesting)

    def value(self, name: str, value: Any, nesting: int) -> None:
        if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):  # a numpy scalar, or a 0-d array
            value = value.item()
        if name in COLUMN_LISTS and (isinstance(value, list | tuple | dict) or hasattr(value, "tolist")):
            check_column_count(len(value), name)
        if isinstance(value, BaseModel):
            self.model(value, nesting)
        elif isinstance(value, str) or (isinstance(value, bool) and name not in NUMBER_BOUNDS):
            return
        elif is_number(value):  # a bool where a number belongs too: False is 0
            check_number(name, plain_number(value))
        elif isinstance(value, numbers.Number):  # a complex number
            raise InvalidInputError(f"{name} must be a real number, got {type(value).__name__}")
        elif isinstance(value, list | tuple) or hasattr(value, "tolist"):
            self.values(name, listed(value), nesting)

    def values(self, name: str, values: list[Any] | tuple[Any, ...], nesting: int) -> None:
        low, high = NUMBER_BOUNDS.get(name, _ANY_NUMBER)
        within = all_within(values, low, high) if values else None
        if within is False:
            raise InvalidInputError(f"Every value of {name} must be a number between {_shown(low)} and {_shown(high)}")
        if within:
            return
        for value in values:
            self.value(name, value, nesting)

    def text(self, name: str, text: str) -> None:
        if len(text.encode("utf-8", "replace")) > MAX_QUERY_TEXT_BYTES:
            raise InvalidInputError(f"A search's {name} may be at most {MAX_QUERY_TEXT_BYTES} bytes long")
        self.words += len(_WORD.findall(text))
        if self.words > MAX_QUERY_TERMS:
            raise InvalidInputError(f"A search may have at most {MAX_QUERY_TERMS} words in all")


_LARGEST_WHOLE = Decimal(2**63)


def is_number(value: Any) -> bool:
    """A real number as Python holds one: an int, a float, a numpy scalar, a ``Decimal`` (which
    is no ``numbers.Real``)."""
    return isinstance(value, numbers.Real | Decimal)


def plain_number(value: Any) -> Any:
    """A number as Python holds it: a numpy scalar or a ``Decimal`` from a caller in process (past
    validation) as the int or float it stands for, whose sums and products cannot wrap around as
    int32's do, and which compares as a float (a ``Decimal`` NaN refuses to be compared)."""
    if isinstance(value, Decimal):  # an int only when small: int() of 1e999999999 would fill the memory
        small_whole = value.is_finite() and value.copy_abs() <= _LARGEST_WHOLE and value == value.to_integral_value()
        return math.nan if value.is_nan() else int(value) if small_whole else float(value)
    if isinstance(value, bool | int | float) or not isinstance(value, numbers.Real):
        return value
    return value.item() if hasattr(value, "item") else float(value)


def listed(values: Any) -> list[Any]:
    """A list field's values as a list, None as none: a request built in process past validation
    (``model_construct``) may hold a tuple, or a numpy array (whose truth is ambiguous) or a
    pyarrow one, taken as nested Python lists. Anything else (a generator, bytes) is
    InvalidInputError, never read as a list it is not."""
    if values is None:
        return []
    if hasattr(values, "tolist"):
        values = values.tolist()
    if not isinstance(values, list | tuple):
        raise InvalidInputError(f"Expected a list of values, got {type(values).__name__}")
    return list(values)


def all_within(values: list[Any] | tuple[Any, ...], low: float, high: float) -> bool | None:
    """Whether every value lies between ``low`` and ``high`` (NaN does not); None when they are not
    all plain ints and floats. In C loops: a query vector has hundreds of values, checked on
    every query."""
    if not _PLAIN_NUMBERS.issuperset(map(type, values)):
        return None
    return all(map(functools.partial(operator.le, low), values)) and all(
        map(functools.partial(operator.ge, high), values)
    )


def check_number(name: str, value: float) -> None:
    """``value`` of the field ``name`` within its bound (``NUMBER_BOUNDS``); finite if a float."""
    low, high = NUMBER_BOUNDS.get(name, _ANY_NUMBER)
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInputError(f"{name} must be a finite number, got {value}")
    if not low <= value <= high:
        raise InvalidInputError(f"{name} must be between {_shown(low)} and {_shown(high)}, got {value}")


def _shown(bound: float) -> str:
    return f"{bound:g}" if isinstance(bound, float) else str(bound)


def check_query_window(k: int, offset: int | None, nearest: bool) -> None:
    """A query's ``k`` and ``offset`` within 0 and ``MAX_QUERY_ROWS``, and for a vector search
    their sum within ``MAX_NEAREST`` (pylance reserves memory for that many neighbours before it
    searches: a huge ``k`` would end the server process). Raises ``InvalidInputError``."""
    k, offset = plain_number(k), plain_number(offset)
    for name, value in (("k", k), ("offset", offset or 0)):
        if not 0 <= value <= MAX_QUERY_ROWS:
            raise InvalidInputError(f"{name} must be between 0 and {MAX_QUERY_ROWS}, got {value}")
    if nearest and k + (offset or 0) > MAX_NEAREST:
        raise InvalidInputError(
            f"A vector search returns at most {MAX_NEAREST} rows (k + offset), got {k + (offset or 0)}"
        )


def check_vector_search(query: Any) -> None:
    """What a vector search reserves from several numbers at once: k × refine_factor candidates,
    k rows for each of its query vectors, and vectors of a bounded dimension. Raises
    ``InvalidInputError``."""
    k = plain_number(getattr(query, "k", 0)) or 0
    vector = getattr(query, "vector", None)
    vectors = listed(getattr(vector, "multi_vector", None))
    single = listed(getattr(vector, "single_vector", None))
    if single:
        vectors.append(single)
    if len(vectors) > MAX_QUERY_VECTORS:
        raise InvalidInputError(f"A batch search takes at most {MAX_QUERY_VECTORS} query vectors, got {len(vectors)}")
    if any(len(values) > MAX_VECTOR_DIMENSION for values in vectors):
        raise InvalidInputError(f"A query vector has at most {MAX_VECTOR_DIMENSION} values")
    refine_factor = plain_number(getattr(query, "refine_factor", None))
    if refine_factor and k * refine_factor > MAX_NEAREST:
        raise InvalidInputError(f"A vector search re-ranks at most {MAX_NEAREST} rows (k × refine_factor)")
    if len(vectors) > 1 and k * len(vectors) > MAX_NEAREST:
        raise InvalidInputError(f"A batch search returns at most {MAX_NEAREST} rows (k × query vectors)")


def check_index_parameters(request: Any) -> None:
    """An index build's parameters that only bound each other: HNSW needs ef_construction ≥ m,
    and k-means reads num_partitions × sample_rate rows. Raises ``InvalidInputError``."""
    m, ef_construction = (
        plain_number(getattr(request, "m", None)),
        plain_number(getattr(request, "ef_construction", None)),
    )
    if m is not None and ef_construction is not None and ef_construction < m:
        raise InvalidInputError(f"ef_construction ({ef_construction}) must be at least m ({m})")
    partitions = plain_number(getattr(request, "num_partitions", None))
    rate = plain_number(getattr(request, "sample_rate", None))
    if partitions is not None and rate is not None and partitions * rate > MAX_QUERY_ROWS:
        raise InvalidInputError(f"k-means trains on num_partitions × sample_rate rows: at most {MAX_QUERY_ROWS}")
