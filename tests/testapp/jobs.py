"""Operations the worker tests run (discovered like any app's jobs.py).

Behaviour is driven by the payload, so one operation serves many tests.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from django_durable_jobs import JobCancelled, operation
from tests.markers import write_marker

from .models import DomainRow


def _touch(payload: dict, name: str, text: str = "") -> None:
    """Write a marker file (``payload["markers"]`` is a folder) so a test can wait on it."""
    folder = payload.get("markers")
    if folder:
        write_marker(Path(folder, name), text)


@operation("tests.steps", on_expired="resume")
def steps(ctx, payload):
    """Count to ``steps``, checkpointing each step; resumes from the checkpoint."""
    done = (ctx.checkpoint_value or {}).get("done", 0)
    _touch(payload, f"started-{ctx.job_id}-{ctx.attempt}", str(done))
    while done < payload.get("steps", 3):
        ctx.raise_if_cancelled()
        time.sleep(payload.get("delay", 0.0))
        done += 1
        ctx.checkpoint({"done": done})
        ctx.progress(100 * done / payload.get("steps", 3))
        _touch(payload, f"step-{ctx.job_id}-{ctx.attempt}-{done}")
    return {"done": done, "attempt": ctx.attempt}


@operation("tests.hold", on_expired="hold")
def hold(ctx, payload):
    """Like tests.steps but a human must decide after an expired lease."""
    return steps(ctx, payload)


@operation("tests.wait_cancel")
def wait_cancel(ctx, payload):
    """Run until cancellation is requested, then acknowledge it (or time out and return)."""
    _touch(payload, f"started-{ctx.job_id}-{ctx.attempt}")
    deadline = time.monotonic() + payload.get("seconds", 30)
    while time.monotonic() < deadline:
        if ctx.cancelled:
            _touch(payload, f"cancelled-{ctx.job_id}")
            raise JobCancelled("stopped on request")
        time.sleep(0.02)
    return {"finished": True}


@operation("tests.sleep")
def sleep(ctx, payload):
    """Sleep ``seconds`` without looking at cancellation, then return."""
    _touch(payload, f"started-{ctx.job_id}-{ctx.attempt}")
    time.sleep(payload.get("seconds", 1))
    return {"slept": payload.get("seconds", 1), "attempt": ctx.attempt}


@operation("tests.domain_write")
def domain_write(ctx, payload):
    """Write one DomainRow and complete the job in the same fenced transaction."""

    def write(execution):
        row = DomainRow.objects.create(job_id=ctx.job_id, value=str(payload.get("value", "")))
        return json.dumps({"row": row.pk})

    return ctx.complete_atomically(write)


@operation("tests.fail")
def fail(ctx, payload):
    """Raise RuntimeError(``message``), or SystemExit(``exit``) when the payload gives one."""
    if "exit" in payload:
        raise SystemExit(payload["exit"])
    raise RuntimeError(payload.get("message", "boom"))


@operation("tests.noop")
def noop(ctx, payload):
    return None


@operation("tests.gate")
def gate(ctx, payload):
    """Note whether cancellation was already requested at start, then wait for the test.

    The start marker's text is ``cancelled=True`` or ``cancelled=False``. The job completes once
    the test creates ``open-<job id>`` in the markers folder, acknowledges a cancellation
    request, or fails after ``seconds`` (so a test that never opens it cannot hang).
    """
    _touch(payload, f"started-{ctx.job_id}-{ctx.attempt}", f"cancelled={ctx.cancelled}")
    opened = Path(payload["markers"], f"open-{ctx.job_id}")
    deadline = time.monotonic() + payload.get("seconds", 30)
    while not opened.exists():
        if ctx.cancelled:
            _touch(payload, f"cancelled-{ctx.job_id}")
            raise JobCancelled("stopped on request")
        if time.monotonic() > deadline:
            raise RuntimeError("the test never opened the gate")
        time.sleep(0.02)
    return {"opened": True, "attempt": ctx.attempt}


@operation("tests.stubborn", timeout=0.5)
def stubborn(ctx, payload):
    """Wait for ``open-<job id>`` (or ``seconds``) without looking at ``ctx`` at all, then write.

    Times out after 0.5 s. Once the gate opens it tries a checkpoint and notes in the marker
    ``returned-<job id>`` whether it was ``accepted`` or refused.
    """
    _touch(payload, f"started-{ctx.job_id}-{ctx.attempt}")
    opened = Path(payload["markers"], f"open-{ctx.job_id}")
    deadline = time.monotonic() + payload.get("seconds", 30)
    while not opened.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        ctx.checkpoint({"late": True})
        written = "accepted"
    except Exception as exc:  # noqa: BLE001 - the test reads what happened
        written = f"refused: {type(exc).__name__}"
    _touch(payload, f"returned-{ctx.job_id}", written)
    return {"returned": True}


@operation("tests.polite", timeout=0.5)
def polite(ctx, payload):
    """Run ``seconds`` (default 30), stopping as soon as ``ctx.cancelled``; times out after 0.5 s."""
    _touch(payload, f"started-{ctx.job_id}-{ctx.attempt}")
    deadline = time.monotonic() + payload.get("seconds", 30)
    while time.monotonic() < deadline:
        ctx.raise_if_cancelled()
        time.sleep(0.02)
    return {"finished": True}


@operation("tests.tick")
def tick(ctx, payload):
    """Do nothing: a schedule's tick (tests/worker/test_scheduler.py counts the jobs)."""
    return None


@operation("tests.slow_tick")
def slow_tick(ctx, payload):
    """Run while the marker file ``payload["hold"]`` exists in ``payload["markers"]`` (30 s at most).

    A schedule's tick whose job is still running: the overlap tests remove the file to end it.
    """
    _touch(payload, f"started-{ctx.job_id}")
    hold = Path(payload["markers"], payload.get("hold", "hold"))
    deadline = time.monotonic() + 30
    while hold.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return None


@operation("tests.exit_process", on_expired="resume")
def exit_process(ctx, payload):
    """End the whole worker process at once with ``os._exit(code)`` (default 7): no outcome.

    Only on the attempts listed in ``exit_on`` (default: every attempt); another attempt returns,
    so the attempt that resumes the job after the dead process's lease expired completes it.
    """
    _touch(payload, f"started-{ctx.job_id}-{ctx.attempt}")
    if ctx.attempt in payload.get("exit_on", [ctx.attempt]):
        os._exit(payload.get("code", 7))
    return {"attempt": ctx.attempt}


from . import chaos_jobs  # noqa: F401,E402

# -- Added for tests/proof/test_faults_worker.py ---------------------------------------------------


@operation("tests.large")
def large(ctx, payload):
    """Checkpoint ``payload["blob"]``, wait for ``open-all`` in the markers folder (30 s at most),
    then return it: attempts that end together, each with large rows to record."""
    _touch(payload, f"started-{ctx.job_id}-{ctx.attempt}")
    ctx.checkpoint({"blob": payload["blob"]})
    opened = Path(payload["markers"], "open-all")
    deadline = time.monotonic() + 30
    while not opened.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return {"blob": payload["blob"]}


from . import workflow_jobs  # noqa: F401,E402
