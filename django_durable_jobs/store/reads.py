"""Reading jobs: get, list and signed keyset pages. Nothing here writes."""

from __future__ import annotations

import builtins
import uuid
from datetime import datetime
from typing import Any

from django.core import signing
from django.db.models import Q

from ..database.transactions import check_execution
from ..models import Job
from ..rules import validation
from ..rules.errors import InputInvalid, ScopeMismatch
from ..rules.execution import Execution
from ..rules.values import CandidatePage, PageQuery
from ..rules.vocabulary import OWNERSHIP_STATES, JobStatus
from .client import Client, annotate, check_identity, jobs, now

CURSOR_SALT = "django_durable_jobs.store.list_page"
PAGE_LIMIT_MAX = 100
PAGE_BYTES_MAX = 1_048_576


def get(client: Client, job_id: Any) -> Job | None:
    """Return the job in the client's scope, with ``ownership`` assessed, or None."""
    pk = validation.job_id(job_id)
    return annotate(client, jobs(client).filter(pk=pk).first())


def list(client: Client, status: str | None = None) -> builtins.list[Job]:
    """Return the jobs in scope, oldest first, optionally of one status."""
    rows = jobs(client)
    if status is not None:
        rows = rows.filter(status=_status(status))
    at = now(client)
    return [annotate(client, row, at) for row in rows.order_by("created_at", "id")]


def list_page(client: Client, query: PageQuery, execution: Execution) -> CandidatePage:
    """Return one bounded keyset page of an operation's jobs, ordered by (created_at, id)."""
    if not isinstance(query, PageQuery):
        raise InputInvalid("list_page() takes a PageQuery.")
    check_identity(client, execution)
    check_execution(execution)
    identity = execution.identity
    scope, actor = client.scope, client.actor
    if scope is None or actor is None:
        raise ScopeMismatch("list_page() needs a store with both a scope and an actor.")
    if identity.actor != actor:
        raise ScopeMismatch(
            f"The execution's actor {identity.actor!r} is not this store's ({actor!r})."
        )
    op = validation.operation(query.operation)
    if op != identity.operation:
        raise ScopeMismatch(f"The execution is for {identity.operation!r}, not {op!r}.")
    status = None if query.status is None else _status(query.status)
    limit, cap = query.limit, query.max_payload_bytes
    validation.whole(limit, "limit", 1, PAGE_LIMIT_MAX)
    validation.whole(cap, "max_payload_bytes", 1, PAGE_BYTES_MAX)
    binding = {"s": scope, "a": actor, "o": op, "st": status, "l": limit, "c": cap}
    rows = jobs(client).filter(operation=op)
    if status is not None:
        rows = rows.filter(status=status)
    found, has_more, cursor = _keyset_page(rows, binding, limit, query.after)
    for row in found:
        size = sum(validation.utf8_size(t) for t in (row.proposal, row.checkpoint, row.result))
        if size > cap:
            raise InputInvalid(
                f"Job {row.pk} carries {size} UTF-8 bytes, over this page's cap of {cap}; "
                f"raise max_payload_bytes (at most {PAGE_BYTES_MAX}) or read it with get()."
            )
    at = now(client)
    return CandidatePage(
        candidates=[annotate(client, row, at) for row in found],
        scanned_count=len(found),
        has_more=has_more,
        next_cursor=cursor,
    )


def page(
    client: Client,
    *,
    operation: str | None = None,
    status: str | None = None,
    ownership: str | None = None,
    limit: int = 25,
    after: str | None = None,
) -> CandidatePage:
    """Return one keyset page of the client's scope's jobs, oldest first, for triage surfaces.

    Unlike :func:`list_page` it needs no execution and may span operations or filter by
    ownership (computed by the database). ``next_cursor`` is signed and bound to the client's
    scope and the filters; any other use, or an altered cursor, is ``ScopeMismatch``.
    """
    validation.whole(limit, "limit", 1, PAGE_LIMIT_MAX)
    rows = jobs(client)
    if operation is not None:
        rows = rows.filter(operation=validation.operation(operation))
    if status is not None:
        rows = rows.filter(status=_status(status))
    at = now(client)
    if ownership is not None:
        if ownership not in OWNERSHIP_STATES:
            raise InputInvalid(
                f"Unknown ownership {ownership!r}; use one of {', '.join(OWNERSHIP_STATES)}."
            )
        rows = rows.with_ownership_state(ownership, at)
    binding = {"s": client.scope, "o": operation, "st": status, "ow": ownership, "l": limit}
    found, has_more, cursor = _keyset_page(rows, binding, limit, after)
    return CandidatePage(
        candidates=[annotate(client, row, at) for row in found],
        scanned_count=len(found),
        has_more=has_more,
        next_cursor=cursor,
    )


def _keyset_page(
    rows, binding: dict[str, Any], limit: int, after: Any
) -> tuple[builtins.list, bool, Any]:
    """Return (rows after the cursor, whether more follow, the signed cursor of the next page)."""
    if after is not None:
        created, last_id = _read_cursor(after, binding)
        rows = rows.filter(Q(created_at__gt=created) | Q(created_at=created, id__gt=last_id))
    found = builtins.list(rows.order_by("created_at", "id")[: limit + 1])
    has_more = len(found) > limit
    found = found[:limit]
    cursor = None
    if has_more:
        last = found[-1]
        cursor = signing.dumps(
            {**binding, "t": last.created_at.isoformat(), "i": str(last.pk)}, salt=CURSOR_SALT
        )
    return found, has_more, cursor


def _read_cursor(cursor: Any, binding: dict[str, Any]) -> tuple[datetime, uuid.UUID]:
    """Return the (created_at, id) a page cursor points after, or refuse a foreign cursor."""
    foreign = ScopeMismatch(
        "This page cursor was not issued for this caller and query (or was altered); start again "
        "without `after`."
    )
    if not isinstance(cursor, str):
        raise foreign
    try:
        data = signing.loads(cursor, salt=CURSOR_SALT)
        if not isinstance(data, dict) or {k: data.get(k) for k in binding} != binding:
            raise foreign
        return datetime.fromisoformat(data["t"]), uuid.UUID(data["i"])
    except (signing.BadSignature, KeyError, TypeError, ValueError, AttributeError):
        raise foreign from None


def _status(value: Any) -> str:
    if value not in JobStatus.values:
        raise InputInvalid(f"Unknown status {value!r}; use one of {', '.join(JobStatus.values)}.")
    return value
