"""The JSON text helpers (no database): depth measured on the text, parsing, capped pretty-printing.

Proves: the depth of text is counted outside strings (escapes respected) and without recursion,
so a million levels are measured in linear time; 64 levels parse and 65 are refused as a
``ValueError`` before anything recursive runs, under any recursion limit; Python values are
measured iteratively too (``Submission.of`` and ``canonical_json`` refuse a deep value as
``InputInvalid``, never ``RecursionError``); the pretty-printer gives ``json.dumps(indent=2)``'s
output for JSON the app writes, keeps other text's tokens as stored, stops at its cap with a
marker saying how much of the stored text it shows, and costs time linear in what it shows.
"""

from __future__ import annotations

import json
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_durable_jobs.rules import jsontext
from django_durable_jobs.rules.errors import InputInvalid
from django_durable_jobs.rules.jsontext import (
    DISPLAY_CAP_BYTES,
    MAX_JSON_DEPTH,
    JsonTooDeep,
    check_depth,
    excerpt,
    loads,
    object_depth_exceeds,
    pretty,
    text_depth,
    truncation_note,
    utf8_len,
)
from django_durable_jobs.rules.validation import json_text
from django_durable_jobs.rules.values import Submission, canonical_json
from tests.deep_json import maximal_text, nested_text, nested_value

# -- depth of text ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("1", 0),
        ('"text"', 0),
        ("null", 0),
        ("[]", 1),
        ("{}", 1),
        ('{"a": [1, {"b": []}]}', 4),
        ('["[[[", "{{{"]', 1),  # brackets inside strings do not count
        ('["\\"[[[", "]"]', 1),  # nor after an escaped quote
        ('["\\\\", [[]]]', 3),  # an escaped backslash ends before the closing quote
        ("[1] [[2]]", 2),  # not JSON: the answer is still the deepest nesting
        (nested_text(64), 64),
        (nested_text(65), 65),
    ],
)
def test_the_depth_of_text_counts_brackets_outside_strings(text, depth):
    assert text_depth(text) == depth


def test_the_limit_is_64_levels_and_a_scalar_has_none():
    assert MAX_JSON_DEPTH == 64
    assert loads(nested_text(64)) == nested_value(64)
    assert loads('{"a":' * 63 + "[]" + "}" * 63) is not None  # 64 with objects
    with pytest.raises(JsonTooDeep) as caught:
        loads(nested_text(65))
    assert isinstance(caught.value, ValueError)
    assert (caught.value.depth, caught.value.limit) == (65, 64)
    assert "nested 65 levels deep and the most is 64" in str(caught.value)


def test_a_million_levels_are_measured_in_linear_time_under_any_recursion_limit():
    text = nested_text(1_000_000)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(100)  # nothing here may recurse
    try:
        started = time.monotonic()
        assert text_depth(text) == 1_000_000
        with pytest.raises(JsonTooDeep):
            check_depth(text)
        assert jsontext.is_json(text) is False
        elapsed = time.monotonic() - started
    finally:
        sys.setrecursionlimit(limit)
    assert elapsed < 5


def test_unterminated_strings_full_of_escaped_quotes_cost_linear_time():
    # Retrying a failed string match from every later quote would be quadratic: 40,000 escaped
    # quotes took 13 s that way.
    for text in ('["' + '\\"' * 400_000, '"' * 400_001 + "[[", '[{"a\\' * 100_000):
        started = time.monotonic()
        text_depth(text)
        pretty(text, 4096)
        assert time.monotonic() - started < 2, text[:20]


def _depth(value) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


@given(value=st.deferred(lambda: JSON_VALUES))
def test_the_depth_of_text_is_the_depth_of_its_value(value):
    for text in (json.dumps(value), canonical_json(value), json.dumps(value, indent=1)):
        assert text_depth(text) == _depth(value)


def test_loads_is_strict_json():
    for bad in ('{"n": NaN}', "[Infinity]", "[-Infinity]", "{oops", "", "[1,]"):
        with pytest.raises(ValueError):
            loads(bad)
        assert jsontext.is_json(bad) is False
    assert jsontext.is_json(None) is False and jsontext.is_json(b"[]") is False
    assert loads('{"a": 1, "a": 2}') == {"a": 2}  # duplicate keys: JSON allows them


@pytest.mark.parametrize(
    ("depth", "refused"), [(64, False), (65, True), (100_000, True)], ids=["64", "65", "deep"]
)
def test_json_text_refuses_deep_text_as_input_invalid(depth, refused):
    text = nested_text(depth)
    if not refused:
        assert json_text(text, "proposal") == text
        return
    with pytest.raises(InputInvalid) as caught:
        json_text(text, "proposal")
    assert caught.value.code == "E_JOB_INPUT_INVALID"
    assert "too deeply nested" in caught.value.message
    assert f"nested {depth:,} levels deep" in caught.value.message


# -- depth of Python values -------------------------------------------------------------------------


