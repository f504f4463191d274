"""Steps and sleep: what an attempt records for the attempts after it, under its fence.

* :func:`record_step` stores a step's result (``ctx.step``) in a transaction that locked the
  job's row and found the lease still held (``fence.holds``): a stale owner records nothing.
  Given a ``call``, it runs it inside that transaction first, so a domain write made there and
  the step's record commit together or not at all (``ctx.step_atomically``).
* :func:`recorded_steps` reads them back for a later attempt, in order.
* :func:`sleep` ends the attempt without failing it (``ctx.sleep``): no owner, no lease, the
  attempt given back (not counted), due again later through the retry path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction

from ..database.transactions import bounded_atomic
from ..models import JobStep
from ..observability.history import fenced_writes
from ..rules import validation
from ..rules.errors import InputInvalid, JobCancelled
from ..rules.jsontext import canonical_json
from ..rules.values import Lease
from ..rules.vocabulary import AttemptOutcomeChoice, JobStatus
from . import client as client_room
from . import ending, fence
from .client import Client
from .sql.rows import DECREMENT, JobRows, insert_attempts

# The longest sleep: a year. Longer waits are better a schedule or a new job.
SLEEP_MAX_SECONDS = 366 * 86_400


def recorded_steps(client: Client, job_id: Any) -> list[tuple[str, str]]:
    """Return the job's recorded steps as (name, result JSON), in position order."""
    return list(
        JobStep.objects.using(client.using)
        .filter(job_id=job_id)
        .order_by("position")
        .values_list("name", "result")
    )


def record_step(
    client: Client,
    lease: Lease,
    position: int,
    name: str,
    result: Any = None,
    *,
    call: Callable[[], Any] | None = None,
) -> str:
    """Record step ``name`` at ``position`` under ``lease``'s fence; return its result's JSON.

    ``result`` is the step's value, or ``call()`` computes it inside the transaction, after the
    fence passed (its writes commit with the record). Refuses a lost lease (``LeaseLost``) and a
    result that could not be stored (``InputInvalid``), writing nothing.
    """
    fence.check_lease(client, lease)
    name = validation.name(name, "step name")
    validation.whole(position, "step position", 0, validation.ATTEMPTS_MAX)
    with bounded_atomic(client.using):
        now = client_room.now(client)
        row = JobRows(client.using, client.scope).get([lease.job_id], lock=True).get(lease.job_id)
        if not fence.holds(client, lease, row, now):
            fenced_writes("step", [lease], accepted=False, at=now, why="fence")
            raise fence.loss_of(client, lease, row)
        value = call() if call is not None else result
        text = step_json(value, name)
        step = JobStep(
            job_id=lease.job_id,
            position=position,
            name=name,
            result=text,
            epoch=lease.epoch,
            recorded_at=now,
        )
        try:
            with transaction.atomic(using=client.using):
                step.save(using=client.using, force_insert=True)
        except IntegrityError:
            # Only this attempt can write here now (the row is locked and fenced): a retry of
            # a COMMIT that did happen. Its own record at this epoch is the answer.
            earlier = JobStep.objects.using(client.using).filter(
                job_id=lease.job_id, position=position
            )
            found = earlier.first()
            if found is None or found.name != name or found.epoch != lease.epoch:
                raise InputInvalid(
                    f"Step {name!r} of job {lease.job_id} cannot be recorded at position "
                    f"{position}: another step is recorded there or under this name."
                ) from None
            return found.result
    fenced_writes("step", [lease], accepted=True, at=now)
    return text


def step_json(value: Any, name: str) -> str:
    """Return a step result's canonical JSON, bounded like a job's result."""
    try:
        text = canonical_json(value)
    except (TypeError, ValueError) as exc:
        raise InputInvalid(f"The result of step {name!r} cannot be stored as JSON: {exc}.") from exc
    return validation.json_text(text, f"result of step {name!r}")


def sleep_seconds(delay: Any) -> float:
    """Return ``delay`` (seconds or a ``timedelta``) as seconds, or refuse it."""
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, (int, float)) and not isinstance(delay, bool):
        seconds = float(delay)
    else:
        raise InputInvalid(f"ctx.sleep() takes seconds or a timedelta; got {delay!r}.")
    if not math.isfinite(seconds) or not 0 <= seconds <= SLEEP_MAX_SECONDS:
        raise InputInvalid(
            f"ctx.sleep() takes 0 to {SLEEP_MAX_SECONDS} seconds (a year); got {delay!r}. For "
            f"longer waits, schedule a new job."
        )
    return seconds


def sleep(client: Client, lease: Lease, seconds: Any):
    """End ``lease``'s attempt without failing it; the job is due again after ``seconds``.

    Return the time it is due. The attempt is given back (``attempts`` goes down by one, its
    history row says ``slept``), the owner and lease are cleared; checkpoint and steps stay.
    A job asked to cancel does not sleep: ``JobCancelled``, nothing written, so the executor
    stops and its cancellation is acknowledged.
    """
    fence.check_lease(client, lease)
    delay = sleep_seconds(seconds)
    with bounded_atomic(client.using):
        now = client_room.now(client)
        rows = JobRows(client.using, client.scope)
        row = rows.get([lease.job_id], lock=True).get(lease.job_id)
        if not fence.holds(client, lease, row, now):
            fenced_writes("sleep", [lease], accepted=False, at=now, why="fence")
            raise fence.loss_of(client, lease, row)
        if row.cancellation_requested_at is not None:
            # Sleeping would hide the request (the wake-up's new attempt clears it): stop.
            raise JobCancelled(
                f"Job {lease.job_id} was asked to cancel; it stops instead of sleeping."
            )
        until = now + timedelta(seconds=delay)
        history = ending.attempt_of(
            row,
            now,
            AttemptOutcomeChoice.SLEPT,
            f"Slept until {until.isoformat(timespec='seconds')}.",
        )
        matched = rows.update_fenced(
            [lease],
            {
                "status": JobStatus.SLEEPING,
                "owner_id": None,
                "lease_expires_at": None,
                "heartbeat_at": None,
                "claimed_at": None,
                "claimed_by": "",
                "attempts": DECREMENT,
                "retry_requested_at": now,
                "run_after": until,
                "sleep_until": until,
            },
            owner_id=client.owner_id,
            unexpired_at=now,
        )
        if matched != 1:  # the row is locked and checked: this cannot happen
            raise fence.changed_under_lock("sleeping")
        insert_attempts(client.using, [history])
    fenced_writes("sleep", [lease], accepted=True, at=now)
    return until
