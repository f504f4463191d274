"""django_durable_jobs: durable, lease-fenced jobs in your Django database."""

from .errors import JobCancelled, JobError
from .registry import operation
from .schedules import every

__all__ = ["JobCancelled", "JobError", "every", "operation", "submit", "submit_many"]


def submit(operation, payload, **options):  # noqa: ANN001, ANN201 - typed in .submission
    """Enqueue pending work; see :func:`django_durable_jobs.submission.submit`."""
    from .submission import submit as submit_job

    return submit_job(operation, payload, **options)


def submit_many(operation, payloads, **options):  # noqa: ANN001, ANN201 - typed in .submission
    """Enqueue one job per payload; see :func:`django_durable_jobs.submission.submit_many`."""
    from .submission import submit_many as submit_jobs

    return submit_jobs(operation, payloads, **options)


__version__ = "0.1.0"
