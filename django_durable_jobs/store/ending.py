"""Ending an attempt: the only code that does, for every way an attempt ends.

* :func:`record` ends many attempts in one transaction (the worker's and ``JobManager``'s path);
  ``complete``, ``fail`` and ``cancel`` are one-item calls of it (:func:`end_one`);
* :func:`end_rows` writes the ending of rows already locked and fenced (``record`` and the atomic
  domain writes), each with its ``JobAttempt`` history row, and schedules a failure's automatic
  retry, once, here;
* :func:`supersede` records the interrupted attempt a takeover replaces;
* :func:`release` hands back claims whose executor never started.

Whether a row may still be ended is the fence's to say (``store/fence.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from django.core.serializers.json import DjangoJSONEncoder

from ..database.dbvendor import takes_json_rows
from ..database.transactions import bounded_atomic
from ..models import Job, JobAttempt
from ..observability.history import fenced_writes
from ..rules import registry, validation
from ..rules.errors import InputInvalid
from ..rules.outcome import ERROR_CLASS_MAX, TRACEBACK_MAX_CHARS, refused_result, storable_message
from ..rules.values import Lease, Outcome, Recorded
from ..rules.vocabulary import AttemptOutcomeChoice, JobStatus
from . import client as client_room
from . import fence, workflows
from .client import Client
from .sql.rows import ATTNAMES, DECREMENT, JobRows, insert_attempts, new_attempt

INTERRUPTED_ERROR = "The lease expired before the attempt ended; its outcome is unknown."
RELEASED = AttemptOutcomeChoice.RELEASED
RELEASED_ERROR = "Released unstarted by a stopping worker; no code of this attempt ran."
NO_MESSAGE = "The attempt failed without a message saying why."

# What a pending row looks like before any claim (the epoch stays where the claim put it). A
# retry request goes too: pending work needs none, and a claim of pending work that kept one
# would leave it on the running job, making it claimable again by itself once its lease expired.
_UNCLAIMED = {
    "status": JobStatus.PENDING,
    "owner_id": None,
    "lease_expires_at": None,
    "heartbeat_at": None,
    "claimed_at": None,
    "claimed_by": "",
    "attempts": 0,
    "retry_requested_at": None,
}


# -- the attempt's history row --------------------------------------------------------------------


def attempt_of(
    job: Job,
    now: datetime,
    outcome: str,
    error: str | None,
    *,
    error_class: str = "",
    traceback: str | None = None,
) -> JobAttempt:
    """Return the (unsaved) history row of ``job``'s attempt, ended now with ``outcome``.

    A failure an exception caused also keeps the exception's class path and traceback.
    """
    return new_attempt(
        job_id=job.pk,
        epoch=job.fencing_epoch,
        owner_id=job.owner_id,
        claimed_by=job.claimed_by or "",
        started_at=job.claimed_at,
        ended_at=now,
        outcome=outcome,
        error=error,
        error_class=error_class,
        traceback=traceback,
        snapshot=snapshot(job),
    )


_ENCODER = DjangoJSONEncoder()
_PLAIN = (str, int, float)  # a status or another choice is a str already


def snapshot(job: Job) -> dict[str, Any]:
    """Return a JSON-safe image of every column of ``job`` (times and ids as Django encodes them)."""
    row = {name: getattr(job, name) for name in ATTNAMES}
    for name, value in row.items():
        if value is None or isinstance(value, _PLAIN):
            continue
        if type(value) is datetime:
            row[name] = _datetime_text(value)
        elif type(value) is UUID:
            row[name] = str(value)
        else:
            row[name] = _ENCODER.default(value)
    return row


def _datetime_text(value: datetime) -> str:
    """Return ``value`` as ``DjangoJSONEncoder`` writes it (milliseconds, UTC as ``Z``) without
    its chain of type tests."""
    if value.tzinfo is UTC:
        return _utc_text(value)
    return _text(value)


@functools.lru_cache(maxsize=4096)
def _utc_text(value: datetime) -> str:
    """Return :func:`_text` of a UTC time, remembered: the rows of a flush share most of their
    times (their ending, their claim's; often their submission's), and ``isoformat`` cost about
    1.5 µs a time, a tenth of a flush's CPU. Keyed by UTC times only: equal times in two zones
    compare equal but are written apart."""
    return _text(value)


def _text(value: datetime) -> str:
    text = value.isoformat()
    if value.microsecond:
        text = text[:23] + text[26:]
    if text.endswith("+00:00"):
        text = text[:-6] + "Z"
    return text


def supersede(client: Client, row: Job, now: datetime) -> None:
    """Record the attempt a takeover of the locked ``row`` replaces, unless it has its row.

    An expired attempt's outcome is uncertain: ``interrupted``. (A released attempt already has
    its history row.)
    """
    if row.status != JobStatus.RUNNING:
        return
    recorded = JobAttempt.objects.using(client.using).filter(job_id=row.pk, epoch=row.fencing_epoch)
    if not recorded.exists():
        attempt = attempt_of(row, now, AttemptOutcomeChoice.INTERRUPTED, INTERRUPTED_ERROR)
        attempt.save(using=client.using, force_insert=True)


# -- ending attempts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ending:
    """One attempt to end: its lease, its locked row (already showing the ending), and what the
    history row keeps besides. ``fields`` are the columns the ending sets besides ``status``."""

    lease: Lease
    row: Job
    fields: tuple[str, ...] = ()
    error_class: str = ""
    traceback: str | None = None


def end_rows(
    client: Client, endings: Sequence[Ending], now: datetime, *, retry: bool = True
) -> None:
    """Write the endings of rows locked and fenced in this transaction, with their history rows.

    Each row changes in one statement under the same fence in SQL. A failed attempt gets an
    automatic retry when its operation's policy allows (unless ``retry`` is False: a
    finalization's bookkeeping decided the job's fate).
    """
    if not endings:
        return
    each: dict[str, dict[Any, Any]] = {}
    for ending in endings:
        ending.row.completed_at = now
        for name in ("status", *ending.fields):
            each.setdefault(name, {})[ending.row.pk] = getattr(ending.row, name)
    matched = JobRows(client.using, client.scope).update_fenced(
        [ending.lease for ending in endings],
        {"completed_at": now},
        owner_id=client.owner_id,
        unexpired_at=now,
        each=each,
    )
    if matched != len(endings):  # the rows are locked and checked: this cannot happen
        raise fence.changed_under_lock("ending attempts")
    _ended(client, endings, now, retry=retry)


def _ended(client: Client, endings: Sequence[Ending], now: datetime, *, retry: bool) -> None:
    """Write what follows the endings of rows just ended in this transaction: each attempt's
    history row, a failure's automatic retry (unless ``retry`` is False) and the hand-off to
    workflow children."""
    history = [
        attempt_of(
            ending.row,
            now,
            ending.row.status,
            ending.row.error,
            error_class=ending.error_class,
            traceback=ending.traceback,
        )
        for ending in endings
    ]
    insert_attempts(client.using, history)
    retrying = set()
    if retry:
        for ending in endings:
            if ending.row.status == JobStatus.FAILED and schedule_retry(client, ending.row, now):
                retrying.add(ending.row.pk)
    # A workflow's children hear of their parents' endings in this same fenced transaction.
    workflows.hand_off(client, (ending.row for ending in endings), now, retrying=retrying)


def schedule_retry(client: Client, row: Job, now: datetime) -> bool:
    """Ask for another attempt after the backoff when the operation's retry policy allows.

    Return True when it did: the job has not failed for good.
    """
    spec = registry.get(row.operation)
    policy = spec.retry if spec else None
    if policy is None or not policy.allows_another(row.attempts):
        return False
    due = now + timedelta(seconds=policy.delay(row.attempts))
    Job.objects.using(client.using).filter(pk=row.pk).update(retry_requested_at=now, run_after=due)
    return True


def record(
    client: Client, outcomes: Sequence[Outcome], *, write: str = "outcome"
) -> list[Recorded]:
    """End many attempts in one transaction; return, per outcome, what was written.

    An outcome that cannot be stored as given ends its own attempt as ``failed``, saying why
    (:func:`storable`); only a value that is not an outcome refuses the whole call.
    """
    given = validation.listed(outcomes, "outcomes")
    for outcome in given:
        check_kind(outcome)
        fence.lease_of(outcome.lease)
    return _record(client, given, [storable(outcome) for outcome in given], write)


def end_one(client: Client, outcome: Outcome, *, write: str) -> None:
    """End one attempt as :func:`record` does, raising what refused it.

    The outcome is stored as given: the single calls refuse what cannot be stored before they
    build it. ``write`` names the write in the history of fenced writes.
    """
    fence.check_lease(client, outcome.lease)
    (recorded,) = _record(client, [outcome], [outcome], write)
    if recorded.refusal is not None:
        raise recorded.refusal


def _record(
    client: Client, given: list[Outcome], outcomes: list[Outcome], write: str
) -> list[Recorded]:
    if not outcomes:
        return []
    if _ends_in_one_statement(client, outcomes):
        return _record_returning(client, given, outcomes, write)
    recorded: list[Recorded] = []
    with bounded_atomic(client.using):
        now = client_room.now(client)
        rows = JobRows(client.using, client.scope).get(
            (o.lease.job_id for o in outcomes), lock=True
        )
        endings: list[Ending] = []
        for asked, outcome in zip(given, outcomes, strict=True):
            row = rows.get(outcome.lease.job_id)
            if not fence.holds(client, outcome.lease, row, now):
                fenced_writes(write, [outcome.lease], accepted=False, at=now, why="fence")
                recorded.append(Recorded(asked, None, fence.loss_of(client, outcome.lease, row)))
                continue
            if (
                outcome.status == JobStatus.CANCELLED
                and outcome.error is None
                and row.cancellation_requested_at is None
            ):
                recorded.append(Recorded(asked, None, unrequested(row)))
                continue
            endings.append(_ending(outcome, row))
            recorded.append(Recorded(asked, row.status, error=row.error))
        end_rows(client, endings, now)
    fenced_writes(write, (ending.lease for ending in endings), accepted=True, at=now)
    return recorded


def _ends_in_one_statement(client: Client, outcomes: list[Outcome]) -> bool:
    """Return True when ``outcomes`` can end their rows without reading them first.

    On PostgreSQL, outcomes that complete or fail, each of its own job: what they write does not
    depend on the row, so the fenced UPDATE can return the rows it ended instead of a locking
    read before it: a round trip and a statement less a flush (measured: a flush of ten about a
    fifth faster, of one about a tenth). A cancellation depends on the row's request; a job
    given twice is ended by the first of its outcomes.
    """
    if not takes_json_rows(client.using):
        return False
    ids = set()
    for outcome in outcomes:
        if outcome.status not in _WRITTEN_AS_IS:
            return False
        ids.add(outcome.lease.job_id)
    return len(ids) == len(outcomes)


_WRITTEN_AS_IS = (JobStatus.COMPLETE, JobStatus.FAILED)
# The fields an outcome that completes or fails may write (``_written``; each writes some).
_END_FIELDS = ("status", "result", "progress", "error")


def _record_returning(
    client: Client, given: list[Outcome], outcomes: list[Outcome], write: str
) -> list[Recorded]:
    """``_record`` for outcomes that complete or fail, each of its own job (PostgreSQL).

    One fenced UPDATE writes every ending and returns the rows it ended; only the outcomes it
    refused are read again, to say why.
    """
    rows = JobRows(client.using, client.scope)
    each: dict[str, dict[Any, Any]] = {name: {} for name in _END_FIELDS}
    mine = [outcome.lease for outcome in outcomes if fence.issued_to(client, outcome.lease)]
    # None cancels: what each outcome writes does not depend on its row.
    written = {o.lease.job_id: _written(o, requested=False) for o in outcomes}
    for job_id, values in written.items():
        for name, value in values.items():
            each[name][job_id] = value
    recorded: list[Recorded] = []
    with bounded_atomic(client.using):
        now = client_room.now(client)
        ended = {
            row.pk: row
            for row in rows.end_fenced(
                mine, {"completed_at": now}, owner_id=client.owner_id, unexpired_at=now, each=each
            )
        }
        missed = [o.lease.job_id for o in outcomes if o.lease.job_id not in ended]
        found = rows.get(missed) if missed else {}
        endings: list[Ending] = []
        for asked, outcome in zip(given, outcomes, strict=True):
            lease = outcome.lease
            row = ended.get(lease.job_id)
            if row is None:
                fenced_writes(write, [lease], accepted=False, at=now, why="fence")
                refusal = fence.loss_of(client, lease, found.get(lease.job_id))
                recorded.append(Recorded(asked, None, refusal))
                continue
            endings.append(_ending_of(outcome, row, written[lease.job_id]))
            recorded.append(Recorded(asked, row.status, error=row.error))
        _ended(client, endings, now, retry=True)
    fenced_writes(write, (ending.lease for ending in endings), accepted=True, at=now)
    return recorded


def _ending(outcome: Outcome, row: Job) -> Ending:
    """Set on ``row`` the values that end its attempt with ``outcome``; return the ending."""
    written = _written(outcome, requested=row.cancellation_requested_at is not None)
    for name, value in written.items():
        setattr(row, name, value)
    return _ending_of(outcome, row, written)


def _ending_of(outcome: Outcome, row: Job, written: dict[str, Any]) -> Ending:
    """Return the ending of ``row``'s attempt with ``outcome``, the row holding ``written``."""
    fields = tuple(name for name in written if name != "status")
    return Ending(outcome.lease, row, fields, outcome.error_class, outcome.traceback)


