"""JSON of awkward shapes for the depth and display tests: nested, maximal, written outside the app.

``maximal_text()`` is the biggest input the app accepts: exactly ``MAX_PAYLOAD_BYTES`` of JSON,
nested ``MAX_JSON_DEPTH`` levels deep, wide (thousands of branches) and holding quotes, markup and
non-ASCII text. ``outside_row()`` writes a job row as something other than the app would (an
import, a hand-made fix): any text, any flag, the hash right or wrong.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django_durable_jobs.models import Job
from django_durable_jobs.rules.jsontext import MAX_JSON_DEPTH
from django_durable_jobs.rules.vocabulary import proposal_sha256

MAX_BYTES = 1_048_576  # the default DURABLE_JOBS['MAX_PAYLOAD_BYTES']


def nested_text(depth: int, leaf: str = "1") -> str:
    """Return ``depth`` arrays around ``leaf``: ``[[1]]`` for 2."""
    return "[" * depth + leaf + "]" * depth


def nested_value(depth: int, leaf: Any = 1) -> Any:
    """Return ``depth`` lists around ``leaf``, built without recursion."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def branch(depth: int) -> str:
    """Return one branch ``depth`` levels deep: objects outside, arrays inside, text at the leaf."""
    objects = depth // 2
    arrays = depth - objects
    leaf = '"Zoë says \\"<b>hi</b>\\" 🦄"'
    return '{"k":' * objects + "[" * arrays + leaf + "]" * arrays + "}" * objects


def maximal_text(size: int = MAX_BYTES, depth: int = MAX_JSON_DEPTH) -> str:
    """Return exactly ``size`` UTF-8 bytes of valid JSON, nested exactly ``depth`` levels.

    A top-level array of branches ``depth - 1`` deep, padded with one string to the byte.
    """
    one = branch(depth - 1)
    width = len(one.encode("utf-8")) + 1
    count = (size - 2 - 64) // width
    body = ",".join([one] * count)
    used = len(body.encode("utf-8")) + 2 + 3  # the brackets, and ',""' around the padding
    text = "[" + body + ',"' + "x" * (size - used) + '"]'
    assert len(text.encode("utf-8")) == size
    return text


def outside_row(
    text: str | None,
    *,
    key: str,
    status: str = "pending",
    checked: bool | None = None,
    digest: str | None = None,
    now: datetime,
    scope: str = "default",
    operation: str = "tests.noop",
    **columns: Any,
) -> Job:
    """Return an unsaved job row as something other than the app writes it.

    ``digest`` defaults to the text's real SHA-256; ``checked`` to NULL (never checked).
    """
    if digest is None:
        digest = proposal_sha256(text) if text is not None else ""
    return Job(
        id=uuid.uuid4(),
        operation=operation,
        status=status,
        scope=scope,
        idempotency_key=key,
        proposal=text,
        proposal_hash=digest,
        proposal_checked=checked,
        created_at=now,
        run_after=now,
        **columns,
    )


def deep_outside_rows(deep: str, *, now: datetime, **common: Any) -> dict[str, Job]:
    """Return unsaved rows written outside the app around the text ``deep``.

    ``unchecked`` and ``checked`` are pending with ``deep`` as input (flag NULL and set);
    ``done`` is complete with ``deep`` as checkpoint and result.
    """
    return {
        "unchecked": outside_row(deep, key="unchecked", now=now, **common),
        "checked": outside_row(deep, key="checked", checked=True, now=now, **common),
        "done": outside_row(
            "{}",
            key="done",
            status="complete",
            checked=True,
            now=now,
            checkpoint=deep,
            result=deep,
            **common,
        ),
    }
