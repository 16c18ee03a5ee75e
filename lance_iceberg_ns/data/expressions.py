"""What a caller's SQL expression may ask pylance to build: checked before pylance sees it.

Filters, projections (``column_aliases``), updates and new columns are SQL expressions that
pylance plans (folding constants as it does) and runs with DataFusion. Some build values of any
size from a few characters (``repeat(s, 50000000)``, ``lpad(s, 10^9)``, ``range(10^9)``,
``arrow_cast(x, 'FixedSizeList(2^30, Int64)')``), and long chains of operators overflow the
planner's stack; either ends the process.

Why a lexer and not a parser: no SQL parser is among the dependencies (pylance does not expose
DataFusion's, and sqlglot or DuckDB would be a large dependency for one check), and none would read
exactly as pylance's does anyway. The check needs only what a lexer sees: names followed by ``(``
(calls), their arguments, literals, operators and brackets; and ``;`` outside quotes, after which
pylance silently drops the rest (a delete of ``id < 3; anything`` deleted ``id < 3``). It is
conservative where the lexer and pylance's tokenizer could differ: comments are refused (nested or
not, they could hide a call from one reading and not the other), so is ``$`` outside quotes
(pylance reads ``$$...$$`` and ``$tag$...$tag$`` as strings, which would hide a call from this
lexer), a string is read both with and without backslash escapes and both readings must pass, a
double-quoted word before ``(`` counts as a call and elsewhere as a column, and a size must be a
plain whole-number literal (no arithmetic, no column) within its bound.

Sizes multiply along a nesting (``repeat(repeat(s, 16), 16)``, ``replace`` within ``replace``) and
pylance folds such calls while planning, so a function that grows (``GROWING``) may not take the
result of another anywhere in its arguments, what it copies must be a column or one literal, and an
expression holds at most ``limits.MAX_GROWING_CALLS`` of them.

Any function copies a literal into every row it answers (``coalesce(x, '...')``,
``arrow_cast('...', 'LargeUtf8')``), so every literal anywhere in an expression, and every name,
is at most ``limits.MAX_LITERAL_BYTES``.

What it cannot bound: an expression that reads a column many times (``concat(s, s, s)``) or
joins several literals builds a value as large as those reads, linear in the expression's length
(``MAX_EXPRESSION_BYTES``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from lance_namespace.errors import InvalidInputError
from pydantic import BaseModel

from lance_iceberg_ns import limits

# Fields of the request models that hold one SQL expression, or several.
EXPRESSION_FIELDS = frozenset(
    {
        "filter",
        "predicate",
        "when_matched_update_all_filt",
        "when_not_matched_by_source_delete_filt",
        "expression",
        "computed",
    }
)
_CONNECTIVES = frozenset({"and", "or"})
_SEPARATORS = frozenset({"when", "then", "else"})  # a CASE's branches are siblings, not a chain
_OPERATOR_WORDS = frozenset(
    {"not", "is", "like", "ilike", "in", "between", "similar", "collate", "at", "regexp", "rlike", "escape", "div"}
)
MAX_COLUMN_REPEAT = 16  # copies of a column's value repeat or array_repeat may make: the value may be large
MAX_NUMBER_TEXT = 400  # characters a number that is not a plain integer may print as (a float: up to about 330)
# Functions whose result can be much larger than their arguments: a size they are given, or a value
# copied once per character, match or element of another.
GROWING = frozenset(
    {
        *("lpad", "rpad", "repeat", "array_repeat", "list_repeat", "array_resize", "list_resize"),
        *("range", "generate_series", "replace", "regexp_replace", "encode", "translate", "overlay", "to_hex"),
        *("array_replace", "array_replace_n", "array_replace_all", "list_replace", "list_replace_n"),
        *("list_replace_all", "array_to_string", "array_join", "list_to_string", "list_join", "string_agg"),
        "array_agg",
    }
)
# Of a growing function, the arguments (by position) it copies: each must be a column or one literal.
_COPIED = {
    **dict.fromkeys(("repeat", "array_repeat", "list_repeat", "encode", "translate"), (0,)),
    **dict.fromkeys(("array_resize", "list_resize"), (2,)),
    **dict.fromkeys(("replace", "regexp_replace"), (0, 2)),
    **dict.fromkeys(("array_replace", "array_replace_all", "list_replace", "list_replace_all"), (0, 2)),
    **dict.fromkeys(("array_replace_n", "list_replace_n"), (0, 2)),
    **dict.fromkeys(("array_to_string", "array_join", "list_to_string", "list_join"), (0, 1, 2)),
    "string_agg": (0, 1),
}
# Of those, the arguments copied once per match or element: a literal of at most MAX_REPLACEMENT_BYTES.
_PER_ELEMENT = {
    **dict.fromkeys(("array_replace", "array_replace_all", "list_replace", "list_replace_all"), 2),
    **dict.fromkeys(("array_replace_n", "list_replace_n"), 2),
    **dict.fromkeys(("array_to_string", "array_join", "list_to_string", "list_join"), 1),
    "string_agg": 1,
}

_TOKEN = re.compile(
    r"""(?P<space>\s+)
    |(?P<comment>--|/\*)
    |(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    |(?P<word>[^\W\d][\w$#@]*|[#@][\w$#@]*)
    |(?P<quote>['"`])
    |(?P<operator>::|\|\||<=|>=|<>|!=|==|=>|->>|->|<<|>>|\*\*|[-+*/%<>=!~^&|?:])
    |(?P<other>.)""",
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True)
class Token:
    kind: str  # number, word, string ('...' or "..."), name (`...`), operator, other
    text: str  # a string's or name's contents, unescaped; a word as written
    quote: str = ""  # the quote of a string or name

    @property
    def word(self) -> str:
        return self.text.lower() if self.kind in ("word", "name", "string") else ""


def check_request(request: object) -> None:
    """Check every SQL expression of a request model (``EXPRESSION_FIELDS``, a projection's
    aliases, an update's expressions, new columns' expressions); how many columns it names is
    ``limits.check_request_bounds``'s. Raises ``InvalidInputError``."""
    if isinstance(request, BaseModel):
        _check_model(request)


def _check_model(model: BaseModel) -> None:
    for name in type(model).model_fields:
        value = getattr(model, name, None)
        if value is None:
            continue
        if name in EXPRESSION_FIELDS and isinstance(value, str):
            check_expression(value, name)
        elif name == "column_aliases" and isinstance(value, dict):  # their count: limits.COLUMN_LISTS
            for alias, expression in value.items():
                check_expression(str(expression), f"column_aliases[{str(alias)[:40]!r}]")
        elif name == "updates" and isinstance(value, list):
            for update in value:
                if isinstance(update, list | tuple) and len(update) == 2:
                    check_expression(str(update[1]), f"the update of {str(update[0])[:40]!r}")
        elif isinstance(value, BaseModel):
            _check_model(value)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, BaseModel):
                    _check_model(item)


def check_expression(expression: str, what: str = "expression") -> None:
    """Refuse an SQL expression that is too long, holds a literal longer than
    ``limits.MAX_LITERAL_BYTES``, chains too many operators, hides anything in a comment, or calls
    a function that builds a value of a size it is given beyond ``limits.MAX_BUILT_LENGTH``.
    Raises ``InvalidInputError`` naming ``what``."""
    if len(expression.encode("utf-8", "replace")) > limits.MAX_EXPRESSION_BYTES:
        raise InvalidInputError(f"{what}: an expression may be at most {limits.MAX_EXPRESSION_BYTES} bytes long")
    readings = [tokens for tokens in (_tokens(expression, False), _tokens(expression, True)) if tokens is not None]
    if not readings:
        raise InvalidInputError(f"{what}: the expression has an unterminated string or quoted name")
    for tokens in readings:
        _check_tokens(tokens, what)


def _tokens(expression: str, backslash_escapes: bool) -> list[Token] | None:
    """The tokens of ``expression``; None when a string or quoted name does not end (this
    reading is then not pylance's, whose parse would fail). Raises InvalidInputError for a comment."""
    tokens: list[Token] = []
    position = 0
    while position < len(expression):
        match = _TOKEN.match(expression, position)
        assert match is not None  # "other" matches any character
        kind, text = match.lastgroup or "other", match.group()
        position = match.end()
        if kind == "comment":
            raise InvalidInputError("Comments are not accepted in expressions")
        if kind == "quote":
            quoted = _quoted(expression, position, text, backslash_escapes)
            if quoted is None:
                return None
            contents, position = quoted
            tokens.append(Token("name" if text == "`" else "string", contents, text))
        elif "$" in text:
            raise InvalidInputError("$ is accepted in expressions only within quotes")
        elif kind != "space" and not (kind == "other" and (text.isspace() or not text.isprintable())):
            tokens.append(Token(kind, text))
    return tokens


def _quoted(expression: str, start: int, quote: str, backslash_escapes: bool) -> tuple[str, int] | None:
    """The contents of a quoted string or name starting at ``start`` (after the quote) and the
    position after its closing quote; a doubled quote is one quote."""
    contents: list[str] = []
    position = start
    while position < len(expression):
        char = expression[position]
        if backslash_escapes and char == "\\" and quote != "`":
            contents.append(expression[position + 1 : position + 2])
            position += 2
        elif char == quote:
            if expression[position + 1 : position + 2] == quote:
                contents.append(quote)
                position += 2
            else:
                return "".join(contents), position + 1
        else:
            contents.append(char)
            position += 1
    return None


def _check_tokens(tokens: list[Token], what: str) -> None:
    if any(token.kind == "other" and token.text == ";" for token in tokens):  # pylance drops what follows
        raise InvalidInputError(f"{what}: an expression is one expression: ';' is accepted only within quotes")
    if any(len(token.text.encode("utf-8", "replace")) > limits.MAX_LITERAL_BYTES for token in tokens):
        raise InvalidInputError(  # never the literal itself: it may be anything
            f"{what}: a literal or name may be at most {limits.MAX_LITERAL_BYTES} bytes long"
        )
    depth, connectives = _depth(tokens, what)
    if depth > limits.MAX_EXPRESSION_DEPTH:
        raise InvalidInputError(
            f"{what}: operators may be applied at most {limits.MAX_EXPRESSION_DEPTH} deep, "
            f"one within another (use IN (...) for a long list)"
        )
    if connectives > limits.MAX_EXPRESSION_CONNECTIVES:
        raise InvalidInputError(f"{what}: at most {limits.MAX_EXPRESSION_CONNECTIVES} AND and OR are accepted")
    growing = 0
    for index, token in enumerate(tokens):
        if _is_call(tokens, index):
            arguments = _arguments(tokens, index + 2, what)
            if token.word in GROWING:
                growing += 1
                _check_growing(token.word, arguments, what)
            _check_call(token.word, arguments, what)
        elif token.kind == "operator" and token.text == "::":
            _check_type(_type_tokens(tokens, index + 1), what)
    if growing > limits.MAX_GROWING_CALLS:
        raise InvalidInputError(
            f"{what}: at most {limits.MAX_GROWING_CALLS} calls of functions that build large values "
            f"({', '.join(sorted(GROWING)[:6])}, ...) are accepted in one expression"
        )


def _is_call(tokens: Sequence[Token], index: int) -> bool:
    return tokens[index].kind in ("word", "name", "string") and _is(tokens, index + 1, "(")


def _check_growing(name: str, arguments: list[list[Token]], what: str) -> None:
    """A growing function takes no other's result, copies only columns and single literals, and
    copies a literal of at most ``limits.MAX_REPLACEMENT_BYTES`` per match or element."""
    inside = [token for argument in arguments for token in argument]
    for index, token in enumerate(inside):
        if _is_call(inside, index) and token.word in GROWING:
            raise InvalidInputError(
                f"{what}: {name}() may not take the result of {token.word}() (sizes would multiply)"
            )
    for position in _COPIED.get(name, ()):
        if position < len(arguments) and not _is_column_or_literal(arguments[position]):
            raise InvalidInputError(f"{what}: {name}() copies only a column or one literal")
    per_element = _PER_ELEMENT.get(name)
    if per_element is not None and per_element < len(arguments):
        copied = arguments[per_element]
        if _literal_length(copied) is None or len(copied[0].text.encode("utf-8")) > limits.MAX_REPLACEMENT_BYTES:
            raise InvalidInputError(
                f"{what}: {name}() takes what it copies per element as a literal of at most "
                f"{limits.MAX_REPLACEMENT_BYTES} bytes"
            )


def _is_column_or_literal(argument: Sequence[Token]) -> bool:
    """One literal (with an optional sign), or a column: names joined by dots."""
    if _literal_length(argument) is not None or _whole_number(argument) is not None:
        return True
    names = argument[::2]
    return (
        len(argument) % 2 == 1
        and all(token.kind in ("word", "name") or token.quote == '"' for token in names)
        and all(token.kind == "other" and token.text == "." for token in argument[1::2])
    )


def _depth(tokens: list[Token], what: str) -> tuple[int, int]:
    """An upper bound of how deep the expression's operators nest (a chain of n operators is n
    deep; brackets, calls and CASE add one), and its number of AND and OR."""
    frames = [[0, 0, 0]]  # per open bracket: operators in the current chain, deepest within it, deepest so far
    connectives = 0
    for token in tokens:
        frame = frames[-1]
        word = token.word if token.kind == "word" else ""
        if token.text in ("(", "[", "{") and token.kind == "other" or word == "case":
            frames.append([0, 0, 0])
        elif token.text in (")", "]", "}") and token.kind == "other" or word == "end":
            if len(frames) == 1:
                raise InvalidInputError(f"{what}: unbalanced brackets")
            closed = max(frame[2], frame[0] + frame[1]) + 1
            frames.pop()
            frames[-1][1] = max(frames[-1][1], closed)
        elif token.text == "," or word in _CONNECTIVES or word in _SEPARATORS:
            connectives += word in _CONNECTIVES
            frame[2] = max(frame[2], frame[0] + frame[1])
            frame[0] = frame[1] = 0
        elif token.kind == "operator" or word in _OPERATOR_WORDS:
            frame[0] += 1
    if len(frames) != 1:
        raise InvalidInputError(f"{what}: unbalanced brackets")
    root = frames[0]
    return max(root[2], root[0] + root[1]), connectives


def _is(tokens: Sequence[Token], index: int, text: str) -> bool:
    return index < len(tokens) and tokens[index].kind in ("other", "operator") and tokens[index].text == text


def _arguments(tokens: list[Token], start: int, what: str) -> list[list[Token]]:
    """The arguments of a call whose ``(`` is just before ``start``, split at its own commas."""
    arguments: list[list[Token]] = [[]]
    level = 0
    for token in tokens[start:]:
        opening, closing = token.text in ("(", "[", "{"), token.text in (")", "]", "}")
        if token.kind == "other" and closing and level == 0:
            return arguments if arguments != [[]] else []
        if token.kind == "other" and token.text == "," and level == 0:
            arguments.append([])
            continue
        if token.kind == "other":
            level += opening - closing
        arguments[-1].append(token)
    raise InvalidInputError(f"{what}: unbalanced brackets")


def _whole_number(argument: Sequence[Token]) -> int | None:
    """The value of an argument that is one whole-number literal (with an optional sign)."""
    sign = 1
    if len(argument) == 2 and argument[0].kind == "operator" and argument[0].text in "+-":
        sign, argument = (-1 if argument[0].text == "-" else 1), argument[1:]
    if len(argument) == 1 and argument[0].kind == "number" and argument[0].text.isdigit():
        return sign * int(argument[0].text)
    return None


def _literal_length(argument: Sequence[Token], as_text: bool = False) -> int | None:
    """The length of an argument that is one literal (a string's characters; one for a number,
    or, ``as_text``, the most characters it may print as), None otherwise. A double-quoted word
    is a column to pylance, not a literal."""
    if len(argument) == 1 and argument[0].kind == "string" and argument[0].quote == "'":
        return max(len(argument[0].text), 1)
    if len(argument) == 1 and argument[0].kind == "number":
        text = argument[0].text
        return (len(text) if text.isdigit() else MAX_NUMBER_TEXT) if as_text else 1
    return None


def _size(argument: Sequence[Token] | None, call: str, what: str) -> int:
    size = _whole_number(argument) if argument is not None else None
    if size is None or not 0 <= size <= limits.MAX_BUILT_LENGTH:
        raise InvalidInputError(
            f"{what}: {call}() takes its size as a whole-number literal up to {limits.MAX_BUILT_LENGTH}"
        )
    return size


def _check_call(name: str, arguments: list[list[Token]], what: str) -> None:
    """The size a call builds from, where its function builds a value of a size it is given."""
    argument = dict(enumerate(arguments)).get
    if name in ("lpad", "rpad"):
        _size(argument(1), name, what)
    elif name in ("repeat", "array_repeat", "list_repeat", "array_resize", "list_resize"):
        resize = name.endswith("resize")
        count = _size(argument(1), name, what)
        repeated = argument(2) if resize else argument(0)
        length = _literal_length(repeated, as_text=name == "repeat") if repeated is not None else 1
        if length is None and count > MAX_COLUMN_REPEAT:
            raise InvalidInputError(f"{what}: {name}() repeats a column's value at most {MAX_COLUMN_REPEAT} times")
        if length is not None and length * count > limits.MAX_BUILT_LENGTH:
            raise InvalidInputError(f"{what}: {name}() builds at most {limits.MAX_BUILT_LENGTH} characters or values")
    elif name in ("range", "generate_series"):
        _check_series(name, arguments, what)
    elif name in ("replace", "regexp_replace"):
        replacement = argument(2)
        if (
            replacement is None
            or _literal_length(replacement) is None
            or (len(replacement[0].text.encode("utf-8")) > limits.MAX_REPLACEMENT_BYTES)
        ):
            raise InvalidInputError(
                f"{what}: {name}() takes its replacement as a literal of at most {limits.MAX_REPLACEMENT_BYTES} bytes"
            )
        pattern = argument(1)
        if name == "replace" and (pattern is None or _literal_length(pattern) is None or not pattern[0].text):
            raise InvalidInputError(f"{what}: replace() takes what it replaces as a literal that is not empty")
        _check_literal_growth(name, argument(0), len(replacement[0].text.encode("utf-8")) + 1, what)
    elif name in ("encode", "translate"):
        _check_literal_growth(name, argument(0), 4, what)  # hex doubles, base64 takes 4/3, a character 4 bytes
    elif name in ("arrow_cast", "arrow_try_cast"):
        target = argument(1)
        if target is None or len(target) != 1 or target[0].kind != "string":
            raise InvalidInputError(f"{what}: {name}() takes its type as a string literal")
        _check_type([Token("number", size) for size in re.findall(r"\d+", target[0].text)], what)
    elif name in ("cast", "try_cast") and arguments:
        _check_type(_after_last_as(arguments[0]), what)


def _check_literal_growth(name: str, value: Sequence[Token] | None, factor: int, what: str) -> None:
    """A literal that a function makes up to ``factor`` times longer stays within ``MAX_BUILT_LENGTH``."""
    length = _literal_length(value, as_text=True) if value is not None else None
    if length is not None and length * factor > limits.MAX_BUILT_LENGTH:
        raise InvalidInputError(f"{what}: {name}() builds at most {limits.MAX_BUILT_LENGTH} characters")


def _after_last_as(argument: list[Token]) -> list[Token]:
    """The type of ``CAST(value AS type)``: what follows the last AS outside brackets."""
    level, after = 0, len(argument)
    for index, token in enumerate(argument):
        if token.kind == "other" and token.text in ("(", "[", ")", "]"):
            level += 1 if token.text in ("(", "[") else -1
        elif level == 0 and token.kind == "word" and token.word == "as":
            after = index + 1
    return argument[after:]


def _check_series(name: str, arguments: list[list[Token]], what: str) -> None:
    values = [_whole_number(argument) for argument in arguments]
    if not 1 <= len(values) <= 3 or any(value is None for value in values):
        raise InvalidInputError(f"{what}: {name}() takes whole-number literals here")
    start, end, step = (0, *values, 1) if len(values) == 1 else (*values, 1) if len(values) == 2 else values
    assert start is not None and end is not None and step is not None
    if step == 0 or abs(end - start) // abs(step) > limits.MAX_BUILT_LENGTH:
        raise InvalidInputError(f"{what}: {name}() builds at most {limits.MAX_BUILT_LENGTH} values")


def _type_tokens(tokens: list[Token], start: int) -> Iterator[Token]:
    """The tokens of a type after ``::``: its name, then any bracketed sizes."""
    level = 0
    for index in range(start, len(tokens)):
        token = tokens[index]
        if token.kind == "other" and token.text in ("(", "["):
            level += 1
        elif token.kind == "other" and token.text in (")", "]"):
            if level == 0:
                return
            level -= 1
        elif level == 0 and index > start and token.kind != "word":
            return
        yield token


def _check_type(tokens: Iterator[Token] | Sequence[Token], what: str) -> None:
    """A type may not name a size above ``limits.MAX_VECTOR_DIMENSION``: a cast to a fixed-size
    list or binary reserves rows × size up front."""
    for token in tokens:
        if token.kind == "number" and (not token.text.isdigit() or int(token.text) > limits.MAX_VECTOR_DIMENSION):
            raise InvalidInputError(f"{what}: a type's sizes may be at most {limits.MAX_VECTOR_DIMENSION}")