def _written(outcome: Outcome, *, requested: bool) -> dict[str, Any]:
    """Return the columns (by field name) that ending an attempt with ``outcome`` sets, for a row
    with a recorded cancellation request or not (``requested``)."""
    if outcome.status == JobStatus.COMPLETE:
        return {"status": JobStatus.COMPLETE, "result": outcome.result_json, "progress": 100.0}
    if outcome.status == JobStatus.CANCELLED and requested:
        return {"status": JobStatus.CANCELLED}
    # A failure; a stop without a request too, with Outcome.stopped's message.
    return {"status": JobStatus.FAILED, "error": outcome.error}


def unrequested(row: Job) -> InputInvalid:
    """Return the refusal of a cancellation acknowledged where none was requested."""
    return InputInvalid(
        f"Job {row.pk} has no cancellation request to acknowledge; use fail() to end it, or "
        f"request_cancel() first."
    )


# -- what an outcome may carry --------------------------------------------------------------------


def check_kind(outcome: Any) -> None:
    """Refuse anything but an outcome built by one of ``Outcome``'s constructors."""
    if not isinstance(outcome, Outcome) or outcome.status not in (
        JobStatus.COMPLETE,
        JobStatus.FAILED,
        JobStatus.CANCELLED,
    ):
        raise InputInvalid(
            "record_outcomes() takes Outcome.completed(...), Outcome.failed(...) or "
            "Outcome.cancelled(...) values."
        )


