"""The flow benchmark's operations (``python -m benchmarks.flow``): one rate-limited, one free."""

from __future__ import annotations

from django_durable_jobs import operation

LIMITED = "flowbench.limited"
FREE = "flowbench.free"
RATE = "200/s"


@operation(LIMITED, rate_limit=RATE)
def limited(ctx, payload):
    return None


@operation(FREE)
def free(ctx, payload):
    return None
