"""The worker's clock check: no claims while this host's clock is too far from the database's.

Leases are judged by the clock of whoever reads them: a worker writes ``lease_expires_at`` from
its own clock, and another worker decides it expired by its own. The database's clock is the one
reference every worker shares, so each worker measures its clock against it (at start and with
every heartbeat) and refuses to claim while the two are more than ``MAX_SKEW_FRACTION`` of a
lease apart.

Why a quarter: a lease is renewed every third of it, so a renewed lease has at least two thirds
of its length left when another host looks. Two workers each within a quarter of the database's
clock are at most half a lease apart, which leaves a sixth of the lease (5 s of a 30 s lease) for
a late heartbeat before a live lease could look expired to the other. A worker past the limit
still heartbeats and finishes what it holds: its own leases are written and judged by the same
clock, and stopping its work would only turn a clock problem into lost work.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.db import DatabaseError

from ..store import DurableJobStore
from .connections import reset_broken_connections

logger = logging.getLogger("django_durable_jobs.worker")

MAX_SKEW_FRACTION = 0.25  # of the lease: see the module's docstring
REMEASURE_SECONDS = 1.0  # while refusing, the fetch loop measures again at most this often


class ClockCheck:
    """Measure the store's clock against the database's and say whether claiming is safe.

    ``measure()`` runs in the heartbeat thread and at start, ``allows_claims()`` in the fetch
    loop; while it refuses, the fetch loop's checks measure again (at most every
    ``REMEASURE_SECONDS``), so claiming resumes soon after the clock is fixed.
    """

    def __init__(
        self,
        store: DurableJobStore,
        lease_seconds: float,
        *,
        on_resume: Callable[[], object] | None = None,
    ) -> None:
        self.store = store
        self.lease_seconds = lease_seconds
        self.limit = lease_seconds * MAX_SKEW_FRACTION
        self.on_resume = on_resume or (lambda: None)
        self.lock = threading.Lock()
        self.skew: float | None = None  # seconds, database minus this host; None: not measured
        self.refusing = False
        self.measured_at = float("-inf")  # time.monotonic() of the last measurement

    def measure(self) -> float | None:
        """Measure the skew now; return it (None when the database did not answer).

        A failed measurement keeps the previous verdict: an unreachable database is the fetch
        loop's business, not a reason to start or stop refusing.
        """
        try:
            reading = self.store.clock_skew()
        except DatabaseError:
            reset_broken_connections()
            return None
        skew = reading.skew_seconds
        with self.lock:
            was_refusing = self.refusing
            self.skew = skew
            # Only a skew surely past the limit counts: a slow query widens the measurement's
            # error (half its round trip), and a stall must not stop a healthy worker.
            self.refusing = abs(skew) - reading.uncertainty_seconds > self.limit
            self.measured_at = time.monotonic()
            refusing = self.refusing
        if refusing:
            logger.error(
                "not claiming jobs: this host's clock is %s the database's (limit %gs, a quarter "
                "of the %gs lease). Leases are judged by each host's clock, so claiming now could "
                "take over a live lease or lose one early. Fix this host's time synchronisation "
                "(NTP, chrony, systemd-timesyncd); jobs already held keep running and "
                "heartbeating, and claiming resumes by itself once the clocks agree.",
                describe(skew),
                self.limit,
                self.lease_seconds,
            )
        elif was_refusing:
            logger.warning(
                "clock back within %gs of the database's (%s); claiming again",
                self.limit,
                describe(skew),
            )
            self.on_resume()
        return skew

    def allows_claims(self) -> bool:
        """Return True unless the last measurement found the clocks too far apart."""
        with self.lock:
            recheck = self.refusing and time.monotonic() - self.measured_at >= REMEASURE_SECONDS
        if recheck:
            self.measure()
        with self.lock:
            return not self.refusing


def describe(skew: float) -> str:
    """Return ``skew`` in words: ``"12.500s behind"`` / ``"0.003s ahead of"``."""
    direction = "behind" if skew > 0 else "ahead of"
    return f"{abs(skew):.3f}s {direction}"
