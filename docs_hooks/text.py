"""Small Markdown helpers shared by the generators."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

_ROLE_RE = re.compile(r":(?:func|class|meth|mod|attr|data|exc):`~?([^`]+)`")
_DOUBLE_RE = re.compile(r"``(.+?)``")


def rst_to_md(text: str) -> str:
    """Return docstring text in Markdown: ``double`` backticks and ``:func:`` roles as code."""
    text = _ROLE_RE.sub(lambda m: f"`{m.group(1)}`", text)
    text = _DOUBLE_RE.sub(lambda m: f"`{m.group(1)}`", text)
    return " ".join(text.split())


def first_paragraph(doc: str | None) -> str:
    """Return the first paragraph of a docstring, on one line ("" when there is none)."""
    if not doc:
        return ""
    return rst_to_md(doc.strip().split("\n\n")[0])


def cell(text: Any) -> str:
    """Return ``text`` fit for a Markdown table cell (pipes escaped, on one line)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def code(text: Any) -> str:
    """Return ``text`` as inline code, safe in a table cell."""
    text = str(text).replace("|", "\\|")
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def py_literal(value: Any) -> str:
    """Return a setting's value as Python source, the way a settings file would spell it."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        return f"{value:_}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Return a Markdown table; cells are written as given (use :func:`cell` or :func:`code`)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def docstring_entries(doc: str) -> dict[str, str]:
    """Return ``NAME`` → text from a docstring's definition block.

    The block reads like ``conf.py``'s and ``quotas.py``'s::

        ``NAME``      default — what it means, possibly
                      continued on indented lines.

    Only the text after the first " — " is kept: the default comes from the code itself.
    """
    entries: dict[str, str] = {}
    current = None
    for line in doc.splitlines():
        start = re.match(r"^``([A-Z][A-Z0-9_]*)``\s+(.*)$", line)
        if start:
            current = start.group(1)
            entries[current] = start.group(2)
        elif current and line.startswith(" ") and line.strip():
            entries[current] += " " + line.strip()
        else:
            current = None
    meanings = {}
    for name, text in entries.items():
        meaning = rst_to_md(text.split(" — ", 1)[1] if " — " in text else text)
        meanings[name] = meaning[:1].upper() + meaning[1:]
    return meanings
