"""Hypothesis strategies shared by the fuzz proofs: hostile values for every public argument.

Each strategy mixes values a careful caller would send with what a careless or hostile one might:
text with NUL bytes, control characters, lone surrogates and right-to-left marks; numbers at and
past every column's range, NaN and infinities; bools where numbers are expected; naive and
out-of-range datetimes; JSON text that is broken, too deep, full of escaped surrogates or over the
payload cap; containers and plain objects where scalars are expected.

``examples(n)`` scales a test's example count by the profile: the bounded one of ``make test``,
or 20 times more under ``DURABLE_JOBS_PROOF=long``.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from django_durable_jobs.rules.jsontext import MAX_JSON_DEPTH

LONG = os.environ.get("DURABLE_JOBS_PROOF") == "long"
SUPPRESSED = [
    HealthCheck.function_scoped_fixture,
    HealthCheck.too_slow,
    HealthCheck.data_too_large,
    HealthCheck.filter_too_much,
]


def examples(n: int) -> int:
    """Return ``n`` examples for ``make test``, twenty times as many for the long profile."""
    return n * 20 if LONG else n


def fuzz_settings(n: int) -> settings:
    """Return the settings of a fuzz test of ``n`` examples (bounded; see :func:`examples`)."""
    return settings(
        max_examples=examples(n),
        deadline=None,
        suppress_health_check=SUPPRESSED,
        derandomize=not LONG,  # make test: the same examples every run, so timing is stable
        database=None,
    )


# -- text --------------------------------------------------------------------------------------

# Characters that have broken something somewhere: NUL and other controls, a lone surrogate of
# each half, the right-to-left override, a zero-width joiner, full-width and look-alike letters,
# multi-byte letters and a character beyond U+FFFF.
NASTY_CHARS = [
    "\x00",
    "\x07",
    "\x1b",
    "\n",
    "\t",
    "\x7f",
    " ",
    "\ud800",
    "\udfff",
    "\u202e",
    "\u200d",
    "\ufeff",
    "Ａ",
    "а",  # Cyrillic a
    "é",
    "€",
    "😀",
    "'",
    '"',
    "\\",
    "%",
    "_",
    ";",
    "/",
    ".",
    ":",
    "-",
    "a",
    "Z",
    "0",
]


def nasty_text(max_size: int = 40) -> st.SearchStrategy[str]:
    """Return text of any Unicode (surrogates included), weighted towards NASTY_CHARS."""
    return st.one_of(
        st.text(st.sampled_from(NASTY_CHARS), max_size=max_size),
        st.text(st.characters(codec=None, exclude_categories=()), max_size=max_size),
        st.text(max_size=max_size),
    )


def long_text() -> st.SearchStrategy[str]:
    """Return text just at and past the 200- and 255-character limits of names and keys."""
    return st.builds(
        lambda char, n: char * n,
        st.sampled_from(["a", "é", "😀", " ", "\x00"]),
        st.sampled_from([199, 200, 201, 254, 255, 256, 10_000]),
    )


def plausible_names() -> st.SearchStrategy[str]:
    """Return names a validator should accept (operation-style: letters, digits, ``._:-``)."""
    return st.from_regex(r"\A[A-Za-z0-9_][A-Za-z0-9_.:\-]{0,30}\Z")


def names() -> st.SearchStrategy[Any]:
    """Return what might be given as an operation, scope, actor, queue or key: mostly text."""
    return st.one_of(plausible_names(), nasty_text(), long_text(), scalars())


# -- scalars and containers -------------------------------------------------------------------

BIG_INTS = [
    0,
    1,
    -1,
    100,
    101,
    -101,
    2**31 - 1,
    2**31,
    2**63 - 1,
    2**63,
    -(2**63) - 1,
    2**64,
    10**30,
]


def integers() -> st.SearchStrategy[int]:
    """Return whole numbers, weighted towards the edges of 32- and 64-bit columns."""
    return st.one_of(st.sampled_from(BIG_INTS), st.integers())


def floats() -> st.SearchStrategy[float]:
    """Return floats of every kind: NaN, the infinities, -0.0, subnormal and huge."""
    return st.one_of(
        st.sampled_from([float("nan"), float("inf"), float("-inf"), -0.0, 1e300, 5e-324, 0.5]),
        st.floats(allow_nan=True, allow_infinity=True),
    )


def datetimes() -> st.SearchStrategy[datetime]:
    """Return naive and aware datetimes, at and past what the databases store (years 1-9999)."""
    zones = st.sampled_from([UTC, timezone(timedelta(hours=14)), timezone(timedelta(hours=-12))])
    return st.one_of(
        st.datetimes(),
        st.datetimes(timezones=zones),
        st.sampled_from(
            [
                datetime.min.replace(tzinfo=UTC),
                datetime.max.replace(tzinfo=UTC),
                datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-12))),
                datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))),
                datetime(2026, 1, 1, tzinfo=UTC),
            ]
        ),
    )


class Opaque:
    """A plain object: neither JSON, nor a name, nor a number."""

    def __repr__(self) -> str:
        return "Opaque()"


def scalars() -> st.SearchStrategy[Any]:
    """Return single values of every type a public argument could be handed by mistake."""
    return st.one_of(
        st.none(),
        st.booleans(),
        integers(),
        floats(),
        nasty_text(12),
        st.binary(max_size=16),
        datetimes(),
        st.uuids(),
        st.builds(Opaque),
        st.just(1j),
        st.just(Ellipsis),
        st.timedeltas(),
    )


def anything() -> st.SearchStrategy[Any]:
    """Return a scalar or a small container of them (lists, tuples, sets, dicts)."""
    return st.recursive(
        scalars(),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.tuples(inner, inner),
            st.frozensets(st.one_of(st.integers(), st.text(max_size=3)), max_size=3),
            st.dictionaries(st.one_of(st.text(max_size=4), st.integers()), inner, max_size=3),
        ),
        max_leaves=8,
    )


# -- JSON ------------------------------------------------------------------------------------


def json_values() -> st.SearchStrategy[Any]:
    """Return JSON-serialisable values (strict JSON: no NaN), nested a little."""
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        nasty_text(10),
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(nasty_text(5), inner, max_size=3)
        ),
        max_leaves=10,
    )


def nested(depth: int, open_: str = "[", close: str = "]") -> str:
    """Return JSON text nested ``depth`` levels deep."""
    return open_ * depth + close * depth


DEEP = [
    nested(MAX_JSON_DEPTH),
    nested(MAX_JSON_DEPTH + 1),
    '{"a":' * (MAX_JSON_DEPTH + 1) + "1" + "}" * (MAX_JSON_DEPTH + 1),
    nested(100_000),
]
BROKEN_JSON = [
    "",
    " ",
    "not json",
    "{'a': 1}",
    '{"a": 1',
    "NaN",
    "Infinity",
    '{"x": -Infinity}',
    '"\\ud800"',
    '"\\udfff\\ud800"',
    '"\\ud83d\\ude00"',  # a well-formed escaped pair: accepted
    '{"a": 1} trailing',
    '{"a": 1, "a": 2}',
    '"\x00"',
    '"\\u0000"',
    "1e999",
    "-0",
    "[" + "1," * 10 + "1]",
    '"' + "x" * 70_000 + '"',
]


def deep_values() -> st.SearchStrategy[Any]:
    """Return lists and dicts nested around ``MAX_JSON_DEPTH`` levels, and far past it."""

    def build(depth: int, as_dict: bool) -> Any:
        value: Any = 1
        for _ in range(depth):
            value = {"a": value} if as_dict else [value]
        return value

    depths = st.sampled_from([MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1, 5000])
    return st.builds(build, depths, st.booleans())


def json_texts() -> st.SearchStrategy[Any]:
    """Return what might be given as JSON text: valid, broken, deep, huge, or not text at all."""
    return st.one_of(
        json_values().map(lambda v: json.dumps(v, ensure_ascii=False)),
        json_values().map(json.dumps),
        st.sampled_from(BROKEN_JSON + DEEP),
        nasty_text(),
        scalars(),
    )


# -- ids, leases, pages ------------------------------------------------------------------------


def job_ids() -> st.SearchStrategy[Any]:
    """Return what might be given as a job id: UUIDs in every spelling, and things that are not."""
    return st.one_of(
        st.uuids(),
        st.uuids().map(str),
        st.uuids().map(lambda u: str(u).upper()),
        st.uuids().map(lambda u: u.hex),
        st.uuids().map(lambda u: "{" + str(u) + "}"),
        st.uuids().map(lambda u: "urn:uuid:" + str(u)),
        st.uuids().map(lambda u: str(u) + "\x00"),
        st.uuids().map(lambda u: u.bytes),
        st.uuids().map(lambda u: u.int),
        scalars(),
    )


def page_cursors() -> st.SearchStrategy[Any]:
    """Return what might be given as a page cursor: forged text of every kind, or not text."""
    return st.one_of(
        nasty_text(60),
        st.text(
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_:=.", max_size=120
        ),
        long_text(),
        scalars(),
    )


def new_uuid() -> uuid.UUID:
    return uuid.uuid4()


# -- mostly valid arguments ------------------------------------------------------------------


def chance(p: float) -> st.SearchStrategy[bool]:
    """Return True with probability ``p``, truly at random (Hypothesis cannot steer it).

    Hypothesis seeks inputs it has not tried, so with a plain ``one_of`` it soon leaves a
    valid branch of few distinct values for the endless hostile ones, and accepted calls
    would hardly be tested. A coin from a seeded ``random.Random`` keeps the proportions.
    """
    return st.randoms(use_true_random=True).map(lambda rnd: rnd.random() < p)


def sometimes(valid: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]) -> st.SearchStrategy:
    """Return ``valid`` three times in four, ``hostile`` otherwise (for a lone argument)."""
    return chance(0.75).flatmap(lambda ok: valid if ok else hostile)


@st.composite
def arguments(draw: st.DrawFn, **pairs: tuple[st.SearchStrategy, st.SearchStrategy]) -> dict:
    """Return a value for each named argument: valid, except for at most two chosen to be hostile.

    Each pair is ``(valid, hostile)``. About two examples in five are entirely valid, so the
    fuzz proves accepted calls wrote what they say; the others corrupt one or two arguments,
    so each meets hostile values beside otherwise good ones (where a refusal is not masked by
    an earlier one).
    """
    names = sorted(pairs)
    rnd = draw(st.randoms(use_true_random=True), label="which are hostile")
    bad = set(rnd.sample(names, min(len(names), rnd.choice([0, 0, 1, 1, 2]))))
    return {n: draw(pairs[n][1] if n in bad else pairs[n][0], label=n) for n in names}


def plausible_json() -> st.SearchStrategy[str]:
    """Return valid JSON text of small values (a proposal or checkpoint the store must accept)."""
    return json_values().map(lambda v: json.dumps(v, ensure_ascii=False)).filter(_well_formed)


def _well_formed(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def plausible_times() -> st.SearchStrategy[datetime]:
    """Return aware datetimes every database stores (years 2000-2100)."""
    return st.datetimes(
        min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
    )
