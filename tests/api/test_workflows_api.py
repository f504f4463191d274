"""The workflow endpoints of the REST API: submit, get, cancel, retry; and workflow fields on jobs.

Each success path, and each refusal as ``{"code", "message"}`` with the database unchanged:
409 for a key reused with another graph, 413 for too many jobs or a payload too large, 422 for
a cycle, an unknown operation or parent, 403 without the permission or with a token not
allowed an operation, 404 for another scope's workflow. Jobs are run by a store in this process.
"""

from __future__ import annotations

import uuid
from datetime import datetime

import pytest
from django.test import override_settings

from django_durable_jobs import Workflow
from django_durable_jobs.models import Job
from django_durable_jobs.models import Workflow as WorkflowRow
from django_durable_jobs.models.tokens import create_token
from django_durable_jobs.store import DurableJobStore
from tests.api.support import ALL_PERMS, Api, make_user, refused
from tests.support import db_state, submission

pytestmark = pytest.mark.django_db(transaction=True)

ECHO, FAIL = "tests.wf.echo", "tests.wf.fail"
WORKFLOW_PERMS = (*ALL_PERMS, "cancel_workflow", "retry_workflow")


def fan(key: str | None = "fan-1", merge: str = ECHO) -> dict:
    """The body of fetch → (p0, p1) → merge."""
    return {
        "name": "imports.nightly",
        "idempotency_key": key,
        "jobs": [
            {"name": "fetch", "operation": ECHO, "payload": {"day": "2026-12-01"}},
            {"name": "p0", "operation": ECHO, "payload": {"part": 0}, "after": ["fetch"]},
            {"name": "p1", "operation": ECHO, "payload": {"part": 1}, "after": [0]},
            {"name": "merge", "operation": merge, "after": ["p0", "p1"], "queue": "slow"},
        ],
    }


@pytest.fixture
def worker() -> DurableJobStore:
    """A store of scope red on the real clock (the API stamps jobs with the real time)."""
    return DurableJobStore(scope="red", actor="worker-red")


@pytest.fixture
def boss(user):
    """A client whose user may also cancel and retry workflows (scope red)."""
    return Api(create_token(make_user("boss", WORKFLOW_PERMS), "red", "boss").token)


def run(store: DurableJobStore, operation: str = ECHO, *, fail: bool = False) -> None:
    (lease,) = store.claim_next(operations=[operation])
    if fail:
        store.fail(lease, RuntimeError("it broke"))
    else:
        store.complete(lease, {"done": True})


# -- POST /workflows -------------------------------------------------------------------------------


def test_submit_writes_the_workflow_in_the_callers_scope_with_201(api):
    response = api.post("/workflows", fan())
    assert response.status_code == 201, response.content
    body = response.json()
    row = WorkflowRow.objects.get(pk=body["id"])
    assert (row.name, row.scope, row.idempotency_key, row.job_count) == (
        "imports.nightly",
        "red",
        "fan-1",
        4,
    )
    assert (body["name"], body["scope"], body["state"]) == ("imports.nightly", "red", "running")
    assert body["progress"] == {
        "total": 4,
        "complete": 0,
        "by_status": {"pending": 1, "waiting": 3},
    }
    jobs = body["jobs"]
    assert [j["node"] for j in jobs] == ["fetch", "p0", "p1", "merge"]
    assert [j["index"] for j in jobs] == [0, 1, 2, 3]
    assert [j["status"] for j in jobs] == ["pending", "waiting", "waiting", "waiting"]
    assert [j["waiting_on"] for j in jobs] == [0, 1, 1, 2]
    assert {j["workflow"] for j in jobs} == {body["id"]}
    assert {j["scope"] for j in jobs} == {"red"}
    ids = [j["id"] for j in jobs]
    assert [j["parents"] for j in jobs] == [[], [ids[0]], [ids[0]], [ids[1], ids[2]]]
    assert jobs[3]["queue"] == "slow" and jobs[3]["sleep_until"] is None
    rows = {str(j.pk): j for j in Job.objects.filter(workflow_id=body["id"])}
    assert set(rows) == set(ids)
    assert rows[ids[0]].proposal == '{"day":"2026-12-01"}'
    assert rows[ids[3]].proposal == "{}"


