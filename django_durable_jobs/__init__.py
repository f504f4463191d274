"""django_durable_jobs: durable, lease-fenced jobs in your Django database."""

from types import ModuleType

from . import _aliases  # first: the old paths of moved modules keep working (see its docstring)
from .rules import errors as errors  # the public home of the error classes (see rules/errors.py)
from .rules.errors import JobCancelled, JobError
from .rules.registry import operation
from .schedules import every

__all__ = [
    "JobCancelled",
    "JobError",
    "Workflow",
    "chain",
    "chord",
    "every",
    "group",
    "operation",
    "submit",
    "submit_many",
]

# Imported when first used: they need the app's models, which a settings module cannot.
_WORKFLOW_NAMES = frozenset({"Workflow", "chain", "chord", "group"})


def submit(operation, payload, **options):  # noqa: ANN001, ANN201 - typed in .submission
    """Enqueue pending work; see :func:`django_durable_jobs.submission.submit`."""
    from .submission import submit as submit_job

    return submit_job(operation, payload, **options)


def submit_many(operation, payloads, **options):  # noqa: ANN001, ANN201 - typed in .submission
    """Enqueue one job per payload; see :func:`django_durable_jobs.submission.submit_many`."""
    from .submission import submit_many as submit_jobs

    return submit_jobs(operation, payloads, **options)


def __getattr__(name: str) -> ModuleType:
    """Return the workflow names, or a moved module under its old attribute name
    (``django_durable_jobs.errors``)."""
    if name in _WORKFLOW_NAMES:
        from . import workflows

        return getattr(workflows, name)
    return _aliases.moved_module(name)


__version__ = "0.1.0"
