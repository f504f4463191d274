"""Sample operations of the example project, discovered by django_durable_jobs at start-up."""

from __future__ import annotations

import time

from django_durable_jobs import JobCancelled, every, operation


@operation("reports.rebuild", on_expired="resume")
def rebuild_report(ctx, payload):
    """Rebuild a report in steps, checkpointing so a crashed attempt resumes where it stopped."""
    rows = int(payload.get("rows", 1000))
    step = int(payload.get("step", 100))
    done = (ctx.checkpoint_value or {}).get("rows_done", 0)
    while done < rows:
        ctx.raise_if_cancelled()
        time.sleep(float(payload.get("delay", 0.2)))
        done = min(rows, done + step)
        ctx.checkpoint({"rows_done": done})
        ctx.progress(100 * done / rows)
    return {"rows": rows, "resumed_from_attempt": ctx.attempt}


@operation("demo.wait_for_cancel")
def wait_for_cancel(ctx, payload):
    """Run until somebody requests cancellation (from the admin, the CLI or the API)."""
    deadline = time.monotonic() + float(payload.get("seconds", 600))
    while time.monotonic() < deadline:
        if ctx.cancelled:
            raise JobCancelled("Stopped on request.")
        time.sleep(0.2)
    return {"waited": payload.get("seconds", 600)}


@operation("demo.flaky")
def flaky(ctx, payload):
    """Fail with a clear message (to show failed jobs, their attempts and retries)."""
    raise RuntimeError(payload.get("message", "the upstream service answered 503"))


@operation("demo.clock", schedule=every(seconds=30))
def clock(ctx, payload):
    """A scheduled job: one every 30 seconds, however many workers run (see Schedules)."""
    return {"attempt": ctx.attempt}


# -- a workflow: fetch, then parse parts side by side, then merge (see Workflows) -----------------


@operation("imports.fetch")
def fetch(ctx, payload):
    """Fetch a day's file (a step: a reclaimed attempt does not fetch it again)."""
    size = ctx.step("download", lambda: {"bytes": 1024 * int(payload.get("parts", 4))})
    time.sleep(0.5)
    return {"day": payload["day"], **size}


@operation("imports.parse")
def parse(ctx, payload):
    """Parse one part of the file its parent fetched."""
    fetched = ctx.upstream()["fetch"]
    time.sleep(0.3 + 0.1 * int(payload["part"]))
    return {"part": payload["part"], "rows": fetched["bytes"] // 64}


@operation("imports.merge")
def merge(ctx, payload):
    """Merge every part once all of them completed; their results come from ctx.upstream()."""
    parts = ctx.upstream()
    return {"rows": sum(part["rows"] for part in parts.values()), "parts": len(parts)}


@operation("imports.wait_a_little")
def wait_a_little(ctx, payload):
    """Sleep durably once (the slot is freed meanwhile), then complete."""
    if not ctx.checkpoint_value:
        ctx.checkpoint({"slept": True})
        ctx.sleep(float(payload.get("seconds", 20)))
    return {"woke": True}


# -- flow control: a rate limit and one-at-a-time per customer (see Flow control) ----------------


@operation("payments.charge", rate_limit="2/s")
def charge(ctx, payload):
    """Call a payment provider that allows two calls a second, whatever the number of workers."""
    return {"charged": payload["amount"], "customer": payload["customer"]}


@operation(
    "crm.sync_customer",
    max_running_per_key=1,
    concurrency_key=lambda payload: payload["customer"],
)
def sync_customer(ctx, payload):
    """Sync one customer's records; two syncs of one customer never run at once."""
    time.sleep(float(payload.get("seconds", 2)))
    return {"customer": payload["customer"]}
