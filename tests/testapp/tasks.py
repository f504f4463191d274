"""Django tasks (``@task``) the backend tests enqueue; needs Django 6 (django.tasks).

Imported by the tests and, in a worker, by ``runjobs``' task discovery. Each task that a test
watches from outside writes a marker file into ``folder``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from django.tasks import task

from django_durable_jobs.rules.retry import RetryPolicy


def _mark(folder: str | None, name: str, text: str = "") -> None:
    if folder:
        with Path(folder, name).open("a") as out:
            out.write(text + "\n")


@task
def add(a, b):
    return a + b


@task
async def async_double(x):
    await asyncio.sleep(0)
    return 2 * x


@task
async def where_async():
    """Return the name of the thread the coroutine ran in."""
    await asyncio.sleep(0)
    return threading.current_thread().name


@task(takes_context=True)
def with_context(context, note):
    return {"attempt": context.attempt, "id": context.task_result.id, "note": note}


@task
def explode(message):
    raise ValueError(message)


@task(
    takes_context=True, retry=RetryPolicy(max_attempts=3, base_delay=0.1, max_delay=0.2, jitter=0)
)
def third_time_lucky(context):
    if context.attempt < 3:
        raise RuntimeError(f"attempt {context.attempt} fails")
    return {"attempt": context.attempt}


@task(timeout=1.0)
def too_slow(seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # computes without calling the store
        time.sleep(0.01)
    return "finished anyway"


@task(idempotency_key=lambda folder, n: f"keyed-{n}")
def keyed(folder, n):
    _mark(folder, f"keyed-{n}", "ran")
    return n


@task(queue_name="ordered")
def record(folder, name):
    _mark(folder, "order", name)
    return name


@task
def not_json():
    return object()
