"""Operations of the workflow chaos proof (tests/workflows/test_chaos.py).

``tests.wfchaos.node`` runs ``steps`` durable steps (``ctx.step``), each appending a line to the
payload's ``log`` when it starts (fsynced, so a SIGKILL loses nothing already written), then
reads its parents' results (``ctx.upstream()``), spends ``tail`` seconds and returns who ran it.
The log says, per line, what began and for how many seconds: ``step`` (job, step name, epoch,
pid) or ``tail`` (the attempt is past its last step, about to return). The checker compares it with the recorded
steps (``JobStep``) and the harness reads it to pause a worker while it is in the middle of both.
"""

from __future__ import annotations

import json
import os
import time

from django_durable_jobs import operation


def _log(path: str, **line) -> None:
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps({**line, "pid": os.getpid(), "t": time.time()}) + "\n")
        log.flush()
        os.fsync(log.fileno())


@operation("tests.wfchaos.node", on_expired="resume")
def node(ctx, payload):
    """Run the node's steps, then return its tag, attempt, step results and upstream results."""
    log, tag, epoch = payload["log"], payload["tag"], ctx.lease.epoch
    results = []
    for i in range(payload.get("steps", 3)):

        def step(i=i):
            seconds = payload.get("step_seconds", 0.2)
            _log(log, what="step", job=str(ctx.job_id), step=f"s{i}", epoch=epoch, seconds=seconds)
            time.sleep(seconds)
            return f"{tag}:s{i}"

        results.append(ctx.step(f"s{i}", step))
    upstream = ctx.upstream()
    seconds = payload.get("tail_seconds", 0.3)
    _log(log, what="tail", job=str(ctx.job_id), epoch=epoch, seconds=seconds)
    time.sleep(seconds)
    return {
        "tag": tag,
        "epoch": epoch,
        "owner": ctx.lease.owner_id,
        "steps": results,
        "upstream": upstream,
    }
