"""``terminal.printable``: untrusted text escaped for a terminal, and nothing else touched (pure)."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from django_durable_jobs.formatting.terminal import (
    UNSAFE,
    PrintableFormatter,
    printable,
    printable_json,
)

HOSTILE = "\x1b]0;pwned\x07\x1b[2J"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (HOSTILE, "\\x1b]0;pwned\\x07\\x1b[2J"),
        ("over\rwrite", "over\\rwrite"),
        ("\x00nul \x08bs \x0bvt \x0cff", "\\x00nul \\x08bs \\x0bvt \\x0cff"),
        ("del\x7f", "del\\x7f"),
        ("c1 csi \x9b2J nel \x85", "c1 csi \\x9b2J nel \\x85"),
        ("\x80\x9f", "\\x80\\x9f"),
        ("line\u2028para\u2029", "line\\u2028para\\u2029"),
        ("evil\u202ecod.exe", "evil\\u202ecod.exe"),
        ("\u202a\u202b\u202c\u202d", "\\u202a\\u202b\\u202c\\u202d"),
        ("\u2066\u2067\u2068\u2069", "\\u2066\\u2067\\u2068\\u2069"),
        ("\u200e\u200f\u061c", "\\u200e\\u200f\\u061c"),
        ("lone \udc80 surrogate", "lone \\udc80 surrogate"),
    ],
)
def test_controls_are_written_as_visible_escapes(raw, shown):
    assert printable(raw) == shown
    assert printable(raw, keep_newlines=False) == shown


def test_newlines_and_tabs_are_kept_in_a_block_and_escaped_on_one_line():
    traceback = "Traceback (most recent call last):\n\tFile 'x'\nRuntimeError: \x1b[31mno"
    assert printable(traceback) == (
        "Traceback (most recent call last):\n\tFile 'x'\nRuntimeError: \\x1b[31mno"
    )
    assert printable("a\nb\tc\r\n", keep_newlines=False) == "a\\nb\\tc\\r\\n"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "plain ascii, punctuation ~!@#$%^&*()[]{}",
        "héllo wörld ñ — «quotes» 日本語 עברית العربية",
        "emoji 🙂 and a family 👨\u200d👩\u200d👧 (zero-width joiners kept)",
        "a windows path C:\\temp\\x1b is left alone",
        "\xa0no-break space and \xad soft hyphen",
    ],
)
def test_everything_else_is_printed_as_it_is(text):
    assert printable(text) == text
    assert printable(text, keep_newlines=False) == text


def test_every_unsafe_code_point_is_escaped_and_escaping_is_idempotent():
    every = "".join(chr(code) for code in sorted(UNSAFE))
    once = printable(every, keep_newlines=False)
    assert once.isascii() and once.isprintable()
    assert printable(once, keep_newlines=False) == once
    block = printable(every)
    assert set(block) - set(once) == {"\n", "\t"}
    assert printable(block) == block


def test_each_unsafe_code_point_alone_in_plain_text_is_escaped():
    # printable() returns text Python deems printable untouched: none of UNSAFE may be.
    for code in sorted(UNSAFE):
        shown = printable(f"plain {chr(code)} text", keep_newlines=False)
        assert chr(code) not in shown, hex(code)
        assert shown.startswith("plain \\") and shown.endswith(" text")


def test_no_printable_output_can_be_refused_by_a_utf8_terminal():
    text = printable("ok \udcff \ud800 done")
    text.encode("utf-8")  # strict: a raw lone surrogate would raise here


def test_values_that_are_not_text_are_converted_first():
    assert printable(RuntimeError("boom\x1b[2J")) == "boom\\x1b[2J"
    assert printable(42) == "42"
    assert printable(None) == "None"


def test_printable_json_decodes_to_the_same_value_and_prints_safely():
    value = {
        "error": HOSTILE,
        "c1": "\x9b\x85\x7f",
        "bidi": "\u202e\u2066",
        "sep": "\u2028",
        "lone": "\udc80",
        "kept": "é 🙂",
        "tb": "line 1\nline 2",
    }
    text = printable_json(json.dumps(value, indent=2, ensure_ascii=False))
    assert json.loads(text) == value
    assert printable(text) == text  # only JSON's own indentation newlines remain raw
    assert "é 🙂" in text  # readable text is not turned into \\u escapes


def test_the_formatter_escapes_messages_arguments_and_tracebacks():
    formatter = PrintableFormatter("%(levelname)s %(message)s")
    try:
        raise RuntimeError(f"boom {HOSTILE}")
    except RuntimeError:
        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "django_durable_jobs.worker", logging.WARNING, __file__, 1, "job %s", ("op\x07",), exc_info
    )
    line = formatter.format(record)
    assert "\x1b" not in line and "\x07" not in line
    assert line.startswith("WARNING job op\\x07\nTraceback (most recent call last):\n")
    assert line.endswith("RuntimeError: boom \\x1b]0;pwned\\x07\\x1b[2J")