def test_the_same_key_and_graph_is_the_same_workflow_with_200_and_another_graph_a_409(api):
    first = api.post("/workflows", fan())
    assert first.status_code == 201
    before = db_state()
    again = api.post("/workflows", fan())
    assert again.status_code == 200, again.content
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["jobs"] == first.json()["jobs"]
    assert db_state() == before
    other = fan()
    other["jobs"][3]["priority"] = 5
    body = refused(api.post("/workflows", other), 409, "E_JOB_IDEMPOTENCY_CONFLICT", before)
    assert "'fan-1'" in body["message"]


def test_without_a_key_every_submit_is_a_new_workflow(api):
    a, b = api.post("/workflows", fan(None)), api.post("/workflows", fan(None))
    assert (a.status_code, b.status_code) == (201, 201)
    assert a.json()["id"] != b.json()["id"]


def test_a_cycle_is_refused_naming_it_and_nothing_is_written(api):
    api.post("/workflows", fan("kept"))
    before = db_state()
    body = {
        "name": "loop",
        "jobs": [
            {"name": "a", "operation": ECHO, "after": ["c"]},
            {"name": "b", "operation": ECHO, "after": ["a"]},
            {"name": "c", "operation": ECHO, "after": ["b"]},
        ],
    }
    answer = refused(api.post("/workflows", body), 422, "E_JOB_INPUT_INVALID", before)
    assert "has a cycle: " in answer["message"]
    cycle = answer["message"].split("has a cycle: ")[1].split(".")[0].split(" → ")
    assert sorted(cycle[:-1]) == ["'a'", "'b'", "'c'"] and cycle[0] == cycle[-1]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"operation": "tests.nobody"}, "'tests.nobody'"),
        ({"after": ["nobody"]}, "'nobody'"),
        ({"after": [9]}, "#9"),
        ({"on_upstream_failure": "ignore"}, "on_upstream_failure"),
        ({"operation": ""}, "operation"),
        ({"priority": 101}, "priority"),
    ],
)
def test_an_invalid_job_is_a_422_naming_it_and_nothing_is_written(api, change, words):
    body = fan()
    body["jobs"][3].update(change)
    before = db_state()
    answer = refused(api.post("/workflows", body), 422, "E_JOB_INPUT_INVALID", before)
    assert words in answer["message"]


def test_no_jobs_two_jobs_of_one_name_or_a_bad_name_are_422(api):
    before = db_state()
    refused(
        api.post("/workflows", {"name": "none", "jobs": []}), 422, "E_JOB_INPUT_INVALID", before
    )
    twice = fan()
    twice["jobs"][1]["name"] = "fetch"
    answer = refused(api.post("/workflows", twice), 422, "E_JOB_INPUT_INVALID", before)
    assert "'fetch'" in answer["message"]
    refused(api.post("/workflows", {**fan(), "name": ""}), 422, "E_JOB_INPUT_INVALID", before)


def test_too_many_jobs_or_a_payload_too_large_is_a_413_and_nothing_is_written(api):
    before = db_state()
    with override_settings(DURABLE_JOBS={"WORKFLOW_MAX_JOBS": 3}):
        answer = refused(api.post("/workflows", fan()), 413, "E_JOB_INPUT_INVALID", before)
    assert "4 jobs; the most is 3" in answer["message"]
    assert "WORKFLOW_MAX_JOBS" in answer["message"]
    big = fan()
    big["jobs"][2]["payload"] = {"blob": "x" * 200}
    with override_settings(DURABLE_JOBS={"MAX_PAYLOAD_BYTES": 64}):
        answer = refused(api.post("/workflows", big), 413, "E_JOB_INPUT_INVALID", before)
    assert "'p1'" in answer["message"]