def test_the_depth_of_a_value_is_measured_without_recursion():
    assert object_depth_exceeds(nested_value(64)) is False
    assert object_depth_exceeds(nested_value(65)) is True
    assert object_depth_exceeds(nested_value(1_000_000)) is True
    assert object_depth_exceeds({"a": {"b": ()}}, 3) is False
    assert object_depth_exceeds({"a": {"b": ()}}, 2) is True
    assert object_depth_exceeds({nested_value(5, leaf=()).__class__: 1}) is False
    assert object_depth_exceeds({(((),),): 1}, 3) is True  # a key is walked too
    assert object_depth_exceeds("[[[[" * 100) is False  # text is a scalar
    looped: list = []
    looped.append(looped)
    assert object_depth_exceeds(looped) is True


@pytest.mark.parametrize("depth", [65, 1_000, 1_000_000])
def test_a_deep_python_value_is_refused_as_input_invalid_never_recursion(depth):
    value = nested_value(depth)
    with pytest.raises(ValueError):
        canonical_json(value)
    with pytest.raises(InputInvalid) as caught:
        Submission.of("s", "k", value)
    assert "nested" in caught.value.message and "64" in caught.value.message


def test_a_value_64_levels_deep_is_stored_as_canonical_json():
    assert canonical_json(nested_value(64)) == nested_text(64)
    assert Submission.of("s", "k", {"a": nested_value(63)}).proposal == (
        '{"a":' + nested_text(63) + "}"
    )


# -- pretty-printing --------------------------------------------------------------------------------


def squeezed(text: str) -> str:
    """Return ``text`` without whitespace: pretty output and its source squeeze alike."""
    return "".join(text.split())


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=25,
)


@given(value=JSON_VALUES)
def test_pretty_gives_json_dumps_indent_2_for_json_the_app_writes(value):
    # Canonical JSON (what Submission.of stores), and text as other writers give it.
    for stored, sort, ascii in (
        (canonical_json(value), True, False),
        (json.dumps(value), False, True),
        (json.dumps(value, ensure_ascii=False, separators=(",", ":")), False, False),
    ):
        shown = pretty(stored, cap=10**9)
        assert shown.text == json.dumps(value, indent=2, ensure_ascii=ascii, sort_keys=sort)
        assert not shown.truncated and shown.note() == ""


def test_pretty_keeps_every_token_exactly_as_stored():
    text = '{"n": 1e400, "n": -0.0, "s": "\\ud800\\u00e9\\/", "big": 123456789012345678901234}'
    assert pretty(text).text == (
        "{\n"
        '  "n": 1e400,\n'
        '  "n": -0.0,\n'
        '  "s": "\\ud800\\u00e9\\/",\n'
        '  "big": 123456789012345678901234\n'
        "}"
    )


def test_pretty_of_a_maximal_value_stops_at_its_cap_with_a_marker():
    text = maximal_text()
    started = time.monotonic()
    shown = pretty(text)
    elapsed = time.monotonic() - started
    assert shown.truncated
    assert utf8_len(shown.text) <= DISPLAY_CAP_BYTES
    assert shown.total_bytes == 1_048_576 and 0 < shown.shown_bytes < 1_048_576
    assert squeezed(text).startswith(squeezed(shown.text))
    assert shown.note() == f"… truncated: showing {shown.shown_bytes:,} of 1,048,576 bytes"
    assert elapsed < 2


def test_pretty_costs_time_in_proportion_to_what_it_shows():
    small, large = maximal_text(size=65_536), maximal_text()
    for text in (small, large):
        pretty(text)  # warm up
    started = time.perf_counter()
    for _ in range(5):
        pretty(small, cap=4096)
    short = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(5):
        pretty(large, cap=4096)
    long = time.perf_counter() - started
    assert long < 20 * short + 0.05  # the rest of the text is never read


def test_a_cut_never_exceeds_the_cap_nor_splits_a_character():
    text = '["' + "é🦄" * 50_000 + '"]'
    for cap in (1, 2, 3, 5, 100, 4097):
        shown = excerpt(text, cap)
        assert utf8_len(shown.text) <= cap
        assert text.startswith(shown.text)
        assert shown.shown_bytes == utf8_len(shown.text)
        shown = pretty(text, cap)
        assert utf8_len(shown.text) <= cap and squeezed(text).startswith(squeezed(shown.text))


def test_a_cut_can_count_the_output_as_the_surface_does():
    text = '["' + "<&>" * 10_000 + '"]'
    escaped = lambda chunk: len(chunk.replace("&", "&amp;").replace("<", "&lt;"))  # noqa: E731
    shown = pretty(text, 1000, measure=escaped)
    assert escaped(shown.text) <= 1000 < utf8_len(text)
    assert shown.truncated


def test_the_marker_says_how_much_of_how_much_is_shown():
    assert truncation_note(65_536, 1_048_576) == "… truncated: showing 65,536 of 1,048,576 bytes"
    whole = excerpt("[1, 2]")
    assert (whole.truncated, whole.shown_bytes, whole.total_bytes) == (False, 6, 6)
