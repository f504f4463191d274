"""``jobs show`` and ``jobs list`` never present a finished job's last lease as a live one.

A job that ended a moment ago keeps the (future) expiry of its last lease: ``jobs show`` prints
the stored time followed by ``(not held: the job is complete)``; a running job's lease is printed
as it is. ``jobs list`` has no lease column, and its JSON keeps the stored value exact.
"""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from django_durable_jobs.models import Job
from django_durable_jobs.store import DurableJobStore
from tests.support import submission

pytestmark = pytest.mark.django_db(transaction=True)


def _run(*args: str) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def _lease_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("lease_expires_at "))


def test_show_says_a_finished_jobs_lease_is_not_held_and_a_running_one_is_printed_as_is():
    store = DurableJobStore(actor="w", lease_seconds=3600)
    done = store.defer("demo.op", submission({"j": 1}, key="done")).pk
    store.complete(store.claim(done), {"ok": True})
    running = store.defer("demo.op", submission({"j": 2}, key="running")).pk
    store.claim(running)

    shown = json.loads(_run("show", str(done), "--json"))["lease_expires_at"]
    assert shown is not None
    line = _lease_line(_run("show", str(done)))
    assert line.endswith(f"  {shown} (not held: the job is complete)"), line

    line = _lease_line(_run("show", str(running)))
    assert line.endswith(json.loads(_run("show", str(running), "--json"))["lease_expires_at"])
    assert "not held" not in line

    listed = {row["id"]: row for row in json.loads(_run("list", "--json"))}
    stored = Job.objects.get(pk=done).lease_expires_at
    assert listed[str(done)]["lease_expires_at"] == stored.isoformat()  # the stored value
    table = _run("list")
    assert "LEASE" not in table.splitlines()[0]  # no lease column to mislead
