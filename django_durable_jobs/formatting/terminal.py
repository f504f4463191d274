"""Untrusted text made safe to print: no terminal escape can ride along in a job's words.

Error messages, tracebacks, operation names, scopes, keys, ``claimed_by`` and stored payloads
come from job code, API callers or rows written outside this app. Printed raw, an ``ESC ]0;…
BEL`` retitles the operator's terminal, ``ESC [2J`` clears it, a carriage return or a
right-to-left override makes a line read as something it is not, and a newline forges a log
line. :func:`printable` writes each such character as a visible escape instead:

* the C0 controls U+0000-U+001F, DEL U+007F and the C1 controls U+0080-U+009F, as ``\\xNN``
  (``\\n``, ``\\r`` and ``\\t`` in their short forms). With ``keep_newlines=True`` (the default,
  for tracebacks and other blocks of lines) the newline and the tab stay as they are;
* the line and paragraph separators U+2028 and U+2029, the bidirectional marks and overrides
  (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069) and lone surrogates U+D800-U+DFFF
  (which no terminal can be sent), as ``\\uNNNN``.

Everything else, other languages and emoji included, is printed as it is. Backslashes are left
alone, so escaping is idempotent (escaping twice changes nothing) but not reversible: text that
holds a literal ``\\x1b`` prints the same as an escaped ESC. Where the exact value matters, ask
for JSON (``--json``), whose strings keep it; :func:`printable_json` makes such JSON safe to print
without changing the value it decodes to.

This module imports nothing from the package: every layer may use it at its output boundary.
"""

from __future__ import annotations

import logging

__all__ = ["UNSAFE", "PrintableFormatter", "printable", "printable_json"]

_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]

# Every code point printable() escapes (with keep_newlines=False).
UNSAFE: frozenset[int] = frozenset(
    [
        *range(0x00, 0x20),
        *range(0x7F, 0xA0),
        0x2028,
        0x2029,
        *_BIDI,
        *range(0xD800, 0xE000),
    ]
)


def _escape(code: int) -> str:
    char = chr(code)
    if char in _SHORT:
        return _SHORT[char]
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


_LINE_TABLE = {code: _escape(code) for code in UNSAFE}
_BLOCK_TABLE = {code: text for code, text in _LINE_TABLE.items() if chr(code) not in "\n\t"}
# JSON already escapes the C0 controls inside its strings; raw ones are its own indentation.
_JSON_TABLE = {code: f"\\u{code:04x}" for code in UNSAFE if code >= 0x7F}


def printable(text: object, *, keep_newlines: bool = True) -> str:
    """Return ``text`` with every character that could steer a terminal written as an escape.

    ``keep_newlines=False`` escapes the newline and the tab too: use it for a value that must
    stay on one line (a table cell, a field of a log line). A value that is not a string is
    converted with ``str()`` first.
    """
    text = text if isinstance(text, str) else str(text)
    if text.isprintable():  # every UNSAFE character is unprintable to Python: nothing to escape
        return text
    return text.translate(_BLOCK_TABLE if keep_newlines else _LINE_TABLE)


def printable_json(text: str) -> str:
    """Return JSON text (as ``json.dumps`` writes it) safe to print, decoding to the same value.

    ``json.dumps(..., ensure_ascii=False)`` escapes the C0 controls of a string but leaves DEL,
    the C1 controls, the separators and the bidirectional overrides raw; this writes each of them
    as a JSON ``\\uNNNN`` escape. Characters outside strings are never among them.
    """
    return text.translate(_JSON_TABLE)


class PrintableFormatter(logging.Formatter):
    """A log formatter whose lines (messages, arguments and tracebacks) pass :func:`printable`.

    ``runjobs`` uses it for the handler it installs; a project that configures ``LOGGING`` for
    ``django_durable_jobs`` itself can name it as its handler's formatter class. The newlines of
    a traceback are kept.
    """

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))
