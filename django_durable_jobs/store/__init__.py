"""DurableJobStore: the only code that writes job and attempt rows.

Every mutation opens and commits its own transaction. Every write that only the lease holder may make
changes the row only where id, owner, epoch, ``status = running`` and an unexpired lease all match in
SQL, and raises ``LeaseLost`` when nothing matched. Each attempt leaves its ``JobAttempt`` row in the
transaction that ends it.

The class is assembled from one module per concern (submissions, reads, claims, outcomes) over a
shared base (schedule rows too: ``schedules.py``); all of them live in this package, so fencing is audited by reading this folder.
"""

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

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
from .client import Client
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

    ``DurableJobStore(*, scope=None, actor=None, lease_seconds=30.0, using=None, clock=None)``;
    ``using=None`` is the alias the ``DATABASE`` setting names (``"default"`` unless set).

    ``lease=`` is the deprecated name of ``lease_seconds=``; it still works, with a warning.
    """

    def __init__(
        self,
        *,
        scope: str | None = None,
        actor: str | None = None,
        lease_seconds: float = 30.0,
        using: str | None = None,
        clock: Callable[[], datetime] | None = None,
        lease: float | None = None,
    ) -> None:
        self._client = Client.build(
            scope=scope,
            actor=actor,
            lease_seconds=lease_seconds,
            using=using,
            clock=clock,
            lease=lease,
        )
        self._claim_statements: dict[tuple, Any] = {}  # compiled claims, see batches.py
        self._turn = ""  # the scope this client's last claim of pending work served (claims.py)

    scope = property(lambda self: self._client.scope, doc="The scope this client serves, or None.")
    actor = property(lambda self: self._client.actor, doc="Who acts, as recorded on claims.")
    using = property(lambda self: self._client.using, doc="The database alias of the job tables.")
    clock = property(lambda self: self._client.clock, doc="The clock every write is stamped by.")
    lease_seconds = property(
        lambda self: self._client.lease_seconds, doc="How long a claim's lease lasts, in seconds."
    )

    @property
    def owner_id(self) -> str:
        """The owner id every lease this client takes carries."""
        return self._client.owner_id

    @owner_id.setter
    def owner_id(self, value: str) -> None:
        # Tests act as another process's client by taking over its owner id.
        self._client = replace(self._client, owner_id=value)

    @property
    def lease(self) -> float:
        """Deprecated name of :attr:`lease_seconds`."""
        return self.lease_seconds

    def __repr__(self) -> str:
        return f"<DurableJobStore scope={self.scope!r} actor={self.actor!r} owner={self.owner_id}>"

    # -- claiming, leases, ending, requests, atomic domain writes (rooms-core) ------------------

    # -- submitting, reads, schedules, worker rows, clock (rooms-edge) ---------------------------
