"""The job list's two actions, *Request cancellation* and *Request retry*, and what they say.

Each action asks :class:`DurableJobStore` (the only writer) once per selected row, in list order,
and keeps what it answered: a :class:`~django_durable_jobs.values.RequestResult`, or the
``JobError`` it refused with. The messages are worded from those answers alone: nothing here
looks at a job's status before or after, or reads a job again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from django.contrib import admin, messages
from django.utils.translation import ngettext

from ..rules import validation
from ..rules.conf import jobs_settings
from ..rules.errors import JobError, NotReclaimable
from ..rules.values import RequestResult
from ..rules.vocabulary import RequestAnswer
from ..store import DurableJobStore

__all__ = ["RequestActions", "cancellation_messages", "retry_messages"]

Answered = Sequence[tuple[Any, RequestResult | JobError]]  # (job id, what the store answered)
Message = tuple[int, str]  # (a django.contrib.messages level, the text)

LISTED_IDS = 10


class RequestActions:
    """The actions of a job admin, each gated by its permission (``durable_jobs.cancel_job``,
    ``durable_jobs.retry_job``)."""

    def has_cancel_job_permission(self, request) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.cancel_job")

    def has_retry_job_permission(self, request) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.retry_job")

    @admin.action(description="Request cancellation", permissions=["cancel_job"])
    def request_cancellation(self, request, queryset) -> None:
        ask = DurableJobStore.request_cancel_result
        self._request_each(request, queryset, ask, cancellation_messages)

    @admin.action(description="Request retry", permissions=["retry_job"])
    def request_retry(self, request, queryset) -> None:
        self._request_each(request, queryset, DurableJobStore.request_retry_result, retry_messages)

    def _request_each(
        self,
        request,
        queryset,
        ask: Callable[[DurableJobStore, Any], RequestResult],
        word: Callable[[Answered], list[Message]],
    ) -> None:
        """Ask the store once per selected job, oldest first, and tell the user what it said."""
        actor = f"admin:{request.user.get_username()}"[: validation.NAME_MAX]
        store = DurableJobStore(actor=actor, using=jobs_settings.DATABASE)
        answered = []
        for pk in queryset.order_by("created_at", "id").values_list("pk", flat=True):
            try:
                answered.append((pk, ask(store, pk)))
            except JobError as exc:
                answered.append((pk, exc))
        for level, text in word(answered):
            self.message_user(request, text, level)


# -- the messages --------------------------------------------------------------------------------


def cancellation_messages(answered: Answered) -> list[Message]:
    """Return what *Request cancellation* says: a summary, then one error per failed request."""

    def kind(answer: RequestResult | JobError) -> str:
        if isinstance(answer, JobError):
            return "failed"
        if answer.answer == RequestAnswer.CANCELLED_NOW:
            return "at once"
        return "recorded" if answer.accepted else "finished"

    groups = _grouped(answered, kind)
    at_once, recorded = groups["at once"], groups["recorded"]
    total = len(at_once) + len(recorded)
    parts = [
        _n(
            total,
            "%(count)d cancellation request recorded",
            "%(count)d cancellation requests recorded",
        ),
        *_clause(
            at_once,
            "%(count)d pending job was cancelled at once",
            "%(count)d pending jobs were cancelled at once",
        ),
        *_clause(
            recorded,
            "%(count)d running job will stop when the owner sees the request",
            "%(count)d running jobs will stop when the owner sees the request",
        ),
        *_clause(
            groups["finished"],
            "%(count)d job was already finished and kept its result",
            "%(count)d jobs were already finished and kept their results",
        ),
    ]
    level = messages.SUCCESS if total else messages.WARNING
    return [(level, "; ".join(parts) + "."), *_failures(groups["failed"])]


def retry_messages(answered: Answered) -> list[Message]:
    """Return what *Request retry* says: a summary, one warning per refusal, one error per
    failed request."""

    def kind(answer: RequestResult | JobError) -> str:
        if isinstance(answer, NotReclaimable):
            return "refused"
        if isinstance(answer, JobError):
            return "failed"
        return "recorded" if answer.accepted else "not ended"

    groups = _grouped(answered, kind)
    recorded, refused = groups["recorded"], groups["refused"]
    summary = _n(
        len(recorded), "%(count)d retry request recorded", "%(count)d retry requests recorded"
    )
    parts = [
        summary + (f" ({_ids(recorded)})" if recorded else ""),
        *_clause(
            groups["not ended"],
            "%(count)d job has not ended yet and needs no retry",
            "%(count)d jobs have not ended yet and need no retry",
        ),
    ]
    if refused:
        parts.append(
            _n(len(refused), "%(count)d retry was refused", "%(count)d retries were refused")
        )
    level = messages.SUCCESS if recorded else messages.WARNING
    return [
        (level, "; ".join(parts) + "."),
        *((messages.WARNING, f"Retry refused for job {pk}: {exc.message}") for pk, exc in refused),
        *_failures(groups["failed"]),
    ]


def _grouped(answered: Answered, kind: Callable[[Any], str]) -> dict[str, list[tuple]]:
    groups: dict[str, list[tuple]] = defaultdict(list)
    for pk, answer in answered:
        groups[kind(answer)].append((pk, answer))
    return groups


def _failures(failed: list[tuple]) -> list[Message]:
    return [(messages.ERROR, f"Job {pk}: {exc}") for pk, exc in failed]


def _clause(rows: list[tuple], singular: str, plural: str) -> list[str]:
    """Return ``["<n> <jobs> <what> (<ids>)"]``, or nothing when there are no rows."""
    return [f"{_n(len(rows), singular, plural)} ({_ids(rows)})"] if rows else []


def _ids(rows: list[tuple]) -> str:
    shown = ", ".join(str(pk) for pk, _ in rows[:LISTED_IDS])
    return shown + (f" and {len(rows) - LISTED_IDS} more" if len(rows) > LISTED_IDS else "")


def _n(count: int, singular: str, plural: str) -> str:
    """Return ``singular`` or ``plural`` (each with ``%(count)d``) as ``count`` asks.

    Through ``ngettext``: a translation picks the form its language needs for ``count``.
    """
    return ngettext(singular, plural, count) % {"count": count}
