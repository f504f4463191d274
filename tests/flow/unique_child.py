"""Racing submitters of the flow-control operations, in separate OS processes.

``python -m tests.flow.unique_child ACTION JSON_ARGS`` runs ``tests.race_child``'s racing
protocol (ready, wait for "go", one JSON outcome) after importing ``tests.flow.submit_ops``, so
the child knows the operations' declarations. Actions: ``defer`` (the store's, with the store's
real clock) and ``submit_many`` (``django_durable_jobs.submit_many``).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from typing import Any

from tests import race_child


def _prepare_defer(args: dict[str, Any]):
    from django_durable_jobs.store import DurableJobStore, Submission

    store = DurableJobStore(actor="racer")
    submission = Submission.of(args.get("scope"), args["key"], args["payload"])

    def run() -> dict[str, Any]:
        job = store.defer(args["operation"], submission)
        return {"job_id": str(job.pk), "status": job.status}

    return run


def _prepare_submit_many(args: dict[str, Any]):
    from django_durable_jobs import submit_many

    def run() -> dict[str, Any]:
        jobs = submit_many(args["operation"], args["payloads"], idempotency_keys=args.get("keys"))
        return {"job_ids": [str(job.pk) for job in jobs]}

    return run


def _prepare_submit_after_a_read(args: dict[str, Any]):
    """``submit()`` in the caller's transaction, after a read that began its snapshot.

    On MariaDB the session runs REPEATABLE READ, where a plain SELECT after the gate would read
    that old snapshot and miss a job committed meanwhile; the uniqueness look must not.
    """
    from django.db import connection, transaction

    from django_durable_jobs import submit
    from django_durable_jobs.models import Job

    if connection.vendor == "mysql":
        with connection.cursor() as cursor:
            cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")

    def run() -> dict[str, Any]:
        with transaction.atomic():
            Job.objects.filter(operation=args["operation"]).count()  # the snapshot starts here
            time.sleep(0.3)  # the other racers commit meanwhile
            job = submit(args["operation"], args["payload"], idempotency_key=args["key"])
        return {"job_id": str(job.pk), "status": job.status}

    return run


RACES = {
    "defer": _prepare_defer,
    "submit_many": _prepare_submit_many,
    "submit_after_a_read": _prepare_submit_after_a_read,
}


class UniqueChild(race_child.Child):
    """A :class:`tests.race_child.Child` running this module instead."""

    def __init__(self, action: str, args: dict[str, Any], env: dict[str, str]) -> None:
        self.action = action
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.flow.unique_child", action, json.dumps(args)],
            env={**os.environ, **env},
            cwd=race_child.REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump_stdout, daemon=True).start()
        threading.Thread(target=self._pump_stderr, daemon=True).start()


class UniqueChildren(race_child.Children):
    def __init__(self, env: dict[str, str], action: str, args_list: list[dict[str, Any]]):
        self.children = [UniqueChild(action, args, env) for args in args_list]


def main(argv: list[str]) -> None:
    import django

    action, raw = argv
    django.setup()
    from tests.flow import submit_ops

    submit_ops.register()

    race_child.RACES.update(RACES)
    race_child._race(action, json.loads(raw))


if __name__ == "__main__":
    main(sys.argv[1:])
