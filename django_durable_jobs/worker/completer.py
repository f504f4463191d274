"""The completer: writes finished attempts' outcomes in batches, each row still fenced.

Job threads hand it an outcome and move on to their next job. It writes everything that has
gathered since its last flush in one transaction (``DurableJobStore.record_outcomes``), so under
load one COMMIT ends dozens of attempts; when idle a flush holds one. An outcome is reported (log
line, counters, the job leaving the worker's held set) only after its flush committed; a row whose
lease was lost meanwhile is reported as such, alone.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import DatabaseError

from ..formatting.terminal import printable
from ..rules.values import Outcome, Recorded
from ..rules.vocabulary import JobStatus
from ..store import completed_by
from .connections import close_thread_connections, persist, reset_broken_connections
from .held import Held
from .reports import AttemptReport, report_recorded

if TYPE_CHECKING:
    from ..store import DurableJobStore

logger = logging.getLogger("django_durable_jobs.worker")

FLUSH_MAX = 500  # outcomes per transaction at most


@dataclass(frozen=True)
class Finished:
    """An attempt whose executor ended; ``outcome`` is what to record for it."""

    held: Held
    outcome: Outcome
    duration: float


class Completer(threading.Thread):
    """Record outcomes in batches, one fenced transaction per flush."""

    def __init__(
        self,
        store: DurableJobStore,
        *,
        on_recorded: Callable[[Held, AttemptReport], None],
        retry_until: Callable[[], bool],
    ) -> None:
        super().__init__(name="durable-jobs-completer", daemon=True)
        self.store = store
        self.on_recorded = on_recorded
        self.retry_until = retry_until
        self.inbox: queue.SimpleQueue[Finished | None] = queue.SimpleQueue()

    def put(self, finished: Finished) -> None:
        """Hand ``finished`` over for the next flush; return at once."""
        self.inbox.put(finished)

    def stop(self) -> None:
        """Flush what was submitted so far, then end the thread."""
        self.inbox.put(None)

    def run(self) -> None:
        try:
            stopping = False
            while not stopping:
                first = self.inbox.get()
                if first is None:
                    break
                batch = [first]
                while len(batch) < FLUSH_MAX:
                    try:
                        item = self.inbox.get_nowait()
                    except queue.Empty:
                        break
                    if item is None:
                        stopping = True
                        break
                    batch.append(item)
                self.flush(batch)
        finally:
            close_thread_connections()

    def flush(self, batch: list[Finished]) -> None:
        """Write ``batch`` in one transaction and report each attempt.

        The store ends an attempt whose outcome cannot be stored as a failure of its own, so a
        batch is refused only by a fault nobody foresaw, or by the database: one statement too
        large for it (MariaDB's ``max_allowed_packet`` drops the connection), a connection
        lost. Then each outcome is written alone, so the fault costs only the outcome that
        causes it: a batch is never retried as a whole, or a batch the server cannot take
        would stop every outcome after it. One outcome alone is retried while the database is
        unavailable; a database that stays unavailable costs it: its lease will expire and the
        job stays evidence.
        """
        outcomes = [item.outcome for item in batch]
        try:
            if len(batch) > 1:
                recorded = self.store.record_outcomes(outcomes)
            else:
                recorded = persist(lambda: self.store.record_outcomes(outcomes), self.retry_until)
        except Exception as exc:  # noqa: BLE001 - a completer that died would strand every job
            if len(batch) == 1:
                self._unrecorded(batch, exc)
                return
            unavailable = isinstance(exc, DatabaseError)  # or too large a statement
            if unavailable:
                reset_broken_connections()
            logger.log(
                logging.WARNING if unavailable else logging.ERROR,
                "a flush of %d outcomes was refused (%s); writing each alone",
                len(batch),
                printable(exc, keep_newlines=False),
            )
            for item in batch:
                self.flush([item])
            return
        for item, result in zip(batch, recorded, strict=True):
            result = self._landed(result)
            self.on_recorded(item.held, report_recorded(item.held.claim, result, item.duration))

    def _landed(self, result: Recorded) -> Recorded:
        """Return ``result``, or the completion it is when an earlier write of it committed.

        A flush whose COMMIT landed while the connection broke (a database restarting) is
        written again, and the store refuses it: the row is no longer running. When the row
        is complete at the outcome's epoch and owner, with its result, this attempt completed
        the job and is reported so, not as a lost lease (found by the chaos run, tests/chaos).
        """
        outcome = result.outcome
        if result.status is not None or outcome.status != JobStatus.COMPLETE:
            return result
        try:
            row = self.store.get(outcome.lease.job_id)
        except DatabaseError:
            reset_broken_connections()
            return result
        if (
            row is not None
            and completed_by(row, outcome.lease)
            and row.result == outcome.result_json
        ):
            return Recorded(outcome, JobStatus.COMPLETE)
        return result

    def _unrecorded(self, batch: list[Finished], exc: Exception) -> None:
        """Report every outcome of ``batch`` as not recorded because of ``exc``."""
        reason = printable(exc, keep_newlines=False)
        logger.error("%d outcome(s) could not be recorded: %s", len(batch), reason)
        for item in batch:
            result = Recorded(item.outcome, None, exc)
            self.on_recorded(item.held, report_recorded(item.held.claim, result, item.duration))
