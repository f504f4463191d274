"""Renewing one lease and passing what the row says to the executor: shared by the worker
and JobManager, whose heartbeat loops differ only in what they renew."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import LeaseLost

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