def test_submitting_needs_the_permission_to_add_jobs(db):
    viewer = Api(create_token(make_user("viewer", ("view_job",)), "red", "v").token)
    before = db_state()
    answer = refused(viewer.post("/workflows", fan()), 403, "E_API_FORBIDDEN", before)
    assert "durable_jobs.add_job" in answer["message"]


def test_a_token_limited_to_some_operations_must_allow_every_job_of_the_workflow(user):
    limited = Api(create_token(user, "red", "echo only", operations=[ECHO]).token)
    before = db_state()
    answer = refused(limited.post("/workflows", fan(merge=FAIL)), 403, "E_API_FORBIDDEN", before)
    assert repr(FAIL) in answer["message"]
    assert limited.post("/workflows", fan()).status_code == 201


def test_a_body_that_is_not_a_workflow_is_a_422(api):
    before = db_state()
    for body in ({"jobs": []}, {"name": "x"}, {"name": "x", "jobs": [{"payload": {}}]}):
        refused(api.post("/workflows", body), 422, "E_JOB_INPUT_INVALID", before)
    refused(api.post("/workflows", raw="{not json"), 422, "E_JOB_INPUT_INVALID", before)


# -- GET /workflows/{id} ---------------------------------------------------------------------------


def test_get_follows_the_workflow_as_its_jobs_run(api, worker):
    created = api.post("/workflows", fan()).json()
    run(worker)
    body = api.get(f"/workflows/{created['id']}").json()
    assert body["progress"]["complete"] == 1
    assert [j["status"] for j in body["jobs"]] == ["complete", "pending", "pending", "waiting"]
    assert body["jobs"][3]["waiting_on"] == 2
    for _ in range(3):
        run(worker)
    body = api.get(f"/workflows/{created['id']}").json()
    assert body["state"] == "complete"
    assert body["progress"] == {"total": 4, "complete": 4, "by_status": {"complete": 4}}


def test_another_scopes_workflow_is_a_404_like_a_missing_one(boss):
    wf = Workflow("blue.one", scope="blue")
    wf.job(ECHO, {})
    theirs = wf.submit()
    before = db_state()
    for workflow_id in (theirs.id, uuid.uuid4()):
        for method, path in (
            ("get", f"/workflows/{workflow_id}"),
            ("post", f"/workflows/{workflow_id}/cancel"),
            ("post", f"/workflows/{workflow_id}/retry"),
        ):
            response = getattr(boss, method)(path)
            answer = refused(response, 404, "E_WORKFLOW_NOT_FOUND", before)
            assert str(workflow_id) in answer["message"]


def test_a_malformed_id_is_a_422(api):
    before = db_state()
    refused(api.get("/workflows/not-a-uuid"), 422, "E_JOB_INPUT_INVALID", before)


def test_reading_needs_the_permission_to_view_jobs(api):
    created = api.post("/workflows", fan()).json()
    nobody = Api(create_token(make_user("nobody", ()), "red", "n").token)
    before = db_state()
    refused(nobody.get(f"/workflows/{created['id']}"), 403, "E_API_FORBIDDEN", before)


# -- cancel and retry ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "perm"), [("cancel", "cancel_workflow"), ("retry", "retry_workflow")]
)
def test_cancel_and_retry_need_their_own_permission(api, verb, perm):
    created = api.post("/workflows", fan()).json()
    before = db_state()
    # api's user may cancel and retry jobs, not workflows
    answer = refused(api.post(f"/workflows/{created['id']}/{verb}"), 403, "E_API_FORBIDDEN", before)
    assert f"durable_jobs.{perm}" in answer["message"]


