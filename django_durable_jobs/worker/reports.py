"""How an attempt ended, as the process that ran it reports it: ``AttemptReport`` and its log line.

A report is made once the attempt's outcome committed, could not be written, or was never
needed; the worker counts it, ``InProcessRunner.report()`` returns it, and both log it the same
way: at INFO, or at WARNING with the traceback for a failed attempt.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from django.utils.translation import ngettext

from ..formatting.terminal import printable
from ..rules.errors import LeaseLost
from ..rules.values import Claimed, Recorded
from ..rules.vocabulary import AttemptOutcomeChoice

logger = logging.getLogger("django_durable_jobs.worker")

__all__ = [
    "AttemptReport",
    "Ended",
    "ExecutionReport",
    "Unwritten",
    "log",
    "report_recorded",
    "summary_line",
]


class Unwritten(StrEnum):
    """Why a report carries no written outcome: the fence refused it, or the database did."""

    LEASE_LOST = "lease-lost"  # another attempt owns the job
    UNRECORDED = "unrecorded"  # the database refused the outcome or stayed unavailable


# What a report says of an attempt: the status written, the word of the attempt's history row
# (``AttemptOutcomeChoice``, the ``Outcome``'s own), or why none was.
Ended = AttemptOutcomeChoice | Unwritten


@dataclass(frozen=True)
class AttemptReport:
    """One attempt that ended: which, how (``outcome``), after how long, and the error if any.

    ``outcome`` is the status written (``AttemptOutcomeChoice``: ``complete``, ``failed``,
    ``cancelled``, ``released``), or why none was (``Unwritten``: ``lease-lost``,
    ``unrecorded``); both compare equal to their words.

    ``traceback`` is the exception's when the executor raised (as the history row keeps it); two
    reports compare equal whatever their tracebacks.
    """

    job_id: Any
    operation: str
    attempt: int
    epoch: int
    outcome: Ended
    duration: float
    error: str | None = None
    traceback: str | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(
        cls,
        claim: Claimed,
        outcome: Ended,
        duration: float,
        error: str | None = None,
        *,
        traceback: str | None = None,
    ) -> AttemptReport:
        """Return the report of ``claim``'s attempt."""
        job, lease = claim.job, claim.lease
        return cls(
            lease.job_id,
            job.operation,
            job.attempts,
            lease.epoch,
            outcome,
            duration,
            error,
            traceback,
        )


# The name of AttemptReport before the worker's words were sorted out; kept for imports.
ExecutionReport = AttemptReport


def report_recorded(claim: Claimed, recorded: Recorded, duration: float) -> AttemptReport:
    """Return the report of what ``record_outcomes`` did with ``claim``'s outcome."""
    if recorded.status is not None:
        end, error = AttemptOutcomeChoice(recorded.status), recorded.error
    elif isinstance(recorded.refusal, LeaseLost):
        end, error = Unwritten.LEASE_LOST, recorded.refusal.message
    else:
        end, error = Unwritten.UNRECORDED, str(recorded.refusal)
    return AttemptReport.of(claim, end, duration, error, traceback=recorded.outcome.traceback)


def log(report: AttemptReport) -> None:
    """Log one line for an attempt that ended; a failed one at WARNING, with its traceback.

    The operation and error (job code's words) are escaped to one printable line, the traceback
    keeps its newlines: nothing they hold can steer a terminal or forge another log line.
    """
    failed = report.outcome == AttemptOutcomeChoice.FAILED
    logger.log(
        logging.WARNING if failed else logging.INFO,
        "job %s %s attempt=%s epoch=%s outcome=%s duration=%.3fs%s%s",
        report.job_id,
        printable(report.operation, keep_newlines=False),
        report.attempt,
        report.epoch,
        report.outcome,
        report.duration,
        f" error={printable(report.error, keep_newlines=False)}" if report.error else "",
        f"\n{printable(report.traceback.rstrip())}" if report.traceback else "",
    )


# What the summary says of each end, always (the first four) or when it happened (the rest).
SUMMARY_WORDS: dict[Ended, str] = {
    AttemptOutcomeChoice.COMPLETE: "complete",
    AttemptOutcomeChoice.FAILED: "failed",
    AttemptOutcomeChoice.CANCELLED: "cancelled",
    Unwritten.LEASE_LOST: "lost (another attempt took over)",
    Unwritten.UNRECORDED: "unrecorded (the database refused the outcome)",
    AttemptOutcomeChoice.RELEASED: "released unstarted",
    AttemptOutcomeChoice.SLEPT: "slept",
}
ALWAYS_SAID = (
    AttemptOutcomeChoice.COMPLETE,
    AttemptOutcomeChoice.FAILED,
    AttemptOutcomeChoice.CANCELLED,
    Unwritten.LEASE_LOST,
)


def summary_line(outcomes: Mapping[Ended, int], elapsed: float, *, abandoned: int = 0) -> str:
    """Return the one line a worker that ran to its end prints: how its attempts ended.

    ``outcomes`` counts the attempts by how they ended (``Worker.outcomes``); ``abandoned``
    counts the job threads given up on after a timeout.
    """
    ended = sum(outcomes.values())
    counts = [
        f"{outcomes.get(end, 0)} {words}"
        for end, words in SUMMARY_WORDS.items()
        if end in ALWAYS_SAID or outcomes.get(end, 0)
    ]
    ran = ngettext("%(count)d attempt ended", "%(count)d attempts ended", ended)
    line = f"runjobs: finished in {elapsed:.1f} s; {ran % {'count': ended}}: {', '.join(counts)}"
    if abandoned:
        threads = ngettext(
            "%(count)d job thread abandoned", "%(count)d job threads abandoned", abandoned
        )
        line += f"; {threads % {'count': abandoned}}"
    return line + "."


class _AttemptEnd:
    """The words of the former ``AttemptEnd`` enum, as the types that now carry them.

    A report's ``outcome`` is the written status (``AttemptOutcomeChoice``) or why none was
    written (``Unwritten``); ``AttemptEnd.FAILED`` is ``AttemptOutcomeChoice.FAILED`` and
    ``AttemptEnd("lease-lost")`` is ``Unwritten.LEASE_LOST``.
    """

    COMPLETE = AttemptOutcomeChoice.COMPLETE
    FAILED = AttemptOutcomeChoice.FAILED
    CANCELLED = AttemptOutcomeChoice.CANCELLED
    RELEASED = AttemptOutcomeChoice.RELEASED
    LEASE_LOST = Unwritten.LEASE_LOST
    UNRECORDED = Unwritten.UNRECORDED

    def __new__(cls, word: str) -> Ended:  # type: ignore[misc]
        return Unwritten(word) if word in set(Unwritten) else AttemptOutcomeChoice(word)


# Former names, still importable from here and from django_durable_jobs.worker, with a warning.
DEPRECATED = {
    "AttemptEnd": (
        _AttemptEnd,
        "AttemptEnd is deprecated: a report's outcome is an AttemptOutcomeChoice (the status "
        "written) or an Unwritten (why none was).",
    ),
}


def __getattr__(name: str) -> Any:
    return deprecated(name, __name__)


def deprecated(name: str, module: str) -> Any:
    """Return the former name ``name`` of ``module`` with a ``DeprecationWarning``."""
    if name not in DEPRECATED:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    value, message = DEPRECATED[name]
    warnings.warn(message, DeprecationWarning, stacklevel=3)
    return value
