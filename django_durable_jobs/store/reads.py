"""Reading jobs: get, list and signed keyset pages."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.core import signing
from django.db.models import Q

from .. import validation
from ..errors import InputInvalid, ScopeMismatch
from ..execution import Execution
from ..models import Job
from ..transactions import check_execution
from ..values import CandidatePage, PageQuery
from ..vocabulary import OWNERSHIP_STATES, JobStatus
from .base import StoreBase

CURSOR_SALT = "django_durable_jobs.store.list_page"
PAGE_LIMIT_MAX = 100
PAGE_BYTES_MAX = 1_048_576


class ReadMixin(StoreBase):
    """Read jobs in the store's scope; never write."""

    def get(self, job_id: Any) -> Job | None:
        """Return the job in this store's scope, with ``ownership`` assessed, or None."""
        pk = validation.job_id(job_id)
        return self._annotate(self._jobs().filter(pk=pk).first())

    def list(self, status: str | None = None) -> list[Job]:
        """Return the jobs in scope, oldest first, optionally of one status."""
        rows = self._jobs()
        if status is not None:
            rows = rows.filter(status=_status(status))
        now = self._now()
        return [self._annotate(row, now) for row in rows.order_by("created_at", "id")]

    def list_page(self, query: PageQuery, execution: Execution) -> CandidatePage:
        """Return one bounded keyset page of an operation's jobs, ordered by (created_at, id)."""
        if not isinstance(query, PageQuery):
            raise InputInvalid("list_page() takes a PageQuery.")
        self._check_identity(execution)
        check_execution(execution)
        identity = execution.identity
        if self.scope is None or self.actor is None:
            raise ScopeMismatch("list_page() needs a store with both a scope and an actor.")
        if identity.actor != self.actor:
            raise ScopeMismatch(
                f"The execution's actor {identity.actor!r} is not this store's ({self.actor!r})."
            )
        op = validation.operation(query.operation)
        if op != identity.operation:
            raise ScopeMismatch(f"The execution is for {identity.operation!r}, not {op!r}.")
        status = None if query.status is None else _status(query.status)
        limit, cap = query.limit, query.max_payload_bytes
        validation.whole(limit, "limit", 1, PAGE_LIMIT_MAX)
        validation.whole(cap, "max_payload_bytes", 1, PAGE_BYTES_MAX)
        binding = {"s": self.scope, "a": self.actor, "o": op, "st": status, "l": limit, "c": cap}
        rows = self._jobs().filter(operation=op)
        if status is not None:
            rows = rows.filter(status=status)
        page, has_more, cursor = _keyset_page(rows, binding, limit, query.after)
        for row in page:
            size = sum(validation.utf8_size(t) for t in (row.proposal, row.checkpoint, row.result))
            if size > cap:
                raise InputInvalid(
                    f"Job {row.pk} carries {size} UTF-8 bytes, over this page's cap of {cap}; "
                    f"raise max_payload_bytes (at most {PAGE_BYTES_MAX}) or read it with get()."
                )
        now = self._now()
        return CandidatePage(
            candidates=[self._annotate(row, now) for row in page],
            scanned_count=len(page),
            has_more=has_more,
            next_cursor=cursor,
        )

    def page(
        self,
        *,
        operation: str | None = None,
        status: str | None = None,
        ownership: str | None = None,
        limit: int = 25,
        after: str | None = None,
    ) -> CandidatePage:
        """Return one keyset page of this scope's jobs, oldest first, for triage surfaces.

        Unlike :meth:`list_page` it needs no execution and may span operations or filter by
        ownership (computed by the database). ``next_cursor`` is signed and bound to this store's
        scope and the filters; any other use, or an altered cursor, is ``ScopeMismatch``.
        """
        validation.whole(limit, "limit", 1, PAGE_LIMIT_MAX)
        rows = self._jobs()
        if operation is not None:
            rows = rows.filter(operation=validation.operation(operation))
        if status is not None:
            rows = rows.filter(status=_status(status))
        now = self._now()
        if ownership is not None:
            if ownership not in OWNERSHIP_STATES:
                raise InputInvalid(
                    f"Unknown ownership {ownership!r}; use one of {', '.join(OWNERSHIP_STATES)}."
                )
            rows = rows.with_ownership_state(ownership, now)
        binding = {"s": self.scope, "o": operation, "st": status, "ow": ownership, "l": limit}
        page, has_more, cursor = _keyset_page(rows, binding, limit, after)
        return CandidatePage(
            candidates=[self._annotate(row, now) for row in page],
            scanned_count=len(page),
            has_more=has_more,
            next_cursor=cursor,
        )


def _keyset_page(rows, binding: dict[str, Any], limit: int, after: Any) -> tuple[list, bool, Any]:
    """Return (rows after the cursor, whether more follow, the signed cursor of the next page)."""
    if after is not None:
        created, last_id = _read_cursor(after, binding)
        rows = rows.filter(Q(created_at__gt=created) | Q(created_at=created, id__gt=last_id))
    page = list(rows.order_by("created_at", "id")[: limit + 1])
    has_more = len(page) > limit
    page = page[:limit]
    cursor = None
    if has_more:
        last = page[-1]
        cursor = signing.dumps(
            {**binding, "t": last.created_at.isoformat(), "i": str(last.pk)}, salt=CURSOR_SALT
        )
    return page, has_more, cursor


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