def storable(outcome: Outcome) -> Outcome:
    """Return ``outcome``, or, when it cannot be stored as given, the failure that says why.

    The failure keeps what can be kept: an exception's class path and traceback when they are
    storable, the message made storable (``storable_message``).
    """
    if outcome.status == JobStatus.COMPLETE:
        try:
            validation.json_text(outcome.result_json, "result")
        except InputInvalid as exc:
            return Outcome.failed(outcome.lease, refused_result(exc))
        return outcome
    if outcome.status != JobStatus.FAILED:
        return outcome
    error = outcome.error
    if not isinstance(error, str) or not error.strip():
        error = NO_MESSAGE
    elif not _storable_text(error):
        error = storable_message(error)  # lone surrogates and NUL replaced, cut to length
    try:
        _check_failure_details(outcome)
    except InputInvalid:
        return Outcome.failed(outcome.lease, error)
    if error == outcome.error:
        return outcome
    return Outcome.failed(
        outcome.lease, error, error_class=outcome.error_class, traceback=outcome.traceback
    )


def _storable_text(text: str) -> bool:
    """Return True when every database stores ``text`` as given, within the payload cap."""
    if "\x00" in text:  # PostgreSQL's text columns hold no NUL
        return False
    try:
        validation.check_size(validation.encodable(text, "error message"), "error message")
    except InputInvalid:
        return False
    return True


