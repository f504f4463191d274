"""``manage.py jobs workflow list|show|cancel|retry``, and workflows in ``jobs list`` and ``jobs show``.

Workflows are submitted with ``Workflow.submit()`` and their jobs run by a store in this process
(claim, then complete or fail); the command runs through ``call_command`` and, once, as a real
``python -m django`` process. Every refusal exits non-zero and leaves the database unchanged.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_durable_jobs import Workflow
from django_durable_jobs.models import Job
from django_durable_jobs.models import Workflow as WorkflowRow
from django_durable_jobs.store import DurableJobStore
from tests.support import REPO_ROOT, db_state, submission

pytestmark = pytest.mark.django_db(transaction=True)

ECHO, FAIL = "tests.wf.echo", "tests.wf.fail"


def jobs(*args: str) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out)
    return out.getvalue()


def fan(key: str = "fan-1"):
    """Submit fetch → (p0, p1) → merge; return the handle."""
    wf = Workflow("imports.nightly", idempotency_key=key)
    fetch = wf.job(ECHO, {"tag": "fetch"}, name="fetch")
    parts = [wf.job(ECHO, {"tag": f"p{i}"}, after=[fetch], name=f"p{i}") for i in range(2)]
    wf.job(ECHO, {"tag": "merge"}, after=parts, name="merge")
    return wf.submit()


def run(store: DurableJobStore, operation: str = ECHO, *, fail: bool = False) -> Job:
    (lease,) = store.claim_next(operations=[operation])
    if fail:
        store.fail(lease, RuntimeError("it broke"))
    else:
        store.complete(lease, {"ran": str(lease.job_id)})
    return Job.objects.get(pk=lease.job_id)


@pytest.fixture
def worker() -> DurableJobStore:
    return DurableJobStore(actor="worker@test")


# -- show ------------------------------------------------------------------------------------------


def test_show_gives_the_state_progress_and_each_job_with_its_parents(worker):
    handle = fan()
    run(worker)  # fetch completes; p0 and p1 are released
    data = json.loads(jobs("workflow", "show", str(handle.id), "--json"))
    assert (data["id"], data["name"], data["scope"]) == (
        str(handle.id),
        "imports.nightly",
        "default",
    )
    assert data["idempotency_key"] == "fan-1"
    assert data["state"] == "running"
    assert data["progress"] == {
        "total": 4,
        "complete": 1,
        "by_status": {"complete": 1, "pending": 2, "waiting": 1},
    }
    by_name = {row["name"]: row for row in data["jobs"]}
    assert [row["name"] for row in data["jobs"]] == ["fetch", "p0", "p1", "merge"]
    assert by_name["fetch"]["parents"] == []
    assert by_name["p0"]["parent_names"] == ["fetch"]
    assert by_name["p0"]["parents"] == [str(handle.job("fetch").pk)]
    assert by_name["merge"]["parent_names"] == ["p0", "p1"]
    assert (by_name["merge"]["status"], by_name["merge"]["waiting_on"]) == ("waiting", 2)
    assert (by_name["fetch"]["operation"], by_name["fetch"]["attempts"]) == (ECHO, 1)

    text = jobs("workflow", "show", str(handle.id))
    assert "state            running" in text
    assert "1 of 4 complete (25%): 1 complete, 2 pending, 1 waiting" in text
    merge = next(line for line in text.splitlines() if line.startswith("merge "))
    assert str(handle.job("merge").pk) in merge
    assert "waiting (on 2)" in merge and merge.rstrip().endswith("p0, p1")
    fetch = next(line for line in text.splitlines() if line.startswith("fetch "))
    assert "complete" in fetch and fetch.rstrip().endswith("-")


def test_show_of_a_complete_workflow_says_complete(worker):
    handle = fan()
    for _ in range(4):
        run(worker)
    data = json.loads(jobs("workflow", "show", str(handle.id), "--json"))
    assert data["state"] == "complete"
    assert data["progress"]["complete"] == data["progress"]["total"] == 4


@pytest.mark.parametrize("verb", ["show", "cancel", "retry"])
def test_an_unknown_or_malformed_id_is_an_error_and_changes_nothing(verb):
    fan()
    before = db_state()
    missing = str(uuid.uuid4())
    with pytest.raises(CommandError, match=f"No workflow {missing}"):
        jobs("workflow", verb, missing)
    with pytest.raises(CommandError, match="is not a workflow id"):
        jobs("workflow", verb, "nope")
    assert db_state() == before


def test_an_unknown_id_exits_1_from_a_real_process(db_settings_env):
    missing = str(uuid.uuid4())
    done = subprocess.run(
        [sys.executable, "-m", "django", "jobs", "workflow", "show", missing],
        env={**os.environ, **db_settings_env},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert f"No workflow {missing}." in done.stderr
    assert "Traceback" not in done.stderr


# -- cancel ----------------------------------------------------------------------------------------


def test_cancel_ends_what_nobody_holds_and_asks_the_running_job_to_stop(worker):
    handle = fan()
    run(worker)  # fetch completes
    (lease,) = worker.claim_next(operations=[ECHO])  # p0 runs
    report = json.loads(jobs("workflow", "cancel", str(handle.id), "--json"))
    running = str(lease.job_id)
    others = {str(handle.job(n).pk) for n in ("p0", "p1", "merge")} - {running}
    assert set(report["changed"]["cancelled"]) == others
    assert report["changed"]["requested"] == [running]
    assert report["count"] == 3
    assert report["state"] == "running"  # p0 still runs until its owner stops
    rows = {str(j.pk): j for j in Job.objects.filter(workflow_id=handle.id)}
    assert {rows[pk].status for pk in others} == {"cancelled"}
    assert rows[running].status == "running"
    assert rows[running].cancellation_requested_at is not None
    assert rows[str(handle.job("fetch").pk)].status == "complete"  # its outcome is kept
    row = WorkflowRow.objects.get(pk=handle.id)
    assert row.cancel_requested_at is not None and row.requested_by.startswith("cli:")

    again = jobs("workflow", "cancel", str(handle.id))
    assert "nothing to cancel" in again


def test_cancel_in_text_counts_each_kind(worker):
    handle = fan()
    text = jobs("workflow", "cancel", str(handle.id))
    assert text.startswith(f"Workflow {handle.id} (imports.nightly): 4 cancelled (not running).")


# -- retry -----------------------------------------------------------------------------------------


def test_retry_reruns_the_failed_job_and_rewaits_its_cancelled_descendants(worker):
    wf = Workflow("saga")
    a = wf.job(ECHO, {"tag": "a"}, name="a")
    b = wf.job(FAIL, {"tag": "b"}, after=[a], name="b")
    wf.job(ECHO, {"tag": "c"}, after=[b], name="c")
    handle = wf.submit()
    run(worker)
    run(worker, FAIL, fail=True)
    shown = json.loads(jobs("workflow", "show", str(handle.id), "--json"))
    assert shown["state"] == "failed"
    assert [row["status"] for row in shown["jobs"]] == ["complete", "failed", "cancelled"]
    assert "'b'" in shown["jobs"][2]["error"]

    report = json.loads(jobs("workflow", "retry", str(handle.id), "--json"))
    assert report["changed"] == {
        "retried": [str(handle.job("b").pk)],
        "pending": [],
        "waiting": [str(handle.job("c").pk)],
    }
    assert report["state"] == "running"
    statuses = {j.node: j.status for j in Job.objects.filter(workflow_id=handle.id)}
    assert statuses == {"a": "complete", "b": "failed", "c": "waiting"}
    assert Job.objects.get(pk=handle.job("b").pk).retry_requested_at is not None

    other = fan("other").id
    before = list(Job.objects.filter(workflow_id=other).order_by("pk").values())
    text = jobs("workflow", "retry", str(other))
    assert "no job failed or was cancelled; nothing to retry" in text
    assert list(Job.objects.filter(workflow_id=other).order_by("pk").values()) == before


# -- list ------------------------------------------------------------------------------------------


def test_list_shows_workflows_newest_first_with_state_and_progress(worker):
    first = fan("one")
    run(worker)
    second = fan("two")
    data = json.loads(jobs("workflow", "list", "--json"))
    assert [row["id"] for row in data] == [str(second.id), str(first.id)]
    assert [row["progress"]["complete"] for row in data] == [0, 1]
    assert {row["state"] for row in data} == {"running"}
    text = jobs("workflow", "list")
    assert text.splitlines()[0].split() == ["ID", "NAME", "SCOPE", "STATE", "COMPLETE", "CREATED"]
    assert "1/4" in text and "0/4" in text
    assert json.loads(jobs("workflow", "list", "--json", "--limit", "1")) == data[:1]
    assert jobs("workflow", "list", "--name", "nothing") == "No workflows match.\n"
    with pytest.raises(CommandError, match="--limit"):
        jobs("workflow", "list", "--limit", "0")


# -- workflows in jobs list and jobs show ----------------------------------------------------------


def test_jobs_list_shows_the_workflow_and_the_new_statuses(worker):
    handle = fan()
    DurableJobStore(actor="x").defer(
        ECHO, submission({"tag": "alone"})
    )  # a job outside any workflow
    data = json.loads(jobs("list", "--json", "--workflow", str(handle.id)))
    assert len(data) == 4
    assert {row["workflow"] for row in data} == {str(handle.id)}
    assert sorted(row["node"] for row in data) == ["fetch", "merge", "p0", "p1"]
    assert sorted(row["status"] for row in data) == ["pending", "waiting", "waiting", "waiting"]
    waiting = json.loads(jobs("list", "--json", "--status", "waiting"))
    assert len(waiting) == 3 and {row["waiting_on"] for row in waiting} == {1, 2}
    text = jobs("list")
    assert "WORKFLOW" in text.splitlines()[0]
    assert f"{handle.id} merge" in text and "waiting (on 2)" in text
    with pytest.raises(CommandError, match="--workflow"):
        jobs("list", "--workflow", "nope")


def test_jobs_show_links_the_workflow_and_counts_steps_and_sleep(worker):
    handle = fan()
    fetch = str(handle.job("fetch").pk)
    data = json.loads(jobs("show", str(handle.job("p0").pk), "--json"))
    assert data["workflow_id"] == str(handle.id) and data["node"] == "p0"
    assert data["parents"] == [fetch] and data["children"] == [str(handle.job("merge").pk)]
    assert (data["status"], data["waiting_on"], data["steps"]) == ("waiting", 1, 0)
    text = jobs("show", str(handle.job("p0").pk))
    assert f"manage.py jobs workflow show {handle.id}" in text
    assert "waiting (on 1 upstream job(s) not yet complete)" in text

    (lease,) = worker.claim_next(operations=[ECHO])  # fetch
    worker.record_step(lease, 0, "download", {"rows": 3})
    until = worker.sleep(lease, 600)
    data = json.loads(jobs("show", fetch, "--json"))
    assert (data["status"], data["steps"], data["attempts"]) == ("sleeping", 1, 0)
    text = jobs("show", fetch)
    stamp = until.strftime("%Y-%m-%dT%H:%M:%S")
    assert re.search(rf"\nstatus +sleeping until {stamp}\.\d+Z \(in \d+ min\)\n", text), text
    assert re.search(r"\nsteps +1\n", text)
    row = json.loads(jobs("list", "--json", "--status", "sleeping"))[0]
    assert row["sleep_until"] == until.isoformat()
    assert "sleeping until" in jobs("list", "--status", "sleeping")


def test_unnamed_jobs_are_shown_by_their_place(worker):
    from django_durable_jobs import chain
    from django_durable_jobs.workflows import Signature

    flow = chain(Signature(ECHO, {"tag": "a"}), Signature(ECHO, {"tag": "b"}))
    handle = flow.workflow("plain.chain").submit()
    data = json.loads(jobs("workflow", "show", str(handle.id), "--json"))
    assert [row["name"] for row in data["jobs"]] == [None, None]
    assert data["jobs"][1]["parent_names"] == ["#0"]
    text = jobs("workflow", "show", str(handle.id))
    second = next(line for line in text.splitlines() if line.startswith("#1 "))
    assert second.rstrip().endswith("#0") and "waiting (on 1)" in second
