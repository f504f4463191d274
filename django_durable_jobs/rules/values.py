"""Frozen value types the store takes and returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from .jsontext import Serialised, canonical_json
from .outcome import Outcome
from .vocabulary import RequestAnswer

__all__ = [
    "AttemptOutcome",
    "CandidatePage",
    "Claimed",
    "Finalization",
    "Lease",
    "Outcome",
    "PageQuery",
    "Recorded",
    "RequestResult",
    "Submission",
    "canonical_json",
]


@dataclass(frozen=True)
class Lease:
    """Proof of a claim: only this owner at this epoch may write, until ``expires_at``."""

    job_id: UUID
    owner_id: str
    epoch: int
    expires_at: datetime


@dataclass(frozen=True)
class Submission:
    """The immutable input of a job: its scope, idempotency key and exact proposal text."""

    scope: str | None
    idempotency_key: str | None
    proposal: str

    @classmethod
    def of(cls, scope: str | None, key: str | None, obj: Any) -> Submission:
        """Return a submission whose proposal is ``obj`` serialised to canonical JSON."""
        from .errors import InputInvalid

        try:
            text = canonical_json(obj)
        except (TypeError, ValueError) as exc:
            raise InputInvalid(f"The payload cannot be stored as JSON: {exc}.") from exc
        return cls(scope=scope, idempotency_key=key, proposal=Serialised(text))


@dataclass(frozen=True)
class PageQuery:
    operation: str
    status: str | None = None
    limit: int = 25
    max_payload_bytes: int = 262144
    after: str | None = None


@dataclass(frozen=True)
class CandidatePage:
    candidates: list = field(default_factory=list)
    scanned_count: int = 0
    has_more: bool = False
    next_cursor: str | None = None
    matching_total: int | None = None
    observation: str = "per-page-snapshot"
    principal_validation: str = "domain-required"


@dataclass(frozen=True)
class AttemptOutcome:
    """How an attempt ended, for ``finalize_atomically``: ``failed`` or ``cancelled``."""

    status: str
    message: str = ""


@dataclass(frozen=True)
class Finalization:
    state: str
    result_json: str | None = None
    reason: str | None = None
    cleanup_error: str | None = None
    elapsed: float = 0.0
    deadline_exceeded: bool = False


@dataclass(frozen=True)
class Claimed:
    """A claim handed to a worker: the lease and the job row as the claim left it."""

    lease: Lease
    job: Any  # models.Job; typed loosely so this module imports no models

    @property
    def job_id(self) -> UUID:
        return self.lease.job_id


@dataclass(frozen=True)
class Recorded:
    """What ``record_outcomes`` did with one outcome: the status written, or why not."""

    outcome: Outcome
    status: str | None  # complete, failed or cancelled; None when refused
    refusal: Exception | None = None  # a LeaseLost when the row was no longer this lease's
    error: str | None = None  # the failure message written (a cancellation nobody requested: why)


@dataclass(frozen=True)
class RequestResult:
    """What a cancellation or retry request did, and the job as the request left it.

    ``answer`` is a :class:`~django_durable_jobs.vocabulary.RequestAnswer`; ``job`` is None only
    when there is no such job (in the caller's scope). ``requested_at`` is when the request was
    first recorded: now, or earlier for ``already-requested``. Each surface (admin, CLI, API)
    formats this value; none works out again what happened.
    """

    answer: RequestAnswer
    job: Any  # models.Job | None
    requested_at: datetime | None = None

    @property
    def accepted(self) -> bool:
        """Return True when the request took (or was already recorded)."""
        return self.answer.accepted
