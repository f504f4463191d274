"""What a worker holds: each claim, from the prefetch buffer until its outcome committed."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..values import Claimed, Lease

# What a held claim is doing: waiting in the prefetch buffer, running in a job thread, or
# finished and waiting for the completer's flush; done once its outcome committed.
BUFFERED = "buffered"
RUNNING = "running"
FINISHING = "finishing"
DONE = "done"
RELEASED = "released"


@dataclass(eq=False)
class Held:
    """A claim this worker holds: buffered, running, or finished and waiting for its flush."""

    claim: Claimed
    cancel: threading.Event = field(default_factory=threading.Event)
    cancel_recorded: bool = False  # this worker recorded a cancellation request (2nd signal)
    state: str = BUFFERED

    @property
    def lease(self) -> Lease:
        return self.claim.lease


def key(lease: Lease) -> tuple:
    return (lease.job_id, lease.epoch)
