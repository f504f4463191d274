"""JSON text as the app accepts, parses and shows it: bounded nesting, linear work, capped output.

Every JSON value the app accepts (a job's input, a checkpoint, a result or receipt, a task's
arguments) is nested at most :data:`MAX_JSON_DEPTH` levels: ``[]`` and ``{}`` at the top are one
level, a scalar none. The limit is checked on the text, before it is parsed, by counting brackets
outside strings, so no input can make a parser (or anything that walks the parsed value) recurse
deeply: the answer is the same on every database and Python version, and no code path here raises
``RecursionError``.

Showing a value is linear in what is shown and capped (:data:`DISPLAY_CAP_BYTES`): the text is
re-indented token by token, exactly as stored (numbers, escapes and repeated keys as written),
and stops at the cap; :func:`truncation_note` says how much of the stored text the output covers.
Nothing here touches the database.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate, count, repeat
from operator import mul, sub
from typing import Any

__all__ = [
    "DISPLAY_CAP_BYTES",
    "MAX_JSON_DEPTH",
    "JsonTooDeep",
    "Serialised",
    "Shown",
    "check_depth",
    "excerpt",
    "is_json",
    "loads",
    "object_depth_exceeds",
    "pretty",
    "text_depth",
    "truncation_note",
    "utf8_len",
]

MAX_JSON_DEPTH = 64
DISPLAY_CAP_BYTES = 65_536
INDENT = "  "

# A JSON string, escapes included (a backslash escapes the character after it). The closing
# quote is optional: an unterminated string runs to the end of the text, so a match never fails
# after scanning (which, retried from every later quote, would cost quadratic time).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
# Openers become 1, closers 0: the depth after the n-th bracket is 2 * (openers so far) - n.
_BRACKET_BITS = str.maketrans({"[": "\x01", "{": "\x01", "]": "\x00", "}": "\x00"})
# The tokens of JSON text: strings, punctuation, and the runs between them (numbers, literals).
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}:,]|[^\s\[\]{}:,"]+', re.DOTALL)


class JsonTooDeep(ValueError):
    """JSON nested deeper than :data:`MAX_JSON_DEPTH` levels."""

    def __init__(self, depth: int | None, limit: int = MAX_JSON_DEPTH) -> None:
        self.depth = depth
        self.limit = limit
        nested = f"more than {limit}" if depth is None else f"{depth:,}"
        super().__init__(
            f"it is nested {nested} levels deep and the most is {limit}; flatten it, or store "
            f"the nested data elsewhere and pass a reference"
        )

    @property
    def nesting(self) -> str:
        """Return what a reader says of stored text this deep: how deep, and the limit."""
        nested = f"more than {self.limit:,}" if self.depth is None else f"{self.depth:,}"
        return f"nested {nested} levels deep, deeper than the {self.limit} this app reads"


# -- depth ----------------------------------------------------------------------------------------


def text_depth(text: str) -> int:
    """Return how deeply the JSON ``text`` nests arrays and objects (0 for a scalar).

    Brackets inside strings do not count. Linear in the text and free of recursion; for text
    that is not JSON the answer is an upper bound of what a parser would nest before failing.
    """
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if not brackets:
        return 0
    bits = brackets.translate(_BRACKET_BITS).encode("ascii")
    return max(0, max(map(sub, map(mul, accumulate(bits), repeat(2)), count(1))))


def check_depth(text: str, limit: int = MAX_JSON_DEPTH) -> str:
    """Return ``text``, or raise :class:`JsonTooDeep` when it nests deeper than ``limit``."""
    if text.count("[") + text.count("{") > limit:  # otherwise it cannot be that deep
        depth = text_depth(text)
        if depth > limit:
            raise JsonTooDeep(depth, limit)
    return text


def object_depth_exceeds(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Return True when the Python ``value`` nests containers deeper than ``limit``.

    Mappings and sequences other than text count as containers (a mapping's keys too), as JSON
    serialisers walk them. Iterative: a value nested a million levels is measured, not recursed
    into; a value that contains itself is deeper than any limit.
    """
    stack: list[tuple[Iterator[Any], int]] = []
    current = _children(value)
    if current is None:
        return False
    depth = 1
    while True:
        if depth > limit:
            return True
        for child in current:
            inner = _children(child)
            if inner is not None:
                stack.append((current, depth))
                current, depth = inner, depth + 1
                break
        else:
            if not stack:
                return False
            current, depth = stack.pop()


def _children(value: Any) -> Iterator[Any] | None:
    if isinstance(value, (str, bytes, bytearray)):
        return None
    if isinstance(value, Mapping):
        return (item for pair in value.items() for item in pair)
    if isinstance(value, (list, tuple, Sequence)):
        return iter(value)
    return None


# -- parsing --------------------------------------------------------------------------------------


def _refuse_constant(token: str) -> Any:
    raise ValueError(f"{token} is not JSON")


def loads(text: str, limit: int = MAX_JSON_DEPTH) -> Any:
    """Parse JSON as RFC 8259 has it, nested at most ``limit`` levels.

    NaN and Infinity are refused, and so is text nested too deeply (:class:`JsonTooDeep`), each
    as a ``ValueError``, before anything recursive runs.
    """
    check_depth(text, limit)
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:  # cannot happen within the limit; never let it escape
        raise JsonTooDeep(None, limit) from None


