"""Benchmark operations, discovered by django_durable_jobs like any app's ``jobs.py``."""

from __future__ import annotations

import time

from django_durable_jobs import operation


@operation("bench.noop")
def noop(ctx, payload):
    """Do nothing; return when the executor started (Unix time), for the latency figures."""
    return {"started": time.time()}
