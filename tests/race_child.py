"""Racing and lock-holding clients in separate OS processes, and the parent side that drives them.

Child side, run as ``python -m tests.race_child ACTION JSON_ARGS`` with the environment of the
``db_settings_env`` fixture:

* a racing action (``claim``, ``defer``, ``retry``, ``claim_next``, ``submit_many``) sets Django
  up, builds its store, opens its database connection, prints ``{"ready": true}`` and blocks on
  stdin until the parent sends ``go <unix time>``; it then waits for that instant (so every racer
  starts at once) and prints one JSON line with its outcome: what it won, ``{"code": ...}`` for a
  ``JobError``, or ``{"unexpected": ...}`` for anything else (a deadlock, say);
* ``claim_batch`` is a racing action that loops ``claim_batch`` over one operation until nothing
  of it is pending, holding each batch for a random moment (``hold``: [min, max] seconds) before
  ending it with ``record_outcomes``; right after each claim it counts the operation's running
  rows, and it reports every job it claimed;
* ``hold`` opens a transaction that locks one job row (``SELECT ... FOR UPDATE``; on SQLite the
  write lock every IMMEDIATE transaction takes at BEGIN), prints ``{"locked": true}``, waits for
  a line on stdin (at most ``HOLD_MAX`` seconds), rolls back (it changes nothing) and prints
  ``{"released": true}``.

Parent side: :class:`Children` starts such processes, waits for them to be ready, starts the race
and collects the outcomes, killing anything left over.
"""

from __future__ import annotations

import json
import os
import queue
import select
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
CHILD_TIMEOUT = 60.0
HOLD_MAX = 10.0

# -- child side ------------------------------------------------------------------------------------


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _store(args: dict[str, Any]):
    from django_durable_jobs.store import DurableJobStore

    if "durable_jobs" in args:  # the parent's DURABLE_JOBS settings, e.g. quotas
        from django.test import override_settings

        override_settings(DURABLE_JOBS=args["durable_jobs"]).enable()
    fixed = datetime.fromisoformat(args["clock"])
    return DurableJobStore(actor=args["actor"], lease_seconds=30.0, clock=lambda: fixed)


def _prepare_claim(args: dict[str, Any]):
    store = _store(args)

    def run() -> dict[str, Any]:
        lease = store.claim(args["job_id"])
        return {"job_id": str(lease.job_id), "epoch": lease.epoch, "owner_id": lease.owner_id}

    return run


def _prepare_defer(args: dict[str, Any]):
    from django_durable_jobs.store import Submission

    store = _store(args)
    submission = Submission.of(args["scope"], args["key"], args["payload"])

    def run() -> dict[str, Any]:
        job = store.defer(args["operation"], submission, job_id=args["job_id"])
        return {"job_id": str(job.pk), "status": job.status, "epoch": job.fencing_epoch}

    return run


def _prepare_retry(args: dict[str, Any]):
    from django_durable_jobs.rules.execution import Execution, Identity
    from tests.testapp.models import RetryHistory

    store = _store(args)
    identity = Identity(args["scope"], args["actor"], args["operation"], args["key"])

    def retain_outcome(previous_row_json: str) -> str:
        previous = json.loads(previous_row_json)
        RetryHistory.objects.create(
            job_id=previous["id"],
            previous_status=previous["status"],
            previous_epoch=previous["fencing_epoch"],
        )
        return json.dumps({"retained_by": args["actor"]})

    def run() -> dict[str, Any]:
        execution = Execution.start(identity, budget=CHILD_TIMEOUT)
        lease = store.retry_atomically(args["job_id"], execution, retain_outcome)
        return {"job_id": str(lease.job_id), "epoch": lease.epoch, "owner_id": lease.owner_id}

    return run


def _prepare_claim_next(args: dict[str, Any]):
    store = _store(args)

    def run() -> dict[str, Any]:
        claimed: list[list[Any]] = []
        batches = 0
        while True:
            leases = store.claim_next(limit=args["limit"])
            if not leases:
                break
            batches += 1
            claimed.extend([str(lease.job_id), lease.epoch] for lease in leases)
        return {"owner_id": store.owner_id, "claimed": claimed, "batches": batches}

    return run


class Backlog:
    """A racing claimer's view of the jobs still pending, after a claim that got none.

    ``wait()`` returns False once none is pending; otherwise it sleeps 10-30 ms and returns
    True. It raises when the pending count has not moved for half the child's time: stuck, not
    merely slow (a loaded machine may take longer than that over the whole backlog).
    """

    def __init__(self, pending: Any, rng: Any) -> None:
        self.pending = pending
        self.rng = rng
        self.seen: int | None = None
        self.give_up = 0.0

    def wait(self) -> bool:
        left = self.pending.count()
        if not left:
            return False
        if left != self.seen:
            self.seen = left
            self.give_up = time.monotonic() + CHILD_TIMEOUT / 2
        if time.monotonic() > self.give_up:
            raise RuntimeError(f"{left} pending jobs stayed unclaimable")
        # Not at once: on SQLite every claim takes the write lock, and claimers retrying every
        # few milliseconds starve the holders' completions of it.
        time.sleep(self.rng.uniform(0.01, 0.03))
        return True


