"""The flow benchmark's operations (``python -m benchmarks.flow``): one rate-limited, one free."""

from __future__ import annotations

import os

from django_durable_jobs import operation

LIMITED = "flowbench.limited"
FREE = "flowbench.free"
RATE = "200/s"
# The benchmark's baseline phase declares no limit at all: the unlimited drain rate.
UNLIMITED = os.environ.get("DURABLE_JOBS_FLOW_BENCH_UNLIMITED") == "1"


@operation(LIMITED, rate_limit=None if UNLIMITED else RATE)
def limited(ctx, payload):
    return None


@operation(FREE)
def free(ctx, payload):
    return None
