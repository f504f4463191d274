"""The ``async def`` operation of the worker benchmark's wait phase (``benchmarks.worker_latency``).

Its app is installed only in the workers of that phase (``DURABLE_JOBS_BENCH_ASYNC=1``): a worker
that serves an ``async def`` operation claims for its event loop too, which the other phases'
figures must not include.
"""

from __future__ import annotations

import asyncio
import time

from django_durable_jobs import operation

ASYNC_SLEEP = "bench.async_sleep"


@operation(ASYNC_SLEEP)
async def async_sleep(ctx, payload):
    """Await ``asyncio.sleep(seconds)``; return when it started and ended (Unix time)."""
    started = time.time()
    await asyncio.sleep(payload["seconds"])
    return {"ran": [started, time.time()]}
