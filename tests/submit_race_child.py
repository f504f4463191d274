"""A ``submit_many()`` client racing others from its own OS process (``tests/test_submit_many.py``).

Run as ``python -m tests.submit_race_child JSON_ARGS`` with the environment of the
``db_settings_env`` fixture. It speaks ``tests.race_child``'s protocol: it sets Django up, opens its
connection, prints ``{"ready": true}``, waits for ``go <unix time>`` on stdin and that instant, then
submits ``args["payloads"]`` under ``args["keys"]`` in one call and prints the job ids it got
back (or ``{"code": ...}`` for a ``JobError``). :class:`SubmitManyChildren` is the parent side.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from typing import Any

from tests import race_child


def _prepare_submit_many(args: dict[str, Any]):
    from django_durable_jobs import submit_many

    def run() -> dict[str, Any]:
        jobs = submit_many(args["operation"], args["payloads"], idempotency_keys=args["keys"])
        return {"job_ids": [str(job.pk) for job in jobs]}

    return run


class SubmitManyChild(race_child.Child):
    """A :class:`tests.race_child.Child` that runs this module instead."""

    def __init__(self, args: dict[str, Any], env: dict[str, str]) -> None:
        self.action = "submit_many"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.submit_race_child", json.dumps(args)],
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


class SubmitManyChildren(race_child.Children):
    """Start ``submit_many()`` racers, release them at one instant, collect their outcomes."""

    def __init__(self, env: dict[str, str], args_list: list[dict[str, Any]]) -> None:
        self.children = [SubmitManyChild(args, env) for args in args_list]


if __name__ == "__main__":
    race_child.RACES["submit_many"] = _prepare_submit_many
    race_child.main(["submit_many", sys.argv[1]])
