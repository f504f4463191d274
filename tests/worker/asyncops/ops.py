"""``async def`` operations of the event-loop tests (tests/worker/test_event_loop.py).

Registered only in the workers of those tests (``tests.settings_async`` installs this app) and
in the test process while a test uses them (``registered()``): registered everywhere, every other
worker test's worker would claim for its event loop too.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from contextlib import AbstractContextManager

from django_durable_jobs import operation
from tests import registering
from tests.markers import write_marker
from tests.testapp.models import DomainRow

SLEEP = "asyncops.sleep"
WAIT = "asyncops.wait"
TIMED = "asyncops.timed"
CHECKPOINTS = "asyncops.checkpoints"
WRITES = "asyncops.writes"
EXITS = "asyncops.exits"
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


async def writes(ctx, payload):
    """Use every awaitable write of ``ctx``: two steps (a plain and an ``async def`` function),
    progress, a checkpoint and a durable sleep the first time, and a completion with a domain
    row. Its markers are named by the attempt's epoch (a sleep does not count an attempt)."""
    epoch = ctx.lease.epoch

    def plain():
        _mark(payload, f"plain-{epoch}")
        return 1

    async def awaited():
        _mark(payload, f"awaited-{epoch}")
        await asyncio.sleep(0)
        return 2

    steps = [await ctx.astep("plain", plain), await ctx.astep("awaited", awaited)]
    await ctx.aprogress(50)
    if not ctx.checkpoint_value:
        await ctx.acheckpoint({"slept": True})
        await ctx.asleep(0.1)  # nothing after it runs in this attempt

    def mutation(execution) -> str:
        DomainRow.objects.create(job_id=ctx.job_id, value="written")
        return json.dumps({"steps": steps, "epoch": epoch})

    return await ctx.acomplete_atomically(mutation)


async def exits(ctx, payload):
    """Raise SystemExit from a task of the event loop."""
    await asyncio.sleep(0)
    raise SystemExit(3)


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
    operation(WRITES)(writes)
    operation(EXITS)(exits)


def registered() -> AbstractContextManager[None]:
    """Register the operations in this (the test's) process while the block runs."""
    return registering.registered(register, (SLEEP, WAIT, TIMED, CHECKPOINTS, WRITES, EXITS))
