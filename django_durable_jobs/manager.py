"""The in-process runner under its former name: ``JobManager`` is ``InProcessRunner``.

``JobManager`` ran jobs in threads of the calling process; in a Django app "manager" means
``Job.objects``, so the class is now :class:`django_durable_jobs.worker.InProcessRunner`. This
module keeps the old import path working.
"""

from .worker import InProcessRunner

JobManager = InProcessRunner

__all__ = ["InProcessRunner", "JobManager"]
