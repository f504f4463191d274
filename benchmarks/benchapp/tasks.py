"""The no-op task django-tasks-db runs in the side-by-side benchmark (Django's ``django.tasks``)."""

from __future__ import annotations

import time

from django.tasks import task


@task
def noop(**payload: object) -> float:
    """Do nothing; return when it started (Unix time), for the latency figures."""
    return time.time()
