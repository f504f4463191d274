"""Heartbeats: the worker renews every lease it holds in one statement (``HeartbeatMixin``);
``JobManager`` renews its few one by one (``renew_lease``). Both pass what the rows say
(cancellation requests, lost leases) to the executors."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.db import DatabaseError

from ..errors import LeaseLost
from .connections import close_thread_connections, reset_broken_connections
from .held import DONE

if TYPE_CHECKING:
    from ..models import Job
    from ..store import DurableJobStore, Lease

logger = logging.getLogger("django_durable_jobs.worker")


def renew_lease(
    store: DurableJobStore,
    lease: Lease,
    cancel: threading.Event,
    *,
    finished: Callable[[], bool],
) -> Job | None:
    """Renew ``lease`` and return the row, or None when the lease is lost.

    A recorded cancellation request or a lost lease sets ``cancel`` (``ctx.cancelled``). A lease
    refused because its job just ``finished()`` is not worth a warning. ``DatabaseError``
    propagates: the caller backs off and tries again at its next interval.
    """
    try:
        row = store.heartbeat(lease)
    except LeaseLost as exc:
        cancel.set()
        if not finished():
            logger.warning("job %s lease lost: %s", lease.job_id, exc.message)
        return None
    if row.cancellation_requested_at is not None and not cancel.is_set():
        logger.info("job %s cancellation requested", lease.job_id)
        cancel.set()
    return row


class HeartbeatMixin:
    """The worker's heartbeat loop (a mixin of ``Worker``)."""

    def _heartbeat_loop(self) -> None:
        """Renew every lease held each lease/3 s; pass cancellation and lost leases to ctx."""
        interval = self.options.lease_seconds / 3
        try:
            while not self.stopped.wait(interval):
                self.heartbeat_once()
        finally:
            close_thread_connections()

    def heartbeat_once(self) -> None:
        """Renew every held lease in one statement; tell executors what the rows say."""
        with self.lock:
            entries = list(self.held.values())
        try:
            rows = self.store.renew_leases([entry.lease for entry in entries])
        except DatabaseError:
            logger.warning("heartbeat failed: database unavailable", exc_info=True)
            reset_broken_connections()
            return
        for entry, row in zip(entries, rows, strict=True):
            if row is None:
                entry.cancel.set()
                if entry.state != DONE:
                    logger.warning("job %s lease lost", entry.lease.job_id)
            elif row.cancellation_requested_at is not None and not entry.cancel.is_set():
                logger.info("job %s cancellation requested", entry.lease.job_id)
                entry.cancel.set()
        try:
            self.store.worker_heartbeat(leases_held=len(entries), stopping=self.stopping.is_set())
        except DatabaseError:
            reset_broken_connections()
