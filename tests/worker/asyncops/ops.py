"""``async def`` operations of the event-loop tests (tests/worker/test_event_loop.py).

Registered only in the workers of those tests (``tests.settings_async`` installs this app) and
in the test process while a test uses them (``registered()``): registered everywhere, every other
worker test's worker would claim for its event loop too.
"""

from __future__ import annotations

import asyncio
import threading
import time
from contextlib import AbstractContextManager

from django_durable_jobs import operation
from tests import registering
from tests.markers import write_marker

SLEEP = "asyncops.sleep"
WAIT = "asyncops.wait"
TIMED = "asyncops.timed"
CHECKPOINTS = "asyncops.checkpoints"
TIMEOUT = 1.0  # seconds, of TIMED


async def sleep(ctx, payload):
    """Await ``asyncio.sleep(seconds)``; return where and when (``time.time()``) it ran."""
    started = time.time()
    await asyncio.sleep(payload.get("seconds", 0))
    return {"thread": threading.current_thread().name, "ran": [started, time.time()]}


async def wait(ctx, payload):
    """Wait until cancelled, marking ``started-<id>`` and then ``cancelled-<id>`` (re-raised)."""
    _mark(payload, f"started-{ctx.job_id}")
    try:
        while True:
            await asyncio.sleep(0.05)
    except asyncio.CancelledError:
        _mark(payload, f"cancelled-{ctx.job_id}")
        raise


async def checkpoints(ctx, payload):
    """Count to ``steps``, checkpointing each step through ``ctx.acheckpoint``; resumable.

    The first attempt, after ``pause_after`` steps, marks ``paused-<id>`` and awaits a long
    sleep before its next write: a test freezes the worker there, outside any transaction.
    How an attempt ended, if not by returning, is marked in ``ended-<id>-<attempt>``.
    """
    done = (ctx.checkpoint_value or {}).get("done", 0)
    try:
        while done < payload["steps"]:
            if ctx.attempt == 1 and done == payload.get("pause_after"):
                _mark(payload, f"paused-{ctx.job_id}")
                await asyncio.sleep(120)
            done += 1
            await ctx.acheckpoint({"done": done})
    except BaseException as exc:
        _mark(payload, f"ended-{ctx.job_id}-{ctx.attempt}", type(exc).__name__)
        raise
    return {"done": done, "attempt": ctx.attempt}


def _mark(payload, name: str, text: str = "") -> None:
    folder = payload.get("markers")
    if folder:
        write_marker(f"{folder}/{name}", text or str(time.time()))


def register() -> None:
    """Register the operations (idempotent: the same functions again are accepted)."""
    operation(SLEEP)(sleep)
    operation(WAIT)(wait)
    operation(TIMED, timeout=TIMEOUT)(wait)
    operation(CHECKPOINTS, on_expired="resume")(checkpoints)


def registered() -> AbstractContextManager[None]:
    """Register the operations in this (the test's) process while the block runs."""
    return registering.registered(register, (SLEEP, WAIT, TIMED, CHECKPOINTS))
