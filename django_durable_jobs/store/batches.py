"""The worker's batched paths: many jobs per statement, every row still fenced.

* ``claim_batch`` takes up to ``limit`` pending jobs in one statement where the database allows it
  (``UPDATE … RETURNING`` on PostgreSQL and SQLite; one locking SELECT and one UPDATE on MariaDB)
  and hands each job back with its row loaded;
* ``record_outcomes`` ends many attempts in one transaction: each row is locked and checked
  against owner, epoch, status and an unexpired lease, updated under the same fence in SQL, and
  its history row is written in the same transaction; a row that fails its fence is reported as
  a lost lease to that job alone;
* ``renew_leases`` renews every lease a worker holds in one fenced statement;
* ``release`` hands claims whose executor never started back for any worker to take.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db.models import F

from .. import quotas, registry, validation
from ..errors import InputInvalid, LeaseLost
from ..history import fenced_verdicts, fenced_writes
from ..models import Job
from ..transactions import bounded_atomic
from ..values import Claimed, Lease, Outcome, Recorded
from ..vocabulary import AttemptOutcomeChoice, JobStatus, is_authentic_pending, proposal_defect
from .base import StoreBase, _attempt_of, _loss_of
from .batch_sql import DECREMENT, ClaimStatement, JobRows, insert_attempts
from .outcomes import ERROR_CLASS_MAX, TRACEBACK_MAX_CHARS, refused_result, storable_message
from .submissions import listed

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


class _Disagreement(Exception):
    """SQL took a row whose proposal Python finds defective: undo the statement, go row by row."""


class BatchMixin(StoreBase):
    """Claim, renew and end many attempts per round trip."""

    # -- claiming --------------------------------------------------------------------------------

    def _claim_pending_fast(
        self, build, key: tuple, now: datetime, limit: int, turn: str | None
    ) -> list[Claimed]:
        """Take up to ``limit`` intact pending jobs in claim order, unless rarer work waits.

        With a ``turn`` (a scope name, or ``""``), the jobs are those of the first scope after
        it that has pending work due, wrapping around; with None, of every scope.

        ``build(now)`` returns the candidate rows and the rarer claimable rows (retries,
        resumable expired leases). Returns ``[]`` when nothing was taken: nothing pending, or
        rarer work is claimable, which the caller's exact path orders with the rest. The
        statement is compiled once per filter set and limit (compiling it cost more than
        running it) and only the clock's value changes between calls.
        """
        statement = self._claim_statements.get(key)
        if statement is None:
            statement = ClaimStatement.compile(self.using, build, limit, fair=turn is not None)
            self._claim_statements[key] = statement
        expires = now + timedelta(seconds=self.lease_seconds)
        changes = {
            "status": JobStatus.RUNNING,
            "owner_id": self.owner_id,
            "lease_expires_at": expires,
            "heartbeat_at": now,
            "claimed_at": now,
            "claimed_by": self.actor or "",
        }
        if statement.returning:
            rows = statement.take(self.using, now, turn, changes)
        else:
            _, rare = build(now)
            if rare.exists():  # a plain read, so the locking SELECT locks pending rows only
                return []
            chosen = statement.select(self.using, now, turn)
            rows = [row for row in chosen if is_authentic_pending(row)]
            if rows:
                matched = (
                    Job.objects.using(self.using)
                    .filter(pk__in=[row.pk for row in rows], status=JobStatus.PENDING)
                    .update(**changes, fencing_epoch=F("fencing_epoch") + 1, attempts=1)
                )
                if matched != len(rows):  # the rows are locked: this cannot happen
                    raise LeaseLost("Claimed rows changed under their locks; nothing was taken.")
                for row in rows:
                    for name, value in changes.items():
                        setattr(row, name, value)
                    row.fencing_epoch += 1
                    row.attempts = 1
        if any(proposal_defect(row) for row in rows):
            raise _Disagreement
        rows.sort(key=_claim_order)
        return [
            Claimed(Lease(row.pk, self.owner_id, row.fencing_epoch, expires), row) for row in rows
        ]

    def _claims_capacity(self, ops: list[str] | None, max_running: int | None) -> bool:
        """Return True when a ``max_running`` limit applies to any operation or scope claimed."""
        if max_running is not None or quotas.running_limits_configured():
            return True
        specs = (
            registry.all_operations().values()
            if ops is None
            else filter(None, map(registry.get, ops))
        )
        return any(spec.max_running is not None for spec in specs)

    # -- renewing --------------------------------------------------------------------------------

    def renew_leases(self, leases: Sequence[Lease]) -> list[Job | None]:
        """Renew every lease in one fenced statement; return each job's row, None where lost.

        The rows let the owner see cancellation requests made meanwhile. A lease that expired
        (or was taken over, or belongs to another client) cannot revive itself: None.
        """
        leases = [self._lease_of(lease) for lease in listed(leases, "leases")]
        if not leases:
            return []
        rows = JobRows(self.using, self.scope)
        with bounded_atomic(self.using):
            now = self._now()
            renewal = {
                "lease_expires_at": now + timedelta(seconds=self.lease_seconds),
                "heartbeat_at": now,
            }
            mine = [lease for lease in leases if lease.owner_id == self.owner_id]
            rows.update_fenced(mine, renewal, owner_id=self.owner_id, unexpired_at=now)
            found = rows.get(lease.job_id for lease in leases)
        renewed = [
            row if self._fence_holds(lease, row := found.get(lease.job_id), now) else None
            for lease in leases
        ]
        fenced_verdicts("renew", leases, renewed, at=now)
        return renewed

    # -- ending attempts -------------------------------------------------------------------------

    def record_outcomes(self, outcomes: Sequence[Outcome]) -> list[Recorded]:
        """End many attempts in one transaction; return, per outcome, what was written.

        Each row is locked and must still be the outcome's lease (owner, epoch, running,
        unexpired): the UPDATE repeats that fence in SQL. A row that fails it gets ``LeaseLost``
        and is left to its new owner; the others commit, each with its ``JobAttempt`` row.
        ``complete`` stores the result and progress 100; ``failed`` schedules an automatic retry
        when the operation's policy allows; ``cancelled`` without a recorded request is a
        failure, as with one attempt at a time.

        An outcome that cannot be stored as given (a result that is not storable JSON text, a
        failure message with a lone surrogate, a traceback too long) ends its own attempt as
        ``failed``, with a message saying why, and costs no other outcome of the call. Only a
        value that is not an outcome at all refuses the whole call (``InputInvalid``).
        """
        given = listed(outcomes, "outcomes")
        for outcome in given:
            _check_kind(outcome)
            self._lease_of(outcome.lease)
        outcomes = [_storable(outcome) for outcome in given]
        if not outcomes:
            return []
        recorded: list[Recorded] = []
        with bounded_atomic(self.using):
            now = self._now()
            rows = JobRows(self.using, self.scope).get(
                (o.lease.job_id for o in outcomes), lock=True
            )
            ended: list[tuple[Outcome, Job]] = []
            each: dict[str, dict[Any, Any]] = {"status": {}, "result": {}, "error": {}}
            for asked, outcome in zip(given, outcomes, strict=True):
                row = rows.get(outcome.lease.job_id)
                if not self._fence_holds(outcome.lease, row, now):
                    fenced_writes("outcome", [outcome.lease], accepted=False, at=now, why="fence")
                    recorded.append(Recorded(asked, None, _loss_of(outcome.lease, row)))
                    continue
                if (
                    outcome.status == JobStatus.CANCELLED
                    and outcome.error is None
                    and row.cancellation_requested_at is None
                ):
                    recorded.append(Recorded(asked, None, _unrequested(row)))
                    continue
                _end(outcome, row, now)
                each["status"][row.pk] = row.status
                if row.status == JobStatus.COMPLETE:
                    each["result"][row.pk] = row.result
                elif row.status == JobStatus.FAILED:
                    each["error"][row.pk] = row.error
                ended.append((outcome, row))
                recorded.append(Recorded(asked, row.status, error=row.error))
            complete = {pk for pk, status in each["status"].items() if status == JobStatus.COMPLETE}
            each["progress"] = dict.fromkeys(complete, 100.0)
            matched = JobRows(self.using, self.scope).update_fenced(
                [outcome.lease for outcome, _ in ended],
                {"completed_at": now},
                owner_id=self.owner_id,
                unexpired_at=now,
                each=each,
            )
            if matched != len(ended):  # the rows are locked and checked: this cannot happen
                raise LeaseLost(
                    "Rows changed under their locks while ending attempts; nothing was written."
                )
            history = [
                _attempt_of(
                    row,
                    now,
                    row.status,
                    row.error,
                    error_class=outcome.error_class,
                    traceback=outcome.traceback,
                )
                for outcome, row in ended
            ]
            insert_attempts(self.using, history)
            for _, row in ended:
                if row.status == JobStatus.FAILED:
                    self._schedule_retry(row, now)
        fenced_writes("outcome", (outcome.lease for outcome, _ in ended), accepted=True, at=now)
        return recorded

    # -- releasing -------------------------------------------------------------------------------

    def release(self, leases: Sequence[Lease]) -> int:
        """Hand back claims whose executor never started; return how many were released.

        No code of such an attempt ran, so it is not counted in ``attempts`` and any worker may
        take the job again at once, whatever its ``on_expired``: a job claimed from the pending
        backlog is pending again (at the claim's epoch, which never goes back); a retry or a
        resumed lease ends its lease now with a retry request. Either way the history records a
        ``released`` attempt. Leases no longer held are skipped; a lease listed twice is
        released once.
        """
        leases = list(dict.fromkeys(self._lease_of(lease) for lease in listed(leases, "leases")))
        if not leases:
            return 0
        with bounded_atomic(self.using):
            now = self._now()
            rows = JobRows(self.using, self.scope).get(
                (lease.job_id for lease in leases), lock=True
            )
            held = [
                (lease, rows[lease.job_id])
                for lease in leases
                if self._releasable(lease, rows.get(lease.job_id))
            ]
            kept = {lease for lease, _ in held}
            gone = (lease for lease in leases if lease not in kept)
            fenced_writes("release", gone, accepted=False, at=now, why="fence")
            history = [_attempt_of(row, now, RELEASED, RELEASED_ERROR) for _, row in held]
            first = [lease for lease, row in held if row.attempts == 1]  # claimed from pending
            again = [lease for lease, row in held if row.attempts > 1]
            self._release_group(first, **_UNCLAIMED)
            self._release_group(
                again,
                lease_expires_at=now,
                heartbeat_at=now,
                retry_requested_at=now,
                attempts=DECREMENT,
            )
            insert_attempts(self.using, history)
        fenced_writes("release", (lease for lease, _ in held), accepted=True, at=now)
        return len(held)

    def _release_group(self, leases: list[Lease], **changes: Any) -> None:
        if not leases:
            return
        matched = JobRows(self.using, self.scope).update_fenced(
            leases, changes, owner_id=self.owner_id
        )
        if matched != len(leases):  # the rows are locked and checked: this cannot happen
            raise LeaseLost("Rows changed under their locks while releasing; nothing was written.")

    def _releasable(self, lease: Lease, row: Job | None) -> bool:
        """Return True while ``lease`` is still this client's claim on ``row``.

        Its lease may have run out: as long as nobody took the job since, it is ours to hand
        back.
        """
        return (
            row is not None
            and row.status == JobStatus.RUNNING
            and row.owner_id == self.owner_id == lease.owner_id
            and row.fencing_epoch == lease.epoch
            and row.attempts > 0
        )


def _check_kind(outcome: Any) -> None:
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


def _storable(outcome: Outcome) -> Outcome:
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


def _end(outcome: Outcome, row: Job, now: datetime) -> None:
    """Set on ``row`` the values that end its attempt with ``outcome``."""
    row.completed_at = now
    if outcome.status == JobStatus.COMPLETE:
        row.status, row.result, row.progress = JobStatus.COMPLETE, outcome.result_json, 100.0
    elif outcome.status == JobStatus.CANCELLED and row.cancellation_requested_at is not None:
        row.status = JobStatus.CANCELLED
    else:
        row.status = JobStatus.FAILED
        row.error = outcome.error  # a stop without a request: Outcome.stopped's message


def _unrequested(row: Job) -> InputInvalid:
    """Return the refusal of a cancellation acknowledged where none was requested."""
    return InputInvalid(
        f"Job {row.pk} has no cancellation request to acknowledge; use fail() to end it, or "
        f"request_cancel() first."
    )


def _claim_order(row: Job) -> tuple:
    """Return the sort key of the claim order, without the id: ties keep the database's order.

    A stable sort over rows read in claim order leaves ties as the database ordered them by id
    (MariaDB's UUID type does not sort like the id's text, so Python must not break them).
    """
    return (-row.priority, row.run_after, row.created_at)
