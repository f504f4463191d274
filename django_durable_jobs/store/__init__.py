"""DurableJobStore: the only code that writes job and attempt rows.

Every mutation opens and commits its own transaction. Every write that only the lease holder may make
changes the row only where id, owner, epoch, ``status = running`` and an unexpired lease all match in
SQL, and raises ``LeaseLost`` when nothing matched. Each attempt leaves its ``JobAttempt`` row in the
transaction that ends it.

The class is assembled from one module per concern (submissions, reads, claims, outcomes) over a
shared base (schedule rows too: ``schedules.py``); all of them live in this package, so fencing is audited by reading this folder.
"""

from ..execution import Execution, Identity, bind_write_fence
from ..values import (
    AttemptOutcome,
    CandidatePage,
    Finalization,
    Lease,
    PageQuery,
    RequestResult,
    Submission,
)
from .claims import ClaimMixin
from .clock import ClockMixin
from .fence import assert_write_fence
from .outcomes import OutcomeMixin
from .reads import ReadMixin
from .schedules import ScheduleMixin
from .submissions import SubmissionMixin
from .workers import WorkerRowMixin

__all__ = [
    "AttemptOutcome",
    "CandidatePage",
    "DurableJobStore",
    "Execution",
    "Finalization",
    "Identity",
    "Lease",
    "PageQuery",
    "RequestResult",
    "Submission",
    "assert_write_fence",
    "bind_write_fence",
]


class DurableJobStore(
    SubmissionMixin,
    ReadMixin,
    ClaimMixin,
    OutcomeMixin,
    WorkerRowMixin,
    ScheduleMixin,
    ClockMixin,
):
    """A client of the job table: one owner id, one scope, one clock.

    ``DurableJobStore(*, scope=None, actor=None, lease_seconds=30.0, using=None, clock=None)``: ``using=None`` is the ``DURABLE_JOBS["DATABASE"]`` alias.

    ``lease=`` is the deprecated name of ``lease_seconds=``; it still works, with a warning.
    """
