"""Operations of the chaos run (tests/chaos): every one resumable, every one saying who ran it.

* ``chaos.domain`` checkpoints a few times, then writes one ``ChaosRow`` naming its attempt
  (job, epoch, owner) and completes in the same fenced transaction (``complete_atomically``);
* ``chaos.plain`` only returns its attempt's epoch and owner, so the worker's own batched
  completion (``record_outcomes``) is the fenced write under test;
* ``chaos.tick`` is what the run's schedule submits every second; it returns the same.

The checker compares what each wrote with the attempt that completed the job.
"""

from __future__ import annotations

import json
import time

from django_durable_jobs import operation

from .models import ChaosRow


def _attempt(ctx) -> dict:
    return {"epoch": ctx.lease.epoch, "owner": ctx.lease.owner_id}


@operation("chaos.domain", on_expired="resume")
def domain(ctx, payload):
    """Checkpoint ``steps`` times (``sleep`` seconds apart), then write the domain row and complete."""
    done = (ctx.checkpoint_value or {}).get("done", 0)
    while done < payload.get("steps", 3):
        time.sleep(payload.get("sleep", 0.01))
        done += 1
        ctx.checkpoint({"done": done, "epoch": ctx.lease.epoch})

    def mutation(execution) -> str:
        row = ChaosRow.objects.create(
            job_id=ctx.job_id, epoch=ctx.lease.epoch, owner_id=ctx.lease.owner_id
        )
        return json.dumps({**_attempt(ctx), "row": row.pk}, sort_keys=True)

    return json.loads(ctx.complete_atomically(mutation))


@operation("chaos.plain", on_expired="resume")
def plain(ctx, payload):
    """Sleep ``sleep`` seconds, then return the attempt's epoch and owner."""
    time.sleep(payload.get("sleep", 0.01))
    return _attempt(ctx)


@operation("chaos.tick", on_expired="resume")
def tick(ctx, payload):
    """Return the attempt's epoch and owner: a tick of the chaos run's schedule."""
    return _attempt(ctx)
