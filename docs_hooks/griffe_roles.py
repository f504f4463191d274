"""A Griffe extension: the docstrings' reStructuredText habits, in Markdown.

The code's docstrings are written for ``help()`` and Sphinx alike. Markdown has no roles, so
``:class:`~django_durable_jobs.store.DurableJobStore``` would show its role verbatim: it becomes
inline code (a leading ``~`` keeps only the last dotted part, as Sphinx does). A paragraph that
ends with ``::`` introduces an indented literal block, which Markdown already shows as code: the
``::`` becomes ``:``.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE_RE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj):`(~?)([^`]+)`")
LITERAL_RE = re.compile(r"::\n(?=\n[ \t])")


def strip_roles(text: str) -> str:
    """Return ``text`` with every Sphinx cross-reference role written as a code span."""

    def replace(match: re.Match) -> str:
        target = match.group(2)
        return f"`{target.rsplit('.', 1)[-1] if match.group(1) else target}`"

    return ROLE_RE.sub(replace, text)


def markdown_of(text: str) -> str:
    """Return a reStructuredText-flavoured docstring as Markdown (roles, ``::`` blocks)."""
    return LITERAL_RE.sub(":\n", strip_roles(text))


class SphinxRoles(griffe.Extension):
    """Rewrite every docstring once the object tree is built."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_of(obj.docstring.value)