def is_json(text: Any) -> bool:
    """Return True when ``text`` is strict JSON text within the depth limit."""
    if not isinstance(text, str):
        return False
    try:
        loads(text)
    except ValueError:
        return False
    return True


# -- showing --------------------------------------------------------------------------------------


def utf8_len(text: str) -> int:
    """Return the number of UTF-8 bytes of ``text`` (a lone surrogate counts as three)."""
    return len(text.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True)
class Shown:
    """What a display shows of stored text: the output, and how much of the text it covers."""

    text: str
    truncated: bool
    shown_bytes: int  # UTF-8 bytes of the stored text the output covers
    total_bytes: int  # UTF-8 bytes of the whole stored text

    def note(self) -> str:
        """Return the truncation marker, or "" when everything is shown."""
        return truncation_note(self.shown_bytes, self.total_bytes) if self.truncated else ""


def truncation_note(shown_bytes: int, total_bytes: int) -> str:
    """Return the marker that ends a truncated display: how much of how much is shown."""
    return f"… truncated: showing {shown_bytes:,} of {total_bytes:,} bytes"


def pretty(
    text: str, cap: int = DISPLAY_CAP_BYTES, *, measure: Callable[[str], int] = utf8_len
) -> Shown:
    """Return ``text`` (valid JSON) indented by two spaces, cut at ``cap`` units of output.

    The output for JSON this app wrote is what ``json.dumps(value, indent=2,
    ensure_ascii=False)`` gives; for other text, the tokens stay exactly as stored. The work is
    linear in the output: tokens are read only until the cap is reached. ``measure`` tells the
    size of output as the surface counts it (UTF-8 bytes, or the length once HTML-escaped).
    """
    return _capped(_reindented(text), text, cap, measure)


def excerpt(
    text: str, cap: int = DISPLAY_CAP_BYTES, *, measure: Callable[[str], int] = utf8_len
) -> Shown:
    """Return the beginning of ``text`` as stored, cut at ``cap`` units of output."""
    return _capped(iter([(text, 0)]), text, cap, measure)


def _reindented(text: str) -> Iterator[tuple[str, int]]:
    """Yield the chunks of ``text`` re-indented, each with the offset of its source in ``text``."""
    level = 0
    tokens = _TOKEN.finditer(text)
    held = None  # an opener whose closer may follow at once: "[]" and "{}" stay on one line
    for match in tokens:
        token = match.group()
        start = match.start()
        if held is not None:
            opener, opened_at = held
            held = None
            if token in ("]", "}"):
                yield opener + token, opened_at
                continue
            level += 1
            yield opener + "\n" + INDENT * level, opened_at
        if token in ("[", "{"):
            held = (token, start)
        elif token in ("]", "}"):
            level = max(0, level - 1)
            yield "\n" + INDENT * level + token, start
        elif token == ",":
            yield ",\n" + INDENT * level, start
        elif token == ":":
            yield ": ", start
        else:
            yield token, start
    if held is not None:
        yield held


def _capped(
    chunks: Iterator[tuple[str, int]], text: str, cap: int, measure: Callable[[str], int]
) -> Shown:
    """Join ``chunks`` until ``cap``; cut the chunk that crosses it."""
    parts: list[str] = []
    used = 0
    for chunk, start in chunks:
        size = measure(chunk)
        if used + size <= cap:
            parts.append(chunk)
            used += size
            continue
        keep = _fitting(chunk, cap - used, measure)
        parts.append(chunk[:keep])
        # A token shown as stored covers its cut part; punctuation with indentation, nothing.
        verbatim = text.startswith(chunk, start)
        source = start + keep if verbatim else start
        return Shown("".join(parts), True, utf8_len(text[:source]), utf8_len(text))
    total = utf8_len(text)
    return Shown("".join(parts), False, total, total)


def _fitting(chunk: str, room: int, measure: Callable[[str], int]) -> int:
    """Return the longest prefix length of ``chunk`` whose measure fits in ``room``."""
    low, high = 0, min(len(chunk), max(room, 0))
    while low < high:
        middle = (low + high + 1) // 2
        if measure(chunk[:middle]) <= room:
            low = middle
        else:
            high = middle - 1
    return low


class Serialised(str):
    """Text :func:`canonical_json` wrote for a submission: strict JSON within the depth limit.

    ``Submission.of`` marks its proposal so, and the store then checks only its UTF-8 form and
    size instead of parsing it again (a bulk submission spent a tenth of its time on that).
    Any other text, including one put in its place with ``dataclasses.replace``, is a plain
    ``str`` and parsed.
    """

    __slots__ = ()


def canonical_json(value: Any) -> str:
    """Serialise ``value`` to canonical JSON: sorted keys, no spaces, no NaN.

    A value nested deeper than ``MAX_JSON_DEPTH`` levels is refused with a ``ValueError``
    (``JsonTooDeep``), never a ``RecursionError``, however deep it is.
    """
    try:
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except RecursionError:  # nested past what the interpreter can walk: far past the limit
        raise JsonTooDeep(None) from None
    return check_depth(text)
