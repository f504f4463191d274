"""The job table's sets, named once: claimable, expired, retry requested, by ownership.

Each set is the SQL form of a rule in :mod:`django_durable_jobs.vocabulary`; where both exist
(the ownership assessment), tests prove they agree row for row on every database.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import models
from django.db.models import Case, Exists, F, OuterRef, Q, Subquery, Value, When
from django.db.models.functions import Coalesce

from ..rules.vocabulary import (
    PARKED_STATUSES,
    RETRYABLE_STATUSES,
    TERMINAL_STATUSES,
    JobStatus,
    Ownership,
)
from .expressions import Utf8Sha256

TERMINAL = sorted(TERMINAL_STATUSES)
PARKED = list(PARKED_STATUSES)
# Rows a retry request (a person's, a retry policy's, or a sleep's end) makes claimable again.
DUE_AGAIN = [*RETRYABLE_STATUSES, JobStatus.SLEEPING]


class JobQuerySet(models.QuerySet):
    def in_scope(self, scope: str | None) -> JobQuerySet:
        """Return the rows a client of ``scope`` may see (all rows for an unscoped client)."""
        return self if scope is None else self.filter(scope=scope)

    def pending_due(self, now: datetime) -> JobQuerySet:
        """Return pending, never-claimed rows whose ``run_after`` has come.

        The lease column is left to the caller's authenticity check: filtering on it here lets
        planners pick the lease index over the claim index, which already has the claim order.
        """
        return self.filter(
            Q(owner_id__isnull=True) | Q(owner_id=""),
            status=JobStatus.PENDING,
            attempts=0,
            run_after__lte=now,
        )

    def lease_expired(self, now: datetime) -> JobQuerySet:
        """Return running rows owned by someone whose lease has run out."""
        return self.filter(
            status=JobStatus.RUNNING,
            owner_id__isnull=False,
            lease_expires_at__isnull=False,
            lease_expires_at__lte=now,
        )

    def lease_live(self, now: datetime) -> JobQuerySet:
        return self.filter(
            status=JobStatus.RUNNING, owner_id__isnull=False, lease_expires_at__gt=now
        )

    def retry_requested(self, now: datetime) -> JobQuerySet:
        """Return failed or cancelled rows somebody (or a retry policy) asked to run again, due,
        and sleeping rows whose sleep is over.

        A retry policy sets ``run_after`` to the end of its backoff; a person's request is due
        at once (``run_after`` is in the past); ``ctx.sleep()`` sets it to the wake-up time.
        """
        return self.filter(
            retry_requested_at__isnull=False,
            status__in=DUE_AGAIN,
            run_after__lte=now,
        )

    def proposal_hashed(self) -> JobQuerySet:
        """Return rows whose proposal this app checked and that still matches its SHA-256.

        The store sets ``proposal_checked`` only on proposals it validated (strict JSON within
        the size and depth limits), so the flag vouches for the JSON and the matching hash for
        the text being unchanged since: no database has to parse JSON, and each judges a row
        as Python's ``vocabulary.proposal_defect`` does.
        """
        return self.alias(_proposal_sha256_sql=Utf8Sha256("proposal")).filter(
            proposal__isnull=False,
            proposal_checked=True,
            proposal_hash=F("_proposal_sha256_sql"),
        )

    def unleased(self) -> JobQuerySet:
        """Return rows without a lease, by a test no index can serve.

        ``lease_expires_at IS NULL`` would let a planner without fresh statistics prefer the
        lease index for a pending backlog and sort all of it, instead of reading the claim
        index in order and stopping after the first rows (measured: 16 ms instead of 0.3 ms for
        a claim over 5,000 pending rows on PostgreSQL).
        """
        return self.alias(
            _unleased=Case(
                When(lease_expires_at__isnull=True, then=Value(True)),
                default=Value(False),
                output_field=models.BooleanField(),
            )
        ).filter(_unleased=True)

    def retry_or_resume(self, now: datetime, resume: Iterable[str]) -> JobQuerySet:
        """Return the claimable rows that are not pending work, in one condition.

        Retry requests that are due, and expired leases that carry a retry request or belong to
        a ``resume`` operation: rare sets, which a claim checks before taking pending work so
        the claim order stays exact.
        """
        expired = Q(
            status=JobStatus.RUNNING,
            owner_id__isnull=False,
            lease_expires_at__isnull=False,
            lease_expires_at__lte=now,
        )
        wanted = Q(retry_requested_at__isnull=False)
        if resume:
            wanted |= Q(operation__in=sorted(resume))
        retry = Q(retry_requested_at__isnull=False, status__in=DUE_AGAIN)
        return self.filter((retry & Q(run_after__lte=now)) | (expired & wanted))

    def scope_turn(self, after: str) -> JobQuerySet:
        """Return this set's rows of the first scope after ``after``, wrapping around to the first.

        Claims take their turns across scopes this way (see ``store/claiming.py``): two index
        seeks on the claim index, which leads with status and scope. Each seek asks for the
        claim index's whole order, not just the scope: by scope alone a planner may pick the
        page index, which leads with the scope but not the status, and walk every finished
        job of the scope before its first pending one (measured: a drain slowed by half).
        """
        order = ("scope", "-priority", "run_after", "created_at", "id")
        following = self.filter(scope__gt=after).order_by(*order).values("scope")[:1]
        first = self.order_by(*order).values("scope")[:1]
        return self.filter(scope=Coalesce(Subquery(following), Subquery(first)))

    def paused(self) -> JobQuerySet:
        """Rows a pause in force holds: of a paused queue or operation, in its scope or all."""
        return self.filter(_pause_holds())

    def unpaused(self) -> JobQuerySet:
        """Rows no pause in force holds (a probe of the small pause table per candidate)."""
        return self.filter(~_pause_holds())

    def unless_any_pause(self) -> JobQuerySet:
        """These rows while no pause at all is in force; none while any is.

        The claim's fast statement uses it while it has met no pause lately: PostgreSQL checks
        it once per statement, where the probe of ``unpaused`` becomes an anti-join that looks
        up the pause table for every pending row before the claim sorts them (about a sixth
        of the drain rate with a backlog of thousands).
        """
        from . import JobPause

        return self.filter(~Exists(JobPause.objects.filter(active=True)))

    def in_claim_order(self) -> JobQuerySet:
        return self.order_by("-priority", "run_after", "created_at", "id")

    def with_ownership(self, now: datetime) -> JobQuerySet:
        """Annotate ``ownership_sql``: the §2 assessment computed by the database.

        It agrees with ``vocabulary.assess_ownership`` row for row (tests prove it on every database),
        so admin filters and API queries can select by ownership without reading rows into Python.
        A proposal is authentic when this app checked it as it wrote the row (``proposal_checked``)
        and its SHA-256 still matches: no JSON is parsed, since each database's JSON check has
        its own limits (MariaDB's ``JSON_VALID`` gives up at depth 32).
        """
        no_owner_id = Q(owner_id__isnull=True) | Q(owner_id="")
        # Fresh pending work, or a waiting or sleeping row (vocabulary.is_parked).
        unheld = Q(status=JobStatus.PENDING, attempts=0) | Q(status__in=PARKED)
        authentic = (
            no_owner_id
            & unheld
            & Q(
                lease_expires_at__isnull=True,
                proposal__isnull=False,
                proposal_checked=True,
                proposal_hash=F("_proposal_sha256"),
            )
        )
        no_owner = no_owner_id | Q(lease_expires_at__isnull=True) | ~Q(status=JobStatus.RUNNING)
        return self.annotate(_proposal_sha256=Utf8Sha256("proposal")).annotate(
            ownership_sql=Case(
                When(status__in=TERMINAL, then=Value(Ownership.TERMINAL)),
                When(authentic, then=Value(Ownership.UNCLAIMED)),
                When(no_owner, then=Value(Ownership.LEGACY_UNKNOWN)),
                When(lease_expires_at__lte=now, then=Value(Ownership.EXPIRED)),
                default=Value(Ownership.CURRENT),
                output_field=models.CharField(),
            )
        )

    def with_ownership_state(self, state: str, now: datetime) -> JobQuerySet:
        """Return the rows whose ownership assessment is ``state``."""
        return self.with_ownership(now).filter(ownership_sql=state)


def _pause_holds() -> Exists:
    """True for a row that a pause in force holds (``JobPause``, docs/flow-control.md)."""
    from . import JobPause

    pauses = JobPause.objects.filter(active=True).filter(
        Q(target=JobPause.Target.QUEUE, name=OuterRef("queue"))
        | Q(target=JobPause.Target.OPERATION, name=OuterRef("operation"))
    )
    return Exists(pauses.filter(Q(scope="") | Q(scope=OuterRef("scope"))))