def _check_failure_details(outcome: Outcome) -> None:
    """Refuse an exception's class path or traceback that its history row could not hold."""
    if not isinstance(outcome.error_class, str) or len(outcome.error_class) > ERROR_CLASS_MAX:
        raise InputInvalid(
            f"A failure's error class is a class path of at most {ERROR_CLASS_MAX} characters."
        )
    text = outcome.traceback
    if text is None:
        return
    if not isinstance(text, str) or "\x00" in text:
        raise InputInvalid("A failure's traceback is text without NUL characters, or None.")
    validation.encodable(text, "traceback")
    if len(text) > TRACEBACK_MAX_CHARS:
        raise InputInvalid(
            f"A failure's traceback is {len(text)} characters, over {TRACEBACK_MAX_CHARS}; "
            f"keep its head and tail (traceback_text(exc) does)."
        )


# -- releasing ------------------------------------------------------------------------------------


def release(client: Client, leases: Sequence[Lease]) -> int:
    """Hand back claims whose executor never started; return how many were released."""
    leases = list(
        dict.fromkeys(fence.lease_of(lease) for lease in validation.listed(leases, "leases"))
    )
    if not leases:
        return 0
    with bounded_atomic(client.using):
        now = client_room.now(client)
        rows = JobRows(client.using, client.scope).get(
            (lease.job_id for lease in leases), lock=True
        )
        held = [
            (lease, rows[lease.job_id])
            for lease in leases
            if fence.releasable(client, lease, rows.get(lease.job_id))
        ]
        kept = {lease for lease, _ in held}
        gone = (lease for lease in leases if lease not in kept)
        fenced_writes("release", gone, accepted=False, at=now, why="fence")
        history = [attempt_of(row, now, RELEASED, RELEASED_ERROR) for _, row in held]
        first = [lease for lease, row in held if row.attempts == 1]  # claimed from pending
        again = [lease for lease, row in held if row.attempts > 1]
        _release_group(client, first, **_UNCLAIMED)
        _release_group(
            client,
            again,
            lease_expires_at=now,
            heartbeat_at=now,
            retry_requested_at=now,
            attempts=DECREMENT,
        )
        insert_attempts(client.using, history)
    fenced_writes("release", (lease for lease, _ in held), accepted=True, at=now)
    return len(held)


def _release_group(client: Client, leases: list[Lease], **changes: Any) -> None:
    if not leases:
        return
    matched = JobRows(client.using, client.scope).update_fenced(
        leases, changes, owner_id=client.owner_id
    )
    if matched != len(leases):  # the rows are locked and checked: this cannot happen
        raise fence.changed_under_lock("releasing")
