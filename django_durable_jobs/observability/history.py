"""The history of fenced writes: one log record per write a lease holder attempted.

Every store method that writes under a lease's fence (heartbeat, progress, checkpoint, complete,
fail, cancel, the worker's batched outcomes and lease renewals, release, the atomic outcomes and
``assert_write_fence``) reports here whether the fence let the write through or refused it, with
the store's clock at that transaction. Records go to the logger
``django_durable_jobs.history`` at DEBUG; nothing is built, formatted or logged unless that logger
is enabled for DEBUG, so the worker's drain rate does not pay for it. The chaos run
(``tests/chaos``) writes them as JSON lines and checks them against the database's own record of
the same rows. See docs/history.md.

A record of an accepted write is logged after its transaction committed; a refusal, when the
fence refused, before the transaction rolled back. A write whose COMMIT failed (the database went
away) logs nothing: the database's own record says whether it landed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

logger = logging.getLogger("django_durable_jobs.history")

__all__ = ["enabled", "fenced_verdicts", "fenced_writes", "logger"]


def enabled() -> bool:
    """Return True when fenced writes are being recorded (the logger is enabled for DEBUG)."""
    return logger.isEnabledFor(logging.DEBUG)


def fenced_writes(
    kind: str, leases: Iterable[Any], *, accepted: bool, at: datetime, why: str | None = None
) -> None:
    """Record a fenced write of ``kind`` for each of ``leases`` (a batch of one transaction).

    Each lease is a ``Lease`` (``job_id``, ``epoch``, ``owner_id``): this module imports nothing
    of the package, so every layer may call it.

    ``leases`` may be a generator: it is not consumed unless the history is being recorded.
    """
    if not logger.isEnabledFor(logging.DEBUG):
        return
    for lease in leases:
        _log(kind, str(lease.job_id), lease.epoch, lease.owner_id, accepted, at, why)


def fenced_verdicts(
    kind: str, leases: Iterable[Any], verdicts: Iterable[Any], *, at: datetime
) -> None:
    """Record a fenced write of ``kind`` for each lease, accepted where its verdict is truthy.

    ``verdicts`` runs parallel to ``leases`` (the rows a batch renewed, None where refused, say);
    generators are not consumed unless the history is being recorded.
    """
    if not logger.isEnabledFor(logging.DEBUG):
        return
    for lease, verdict in zip(leases, verdicts, strict=True):
        why = None if verdict else "fence"
        _log(kind, str(lease.job_id), lease.epoch, lease.owner_id, bool(verdict), at, why)


def _log(
    kind: str,
    job_id: str,
    epoch: int,
    owner_id: str | None,
    accepted: bool,
    at: datetime,
    why: str | None,
) -> None:
    verdict = "accepted" if accepted else "refused"
    logger.debug(
        "%s %s: job %s epoch %s owner %s",
        kind,
        verdict,
        job_id,
        epoch,
        owner_id,
        extra={
            "kind": kind,
            "job_id": job_id,
            "epoch": epoch,
            "owner_id": owner_id,
            "accepted": accepted,
            "at": at.isoformat(),
            "why": why,
        },
    )