def test_cancel_ends_every_job_not_ended_and_asks_a_running_one_to_stop(boss, worker):
    created = boss.post("/workflows", fan()).json()
    ids = [j["id"] for j in created["jobs"]]
    run(worker)  # fetch completes
    (lease,) = worker.claim_next(operations=[ECHO])  # p0 or p1 runs
    running = str(lease.job_id)
    response = boss.post(f"/workflows/{created['id']}/cancel")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["accepted"] is True and body["message"] == "Cancelled."
    assert body["changed"]["requested"] == [running]
    assert set(body["changed"]["cancelled"]) == set(ids[1:]) - {running}
    statuses = {j["id"]: j["status"] for j in body["workflow"]["jobs"]}
    assert statuses[ids[0]] == "complete" and statuses[running] == "running"
    assert body["workflow"]["cancel_requested_at"] is not None
    assert body["workflow"]["requested_by"].startswith("api:boss")
    row = Job.objects.get(pk=running)
    assert row.cancellation_requested_at is not None

    again = boss.post(f"/workflows/{created['id']}/cancel").json()
    assert again["accepted"] is False and again["changed"] == {"cancelled": [], "requested": []}


def test_retry_reruns_the_failed_job_and_its_cancelled_children_wait_again(boss, worker):
    body = fan(merge=FAIL)
    body["jobs"].append({"name": "report", "operation": ECHO, "after": ["merge"]})
    created = boss.post("/workflows", body).json()
    ids = [j["id"] for j in created["jobs"]]
    for _ in range(3):
        run(worker)
    run(worker, FAIL, fail=True)
    shown = boss.get(f"/workflows/{created['id']}").json()
    assert shown["state"] == "failed"
    assert shown["jobs"][4]["status"] == "cancelled" and "'merge'" in shown["jobs"][4]["error"]

    answer = boss.post(f"/workflows/{created['id']}/retry").json()
    assert answer["accepted"] is True
    assert answer["changed"] == {"retried": [ids[3]], "pending": [], "waiting": [ids[4]]}
    statuses = [j["status"] for j in answer["workflow"]["jobs"]]
    assert statuses == ["complete", "complete", "complete", "failed", "waiting"]
    assert answer["workflow"]["state"] == "running"
    assert answer["workflow"]["jobs"][3]["requests"]["retry_requested_at"] is not None

    nothing = boss.post("/workflows", fan("second")).json()
    again = boss.post(f"/workflows/{nothing['id']}/retry").json()
    assert again["accepted"] is False
    assert again["changed"] == {"retried": [], "pending": [], "waiting": []}


# -- workflow fields on jobs -----------------------------------------------------------------------


def test_jobs_show_their_workflow_node_and_sleep(api, worker):
    created = api.post("/workflows", fan()).json()
    merge = created["jobs"][3]
    job = api.get(f"/jobs/{merge['id']}").json()
    assert (job["workflow"], job["node"], job["status"], job["waiting_on"]) == (
        created["id"],
        "merge",
        "waiting",
        2,
    )
    waiting = api.get("/jobs", status="waiting").json()["items"]
    assert sorted(j["node"] for j in waiting) == ["merge", "p0", "p1"]

    (lease,) = worker.claim_next(operations=[ECHO])
    until = worker.sleep(lease, 600)
    job = api.get(f"/jobs/{lease.job_id}").json()
    assert job["status"] == "sleeping" and job["ownership"] == "unclaimed"
    shown = datetime.fromisoformat(job["sleep_until"].replace("Z", "+00:00"))
    assert abs((shown - until).total_seconds()) < 0.001  # times are given to the millisecond
    assert [j["id"] for j in api.get("/jobs", status="sleeping").json()["items"]] == [
        str(lease.job_id)
    ]
    alone = worker.defer(ECHO, submission({"alone": True}))
    assert api.get(f"/jobs/{alone.pk}").json()["workflow"] is None


def test_unnamed_jobs_wait_for_parents_given_by_place(api):
    body = {
        "name": "plain",
        "jobs": [
            {"operation": ECHO},
            {"operation": ECHO, "after": [0], "on_upstream_failure": "run"},
        ],
    }
    created = api.post("/workflows", body).json()
    first, second = created["jobs"]
    assert (first["node"], second["node"]) == ("", "")
    assert second["parents"] == [first["id"]] and second["waiting_on"] == 1
    assert Job.objects.get(pk=second["id"]).on_upstream_failure == "run"
