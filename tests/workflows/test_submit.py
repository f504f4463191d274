"""Submitting a workflow on every database: all or nothing, idempotent by key.

Proves: a submit writes the workflow row, one job per node (``pending`` without parents,
``waiting`` with, ``waiting_on`` its parent count) and one edge per parent; a cycle, an unknown
operation, a parent from another workflow (a node of another ``Workflow``, a name that is no
job of this one), too many jobs, a duplicate name or a bad ``on_upstream_failure`` is a
``JobError`` naming it and nothing is written; the same key and graph return the same workflow
and jobs; the same key with another payload, edge or operation is an ``IdempotencyConflict``
and nothing is written; inside ``transaction.atomic()`` the submit joins the caller's
transaction (a rollback leaves nothing); concurrent submitters of one key make one workflow.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from django.db import transaction
from django.test import override_settings

from django_durable_jobs import Workflow
from django_durable_jobs.models import Job, JobDependency
from django_durable_jobs.models import Workflow as WorkflowRow
from django_durable_jobs.rules.errors import IdempotencyConflict, InputInvalid, JobError
from tests.settings import REPO_ROOT
from tests.support import db_state

pytestmark = pytest.mark.django_db(transaction=True)

ECHO = "tests.wf.echo"


def written() -> tuple[int, int, int, str]:
    """What submits write: workflow, job and edge rows (and every job and attempt in full)."""
    return (
        WorkflowRow.objects.count(),
        Job.objects.count(),
        JobDependency.objects.count(),
        db_state(),
    )


def refused_naming(error: type[JobError], code: str, named: str, call) -> JobError:
    """Require ``call`` to raise ``error`` with ``code`` and ``named`` in its message, writing
    nothing."""
    before = written()
    with pytest.raises(error) as caught:
        call()
    assert caught.value.code == code
    assert named in caught.value.message, caught.value.message
    assert written() == before
    return caught.value


def diamond(key: str | None = "k", *, payload: dict | None = None) -> Workflow:
    wf = Workflow("wf.diamond", idempotency_key=key)
    top = wf.job(ECHO, payload or {"tag": "top"}, name="top")
    left = wf.job(ECHO, {"tag": "left"}, after=[top], name="left")
    right = wf.job(ECHO, {"tag": "right"}, after=[top], name="right")
    wf.job(ECHO, {"tag": "merge"}, after=[left, right], name="merge")
    return wf


def test_a_submit_writes_the_workflow_its_jobs_and_its_edges():
    handle = diamond().submit()
    assert handle.created
    row = WorkflowRow.objects.get()
    assert (row.pk, row.name, row.idempotency_key, row.job_count) == (
        handle.id,
        "wf.diamond",
        "k",
        4,
    )
    jobs = {job.node: Job.objects.get(pk=job.pk) for job in handle.jobs}
    assert [job.node for job in handle.jobs] == ["top", "left", "right", "merge"]
    assert {n: (j.status, j.waiting_on) for n, j in jobs.items()} == {
        "top": ("pending", 0),
        "left": ("waiting", 1),
        "right": ("waiting", 1),
        "merge": ("waiting", 2),
    }
    assert jobs["top"].released_at is not None
    assert all(jobs[n].released_at is None for n in ("left", "right", "merge"))
    assert {j.workflow_id for j in jobs.values()} == {handle.id}
    edges = set(JobDependency.objects.values_list("parent_id", "child_id"))
    ids = {n: j.pk for n, j in jobs.items()}
    assert edges == {
        (ids["top"], ids["left"]),
        (ids["top"], ids["right"]),
        (ids["left"], ids["merge"]),
        (ids["right"], ids["merge"]),
    }
    assert handle.final_job.pk == ids["merge"]


# -- refusals, nothing written -------------------------------------------------------------------


def test_a_cycle_is_refused_naming_it_and_nothing_is_written():
    diamond("other").submit()  # something already there, unchanged by the refusals
    wf = Workflow("wf.cycle")
    wf.job(ECHO, {}, name="a", after=["c"])
    wf.job(ECHO, {}, name="b", after=["a"])
    wf.job(ECHO, {}, name="c", after=["b"])
    error = refused_naming(InputInvalid, "E_JOB_INPUT_INVALID", "has a cycle", wf.submit)
    assert all(f"'{n}'" in error.message for n in "abc")


def test_an_unknown_operation_is_refused_naming_it():
    wf = Workflow("wf.unknown")
    first = wf.job(ECHO, {})
    wf.job("tests.wf.no_such_op", {}, after=[first], name="ghost")
    refused_naming(InputInvalid, "E_JOB_INPUT_INVALID", "'tests.wf.no_such_op'", wf.submit)


def test_a_parent_from_another_workflow_is_refused():
    other = Workflow("wf.other")
    foreign = other.job(ECHO, {}, name="foreign")
    wf = Workflow("wf.mine")
    wf.job(ECHO, {}, name="mine")
    error = refused_naming(
        InputInvalid,
        "E_JOB_INPUT_INVALID",
        "belongs to workflow 'wf.other'",
        lambda: wf.job(ECHO, {}, after=[foreign]),
    )
    assert "same workflow" in error.message
    assert len(wf.nodes) == 1  # the refused job was not added
    # A name that is no job of this workflow (another's job name included).
    wf.job(ECHO, {}, after=["foreign"], name="child")
    refused_naming(InputInvalid, "E_JOB_INPUT_INVALID", "'foreign', which is no job", wf.submit)


def test_too_many_jobs_are_refused_naming_the_limit():
    wf = Workflow("wf.big")
    first = wf.job(ECHO, {})
    for _ in range(3):
        wf.job(ECHO, {}, after=[first])
    with override_settings(DURABLE_JOBS={"WORKFLOW_MAX_JOBS": 3}):
        refused_naming(InputInvalid, "E_JOB_INPUT_INVALID", "WORKFLOW_MAX_JOBS", wf.submit)
    with override_settings(DURABLE_JOBS={"WORKFLOW_MAX_JOBS": 4}):
        assert len(wf.submit().jobs) == 4


def test_a_duplicate_name_is_refused_naming_it():
    wf = Workflow("wf.dup")
    wf.job(ECHO, {}, name="same")
    wf.job(ECHO, {}, name="same")
    refused_naming(InputInvalid, "E_JOB_INPUT_INVALID", "named 'same'", wf.submit)


def test_a_bad_on_upstream_failure_is_refused_naming_it():
    wf = Workflow("wf.policy")
    first = wf.job(ECHO, {})
    wf.job(ECHO, {}, after=[first], on_upstream_failure="ignore", name="odd")
    error = refused_naming(InputInvalid, "E_JOB_INPUT_INVALID", "on_upstream_failure", wf.submit)
    assert "'ignore'" in error.message and "'odd'" in error.message


def test_a_payload_that_is_no_json_is_refused():
    wf = Workflow("wf.payload")
    wf.job(ECHO, {"when": object()}, name="bad")
    refused_naming(InputInvalid, "E_JOB_INPUT_INVALID", "payload of workflow job #0", wf.submit)


# -- idempotency ---------------------------------------------------------------------------------


def test_the_same_key_and_graph_return_the_same_workflow_and_jobs():
    first = diamond().submit()
    before = written()
    again = diamond().submit()
    assert not again.created
    assert again.id == first.id
    assert [job.pk for job in again.jobs] == [job.pk for job in first.jobs]
    assert written() == before


@pytest.mark.parametrize("change", ["payload", "edge", "operation"])
def test_the_same_key_with_another_graph_is_a_conflict_and_writes_nothing(change):
    first = diamond().submit()
    wf = Workflow("wf.diamond", idempotency_key="k")
    top = wf.job(
        ECHO, {"tag": "top", "x": 1} if change == "payload" else {"tag": "top"}, name="top"
    )
    left = wf.job(ECHO, {"tag": "left"}, after=[top], name="left")
    right = wf.job(
        "tests.wf.fail" if change == "operation" else ECHO,
        {"tag": "right"},
        after=[top],
        name="right",
    )
    wf.job(
        ECHO, {"tag": "merge"}, after=[left] if change == "edge" else [left, right], name="merge"
    )
    error = refused_naming(IdempotencyConflict, "E_JOB_IDEMPOTENCY_CONFLICT", "'k'", wf.submit)
    assert str(first.id) in error.message


def test_without_a_key_every_submit_makes_a_new_workflow():
    first = diamond(None).submit()
    second = diamond(None).submit()
    assert first.id != second.id and second.created
    assert WorkflowRow.objects.count() == 2 and Job.objects.count() == 8


# -- transactions --------------------------------------------------------------------------------


def test_a_submit_inside_atomic_joins_it_and_a_rollback_leaves_nothing():
    before = written()

    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        handle = diamond().submit()
        assert WorkflowRow.objects.filter(pk=handle.id).exists()  # visible inside
        assert Job.objects.filter(workflow_id=handle.id).count() == 4
        raise Rollback
    assert written() == before
    with transaction.atomic():
        handle = diamond().submit()
    assert Job.objects.filter(workflow_id=handle.id).count() == 4


def test_a_refusal_inside_atomic_leaves_the_callers_transaction_usable():
    with transaction.atomic():
        wf = Workflow("wf.cyc")
        wf.job(ECHO, {}, name="a", after=["a"])
        with pytest.raises(InputInvalid):
            wf.submit()
        handle = diamond().submit()
    assert WorkflowRow.objects.filter(pk=handle.id).exists()


CHILD = """
import json, sys, time
from django_durable_jobs import Workflow
from django_durable_jobs.rules.errors import JobError
start = float(sys.argv[1])
wf = Workflow("wf.race", idempotency_key="race")
top = wf.job("tests.wf.echo", {"tag": "top"}, name="top")
for i in range(20):
    wf.job("tests.wf.echo", {"tag": i}, after=[top], name=f"c{i}")