def _prepare_claim_batch(args: dict[str, Any]):
    import random

    from django_durable_jobs.models import Job, JobStatus
    from django_durable_jobs.rules.values import Outcome

    store = _store(args)
    jobs = Job.objects.filter(operation=args["operation"])
    low, high = args.get("hold", [0.0, 0.0])
    rng = random.Random(args["actor"])
    result = json.dumps({"by": args["actor"]})

    def run() -> dict[str, Any]:
        claimed: list[list[Any]] = []
        batches = waits = most_running = largest = 0
        refused: list[str] = []
        backlog = Backlog(jobs.filter(status=JobStatus.PENDING), rng)
        while True:
            batch = store.claim_batch(
                operations=[args["operation"]],
                limit=args["limit"],
                max_running=args.get("max_running"),
            )
            if not batch:
                if not backlog.wait():
                    break
                waits += 1  # the rest is locked by other claimers, or the limit is reached
                continue
            most_running = max(most_running, jobs.filter(status=JobStatus.RUNNING).count())
            batches += 1
            largest = max(largest, len(batch))
            claimed.extend([str(c.lease.job_id), c.lease.epoch] for c in batch)
            time.sleep(rng.uniform(low, high))
            recorded = store.record_outcomes([Outcome.completed(c.lease, result) for c in batch])
            refused.extend(str(r.outcome.lease.job_id) for r in recorded if r.status != "complete")
        return {
            "actor": args["actor"],
            "owner_id": store.owner_id,
            "claimed": claimed,
            "batches": batches,
            "largest": largest,
            "waits": waits,
            "most_running": most_running,
            "refused": refused,
        }

    return run


def _prepare_submit_many(args: dict[str, Any]):
    from django_durable_jobs import submit_many

    def run() -> dict[str, Any]:
        jobs = submit_many(args["operation"], args["payloads"], idempotency_keys=args["keys"])
        return {"job_ids": [str(job.pk) for job in jobs]}

    return run


RACES = {
    "claim": _prepare_claim,
    "defer": _prepare_defer,
    "retry": _prepare_retry,
    "claim_next": _prepare_claim_next,
    "claim_batch": _prepare_claim_batch,
    "submit_many": _prepare_submit_many,
}


def _race(action: str, args: dict[str, Any]) -> None:
    from django.db import connection

    from django_durable_jobs.rules.errors import JobError

    run = RACES[action](args)
    connection.ensure_connection()
    _emit({"ready": True})
    signal = sys.stdin.readline().split()
    if len(signal) != 2 or signal[0] != "go":
        _emit({"unexpected": f"no start signal (got {signal!r})"})
        return
    start_at = float(signal[1])
    while (left := start_at - time.time()) > 0.002:
        time.sleep(left - 0.002)
    while time.time() < start_at:
        pass
    try:
        outcome = run()
    except JobError as exc:
        outcome = {"code": exc.code, "message": exc.message}
    except Exception as exc:  # reported to the parent, which fails the test with it
        outcome = {"unexpected": f"{type(exc).__name__}: {exc}"}
    _emit(outcome)


def _hold(args: dict[str, Any]) -> None:
    from django.db import connection, transaction

    from django_durable_jobs.models import Job

    connection.ensure_connection()
    with transaction.atomic():
        if connection.vendor == "sqlite":
            # BEGIN IMMEDIATE already holds the database's write lock; write to make it plain.
            Job.objects.filter(pk=args["job_id"]).update(progress=1)
        else:
            Job.objects.select_for_update().get(pk=args["job_id"])
        _emit({"locked": True})
        # Wait for the parent's "release" (or EOF); never hold on past HOLD_MAX seconds.
        if select.select([sys.stdin], [], [], HOLD_MAX)[0]:
            sys.stdin.readline()
        transaction.set_rollback(True)
    _emit({"released": True})


def main(argv: list[str]) -> None:
    import django

    action, raw = argv
    args = json.loads(raw)
    django.setup()
    if action == "hold":
        _hold(args)
    else:
        _race(action, args)


# -- parent side -----------------------------------------------------------------------------------


class Child:
    """One child process with its stdout read line by line on a thread (so reads can time out)."""

    def __init__(self, action: str, args: dict[str, Any], env: dict[str, str]) -> None:
        self.action = action
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.race_child", action, json.dumps(args)],
            env={**os.environ, **env},
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump_stdout, daemon=True).start()
        threading.Thread(target=self._pump_stderr, daemon=True).start()

    def _pump_stdout(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _pump_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line)

    def read(self, timeout: float = CHILD_TIMEOUT) -> dict[str, Any]:
        """Return the child's next JSON line; fail with its stderr if it ends or stays silent."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"{self.action} child said nothing for {timeout} s") from None
        if line is None:
            self.proc.wait(timeout=5)
            raise AssertionError(
                f"{self.action} child exited ({self.proc.returncode}) early:\n"
                + "".join(self.stderr)
            )
        return json.loads(line)

    def send(self, text: str) -> None:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = CHILD_TIMEOUT) -> None:
        """Wait for a clean exit."""
        self.proc.wait(timeout=timeout)
        assert self.proc.returncode == 0, "".join(self.stderr)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


class Children:
    """Start racing children, start them at one instant, collect one outcome from each."""

    def __init__(self, env: dict[str, str], action: str, args_list: list[dict[str, Any]]):
        self.children = [Child(action, args, env) for args in args_list]

    def __enter__(self) -> Children:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for child in self.children:
            child.kill()

    def race(self, delay: float = 0.2) -> list[dict[str, Any]]:
        """Release every ready child at ``delay`` seconds from now; return their outcomes."""
        for child in self.children:
            assert child.read() == {"ready": True}
        start_at = time.time() + delay
        for child in self.children:
            child.send(f"go {start_at!r}")
        outcomes = [child.read() for child in self.children]
        for child in self.children:
            child.finish()
        return outcomes


if __name__ == "__main__":
    main(sys.argv[1:])
