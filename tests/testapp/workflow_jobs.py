"""Operations of the workflow and step tests (tests/workflows/)."""

from __future__ import annotations

import os
import time

from django_durable_jobs import operation
from django_durable_jobs.rules.retry import RetryPolicy
from tests.markers import write_marker


def _note(payload, line: str) -> None:
    """Append ``line`` to ``payload["log"]`` (one line per event, across processes)."""
    path = payload.get("log") if isinstance(payload, dict) else None
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(line + "\n")
            log.flush()
            os.fsync(log.fileno())


@operation("tests.wf.echo")
def echo(ctx, payload):
    """Return the node's tag and what its parents returned."""
    _note(payload, f"run {payload.get('tag')} {ctx.job_id}")
    return {"tag": payload.get("tag"), "upstream": ctx.upstream()}


@operation("tests.wf.fail")
def fail(ctx, payload):
    _note(payload, f"run {payload.get('tag')} {ctx.job_id}")
    raise RuntimeError(f"{payload.get('tag')} failed")


@operation("tests.wf.flaky", retry=RetryPolicy(max_attempts=2, base_delay=0, jitter=0))
def flaky(ctx, payload):
    """Fail the first attempt, complete the second (a retry policy's retry)."""
    _note(payload, f"run {payload.get('tag')} {ctx.attempt}")
    if ctx.attempt == 1:
        raise RuntimeError("first attempt fails")
    return {"attempt": ctx.attempt}


@operation("tests.wf.steps", on_expired="resume")
def steps(ctx, payload):
    """Run ``count`` steps, each noting its run; hang after ``hang_after`` steps on attempt 1."""
    total = 0
    for i in range(payload.get("count", 3)):

        def step(i=i):
            _note(payload, f"step {i} {ctx.attempt}")
            return i * i

        total += ctx.step(f"s{i}", step)
        if payload.get("hang_after") == i + 1 and ctx.attempt == 1:
            marker = payload.get("marker")
            if marker:
                write_marker(marker, str(os.getpid()))
            time.sleep(600)
    return {"total": total}


@operation("tests.wf.sleeper")
def sleeper(ctx, payload):
    """Record a step, sleep ``seconds`` once, then complete with the step's result."""
    first = ctx.step("before", lambda: (_note(payload, "before"), 41)[1])
    if not ctx.checkpoint_value:
        ctx.checkpoint({"slept": True})
        ctx.sleep(payload.get("seconds", 1))
    _note(payload, f"after {ctx.attempt}")
    return {"value": first + 1, "attempt": ctx.attempt}


from . import workflow_chaos_jobs  # noqa: F401,E402
