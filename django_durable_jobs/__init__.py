"""django_durable_jobs: durable, lease-fenced jobs in your Django database."""

from .errors import JobCancelled, JobError
from .registry import operation

__all__ = ["JobCancelled", "JobError", "operation"]
__version__ = "0.1.0"