from django.db import connection
connection.ensure_connection()
while time.time() < start:
    pass
try:
    handle = wf.submit()
    print(json.dumps({"id": str(handle.id), "created": handle.created,
                      "jobs": [str(j.pk) for j in handle.jobs]}))
except JobError as exc:
    print(json.dumps({"code": exc.code, "message": exc.message}))
"""


@pytest.mark.processes
def test_concurrent_submitters_of_one_key_make_one_workflow(db_settings_env):
    import os

    start = time.time() + 3.0
    children = [
        subprocess.Popen(
            [sys.executable, "-c", "import django; django.setup()\n" + CHILD, str(start)],
            env={**os.environ, **db_settings_env},
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    answers = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        answers.append(json.loads(out.strip().splitlines()[-1]))
    assert all("id" in a for a in answers), answers
    assert len({a["id"] for a in answers}) == 1
    assert sum(a["created"] for a in answers) == 1
    assert len({tuple(a["jobs"]) for a in answers}) == 1
    assert WorkflowRow.objects.count() == 1
    assert Job.objects.count() == 21 and JobDependency.objects.count() == 20


# -- scopes --------------------------------------------------------------------------------------


def test_a_scoped_store_submits_in_its_scope_and_sees_only_its_workflows(clock):
    from django_durable_jobs.rules.errors import ScopeMismatch
    from django_durable_jobs.store import DurableJobStore

    mine = DurableJobStore(scope="tenant-a", clock=clock)
    theirs = DurableJobStore(scope="tenant-b", clock=clock)
    submitted = mine.workflows.submit(diamond().graph(), idempotency_key="k")
    assert submitted.workflow.scope == "tenant-a"
    assert {job.scope for job in Job.objects.all()} == {"tenant-a"}
    refused_naming(
        ScopeMismatch,
        "E_JOB_SCOPE_MISMATCH",
        "'tenant-b'",
        lambda: mine.workflows.submit(diamond().graph(), scope="tenant-b"),
    )
    # The same key in another scope is another workflow.
    other = theirs.workflows.submit(diamond().graph(), idempotency_key="k")
    assert other.created and other.workflow.pk != submitted.workflow.pk

    wid = submitted.workflow.pk
    assert theirs.workflows.get(wid) is None
    assert theirs.workflows.jobs(wid) == [] and theirs.workflows.edges(wid) == []
    merge = submitted.jobs[-1]
    top = submitted.jobs[0]
    [lease] = mine.claim_next(limit=1, resume_expired=[])
    assert lease.job_id == top.pk
    mine.complete(lease, "secret")
    left = submitted.jobs[1]
    assert mine.upstream(left.pk) == {"top": "secret"}
    assert theirs.upstream(left.pk) == {}
    assert len(mine.workflows.jobs(wid)) == 4 and len(mine.workflows.edges(wid)) == 4
    assert merge.scope == "tenant-a"


def test_the_handle_finds_jobs_by_node_name_or_place_and_reads_them_again():
    wf = Workflow("wf.handle")
    top = wf.job(ECHO, {}, name="top")
    leaf = wf.job(ECHO, {}, after=[top])
    handle = wf.submit()
    assert handle.job(top).node == "top" and handle.job("top").pk == handle.job(0).pk
    assert handle.job(leaf).pk == handle.jobs[1].pk == handle.final_job.pk
    with pytest.raises(KeyError):
        handle.job("nobody")
    Job.objects.filter(pk=handle.job(top).pk).update(status="complete")
    assert handle.refresh().job("top").status == "complete"
