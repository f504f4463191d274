"""What the claiming, leases and ending tests share: a backlog of tied jobs, and the SQL a call sent."""

from __future__ import annotations

from django_durable_jobs.models import Job
from django_durable_jobs.store import DurableJobStore
from tests.support import submission

OP = "batch.op"


def backlog(store: DurableJobStore, count: int, op: str = OP, **kwargs) -> list[Job]:
    """Defer ``count`` jobs at the clock's time; return them in claim order.

    They tie on priority, ``run_after`` and ``created_at``, so the id decides, in the database's
    own order of ids (MariaDB's UUID type does not sort like the text of the id).
    """
    jobs = [store.defer(op, submission({"n": n}, key=f"{op}-{n}"), **kwargs) for n in range(count)]
    return list(Job.objects.filter(pk__in=[j.pk for j in jobs]).order_by("created_at", "id"))


def statements(queries) -> list[str]:
    """Return the SQL of ``queries`` without transaction control and lock-policy chatter."""
    skip = ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE", "ROLLBACK")
    return [q["sql"] for q in queries if not q["sql"].upper().startswith(skip)]
