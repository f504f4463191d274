"""A claimer in a process of its own, racing others on a rate limit or a concurrency key.

Run as ``python -m tests.flow.flow_child JSON_ARGS`` with the ``db_settings_env`` environment.
It registers the limited operations, opens its connection, prints ``{"ready": true}``, waits for
``go <unix time>`` on stdin, then loops ``claim_batch`` over ``operation`` until nothing of it is
pending, holding each batch ``hold`` ([min, max]) seconds before completing it. Right after each
claim it counts the running rows of every concurrency key it took; it prints one JSON line with
the jobs it claimed and the most running rows of one key it saw.

``DURABLE_JOBS_TEST_SKIP_FLOW_CHECK=1`` (read here only, never by the package) replaces the
admission check with one that admits everything, so the parent can prove its checker catches
an excess.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from typing import Any

from tests.race_child import REPO_ROOT, Backlog, Child, Children, _emit

RATED = "flow.race.rated"
KEYED = "flow.race.keyed"
RATE = "10/s"
PER_KEY = 2


def customer(payload: Any) -> str:
    return payload["customer"]


def register() -> None:
    from django_durable_jobs.rules import registry

    registry.operation(RATED, rate_limit=RATE)(lambda ctx, payload: None)
    registry.operation(KEYED, max_running_per_key=PER_KEY, concurrency_key=customer)(
        lambda ctx, payload: None
    )


def run(args: dict[str, Any]) -> dict[str, Any]:
    from django_durable_jobs.models import Job, JobStatus
    from django_durable_jobs.rules.values import Outcome
    from django_durable_jobs.store import DurableJobStore

    store = DurableJobStore(actor=args["actor"], lease_seconds=60.0)
    jobs = Job.objects.filter(operation=args["operation"])
    low, high = args.get("hold", [0.0, 0.0])
    rng = random.Random(args["actor"])
    result = json.dumps({"by": args["actor"]})
    claimed: list[str] = []
    most_per_key = 0
    backlog = Backlog(jobs.filter(status=JobStatus.PENDING), rng)
    while True:
        batch = store.claim_batch(operations=[args["operation"]], limit=args["limit"])
        if not batch:
            if not backlog.wait():
                break
            continue
        keys = {c.job.concurrency_key for c in batch}
        for key in keys:
            running = jobs.filter(status=JobStatus.RUNNING, concurrency_key=key).count()
            most_per_key = max(most_per_key, running)
        claimed.extend(str(c.lease.job_id) for c in batch)
        time.sleep(rng.uniform(low, high))
        store.record_outcomes([Outcome.completed(c.lease, result) for c in batch])
    return {"actor": args["actor"], "claimed": claimed, "most_per_key": most_per_key}


def main(raw: str) -> None:
    import django

    args = json.loads(raw)
    django.setup()
    register()
    if os.environ.get("DURABLE_JOBS_TEST_SKIP_FLOW_CHECK") == "1":
        from django_durable_jobs.store import limits

        limits.admit = lambda *a, **k: None  # the row-by-row path admits every row
        limits.bucket_room = lambda *a, **k: (10**6, [])  # a whole bucket always has room
        limits.record_starts = lambda *a, **k: None
    from django.db import connection

    connection.ensure_connection()
    _emit({"ready": True})
    signal = sys.stdin.readline().split()
    start_at = float(signal[1])
    while time.time() < start_at:
        time.sleep(0.001)
    try:
        outcome = run(args)
    except Exception as exc:  # reported to the parent, which fails the test with it
        outcome = {"unexpected": f"{type(exc).__name__}: {exc}"}
    _emit(outcome)


# -- parent side ---------------------------------------------------------------------------------


class FlowChild(Child):
    def __init__(self, args: dict[str, Any], env: dict[str, str]) -> None:  # noqa: D107
        import queue
        import threading

        self.action = "flow race"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.flow.flow_child", json.dumps(args)],
            env={**os.environ, **env},
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines = queue.Queue()
        self.stderr = []
        threading.Thread(target=self._pump_stdout, daemon=True).start()
        threading.Thread(target=self._pump_stderr, daemon=True).start()


class FlowChildren(Children):
    def __init__(self, env: dict[str, str], args_list: list[dict[str, Any]]) -> None:  # noqa: D107
        self.children = [FlowChild(args, env) for args in args_list]


if __name__ == "__main__":
    main(sys.argv[1])
