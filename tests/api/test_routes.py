"""The REST API's endpoints: each success path, and each refusal as JSON with the DB unchanged.

Covers POST /jobs (201 new, 200 coalesced, exact proposal text, 409/413/422), GET /jobs (filters,
signed cursor pages, bad cursors), GET /jobs/{id}, GET /jobs/{id}/attempts, and the cancel and
retry requests, on whichever database DURABLE_JOBS_TEST_DB selects.
"""

from __future__ import annotations

import json
import uuid

import pytest
from django.test import override_settings

from django_durable_jobs.api.errors import error_response, status_for
from django_durable_jobs.models import Job
from django_durable_jobs.rules.errors import CapacityReached, DeadlineExceeded, JobError
from tests.api.support import OP, refused
from tests.support import db_state, submission

pytestmark = pytest.mark.django_db(transaction=True)


# -- POST /jobs ----------------------------------------------------------------------------------


def test_submit_creates_a_pending_job_in_the_callers_scope_with_201(api):
    response = api.post(
        "/jobs",
        {
            "operation": OP,
            "payload": {"b": 2, "a": [1, "x"]},
            "idempotency_key": "k1",
            "queue": "slow",
            "priority": 7,
            "run_after": "2030-01-02T03:04:05+00:00",
        },
    )
    assert response.status_code == 201, response.content
    body = response.json()
    row = Job.objects.get(pk=body["id"])
    assert (row.scope, row.operation, row.status, row.idempotency_key) == (
        "red",
        OP,
        "pending",
        "k1",
    )
    assert row.proposal == '{"a":[1,"x"],"b":2}'  # canonical JSON
    assert (row.queue, row.priority, row.run_after.isoformat()) == (
        "slow",
        7,
        "2030-01-02T03:04:05+00:00",
    )
    assert body["proposal"] == {"a": [1, "x"], "b": 2}
    assert body["ownership"] == "unclaimed"
    assert body["epoch"] == 0 and body["attempts"] == 0
    assert body["lease"]["expires_at"] is None
    assert body["requests"] == {"cancellation_requested_at": None, "retry_requested_at": None}


def test_submitting_the_same_key_and_input_again_returns_the_same_job_with_200(api):
    first = api.post("/jobs", {"operation": OP, "payload": {"n": 1}, "idempotency_key": "same"})
    assert first.status_code == 201
    before = db_state()
    again = api.post("/jobs", {"operation": OP, "payload": {"n": 1}, "idempotency_key": "same"})
    assert again.status_code == 200, again.content
    assert again.json()["id"] == first.json()["id"]
    assert db_state() == before


def test_submit_without_a_key_always_creates_a_new_job(api):
    a = api.post("/jobs", {"operation": OP, "payload": {"n": 1}})
    b = api.post("/jobs", {"operation": OP, "payload": {"n": 1}})
    assert (a.status_code, b.status_code) == (201, 201)
    assert a.json()["id"] != b.json()["id"]
    assert Job.objects.count() == 2


def test_proposal_text_is_stored_byte_for_byte(api):
    text = '{ "z" : 1,\n  "a": "é" }'
    response = api.post("/jobs", {"operation": OP, "proposal": text, "idempotency_key": "p"})
    assert response.status_code == 201, response.content
    assert Job.objects.get(pk=response.json()["id"]).proposal == text
    assert (
        api.post("/jobs", {"operation": OP, "proposal": text, "idempotency_key": "p"}).json()["id"]
        == response.json()["id"]
    )


def test_same_key_with_different_input_is_a_409_conflict(api):
    api.post("/jobs", {"operation": OP, "payload": {"n": 1}, "idempotency_key": "k"})
    before = db_state()
    response = api.post("/jobs", {"operation": OP, "payload": {"n": 2}, "idempotency_key": "k"})
    refused(response, 409, "E_JOB_IDEMPOTENCY_CONFLICT", before)


def test_payload_over_the_cap_is_413_with_the_input_invalid_code(api):
    before = db_state()
    with override_settings(DURABLE_JOBS={"MAX_PAYLOAD_BYTES": 64}):
        response = api.post("/jobs", {"operation": OP, "payload": {"blob": "x" * 100}})
        body = refused(response, 413, "E_JOB_INPUT_INVALID", before)
        assert "64-byte cap" in body["message"]
        response = api.post("/jobs", {"operation": OP, "proposal": json.dumps(["y" * 80])})
        refused(response, 413, "E_JOB_INPUT_INVALID", before)
        # At the cap exactly it is accepted.
        at_cap = '"' + "z" * 62 + '"'
        assert api.post("/jobs", {"operation": OP, "proposal": at_cap}).status_code == 201


def test_request_body_over_djangos_upload_limit_is_413(api):
    before = db_state()
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=100):
        response = api.post("/jobs", {"operation": OP, "payload": {"blob": "x" * 200}})
    refused(response, 413, "E_JOB_INPUT_INVALID", before)


@pytest.mark.parametrize(
    "body",
    [
        {"operation": "tests.not_registered", "payload": {}},
        {"operation": "bad name!", "payload": {}},
        {"operation": OP, "proposal": "{not json"},
        {"operation": OP, "proposal": "NaN"},
        {"operation": OP, "payload": {"a": 1}, "proposal": '{"a":1}'},
        {"operation": OP, "idempotency_key": "   "},
        {"operation": OP, "queue": "bad\nqueue"},
        {"operation": OP, "run_after": "2030-01-01T00:00:00"},  # naive
        {"operation": OP, "run_after": "0001-01-01T00:00:00+14:00"},  # before year 1 in UTC
        {"operation": OP, "run_after": "9999-12-31T23:59:59-14:00"},  # after 9999 in UTC
        {"operation": OP, "run_after": "0500-01-01T00:00:00Z"},  # not storable on MariaDB
        {"operation": OP, "priority": 101},  # ninja's validation
        {"operation": OP, "priority": "high"},
        {"payload": {}},  # no operation
        {"operation": 5},
    ],
)
def test_invalid_submissions_are_422_and_write_nothing(api, body):
    before = db_state()
    refused(api.post("/jobs", body), 422, "E_JOB_INPUT_INVALID", before)


@pytest.mark.parametrize(
    "raw",
    [
        "{not json",
        "[]",
        '"text"',
        "",
        '{"operation": "tests.noop", "payload": "\\ud800"}',  # lone surrogate
        '{"operation": "tests.noop", "proposal": "\\"\\ud800\\""}',
        '{"operation": "tests.noop", "idempotency_key": "k\\udfff"}',
        '{"operation": "tests.noop", "queue": "q\\ud800"}',
        '{"operation": "tests.noop", "payload": NaN}',
    ],
)
def test_a_body_that_is_not_a_json_object_is_422(api, raw):
    before = db_state()
    refused(api.post("/jobs", raw=raw), 422, "E_JOB_INPUT_INVALID", before)


# -- GET /jobs -----------------------------------------------------------------------------------


def _defer(store, n: int, op: str = OP, key: str | None = None):
    jobs = []
    for i in range(n):
        jobs.append(store.defer(op, submission({"i": i}, key=f"{key or 'k'}{i}")))
        store.clock.advance(1)
    return jobs


def test_list_pages_through_every_job_oldest_first_with_signed_cursors(api, red, blue):
    jobs = _defer(red, 5)
    _defer(blue, 2)
    seen, cursor = [], None
    for _ in range(3):
        params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        response = api.get("/jobs", **params)
        assert response.status_code == 200, response.content
        page = response.json()
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [str(j.pk) for j in jobs]
    assert cursor is None


def test_list_filters_by_operation_status_and_ownership(api, red, now_clock):
    noop = _defer(red, 2)
    steps = _defer(red, 2, op="tests.steps", key="s")
    lease = red.claim(steps[0].pk)
    red.complete(red.claim(noop[1].pk), {"ok": 1})

    def ids(**params):
        response = api.get("/jobs", **params)
        assert response.status_code == 200, response.content
        return {item["id"] for item in response.json()["items"]}

    assert ids(operation="tests.steps") == {str(s.pk) for s in steps}
    assert ids(status="complete") == {str(noop[1].pk)}
    assert ids(ownership="current") == {str(lease.job_id)}
    assert ids(ownership="unclaimed") == {str(noop[0].pk), str(steps[1].pk)}
    assert ids(ownership="terminal", operation=OP) == {str(noop[1].pk)}
    now_clock.advance(red.lease + 1)  # the API reads real time: move past the lease in SQL terms
    assert ids(operation="tests.steps", status="running") == {str(lease.job_id)}


@pytest.mark.parametrize(
    "params",
    [
        {"limit": 0},
        {"limit": 101},
        {"limit": 10**30},
        {"limit": "many"},
        {"status": "nope"},
        {"ownership": "mine"},
        {"cursor": "garbage"},
    ],
)
def test_bad_list_parameters_are_422(api, params):
    before = db_state()
    refused(api.get("/jobs", **params), 422, "E_JOB_INPUT_INVALID", before)


def test_a_cursor_is_bound_to_its_filters_and_cannot_be_altered(api, red):
    _defer(red, 3)
    cursor = api.get("/jobs", limit=1).json()["next_cursor"]
    assert cursor
    before = db_state()
    refused(api.get("/jobs", limit=2, cursor=cursor), 422, "E_JOB_INPUT_INVALID", before)
    refused(
        api.get("/jobs", limit=1, status="pending", cursor=cursor),
        422,
        "E_JOB_INPUT_INVALID",
        before,
    )
    tampered = cursor[:-2] + ("AA" if not cursor.endswith("AA") else "BB")
    refused(api.get("/jobs", limit=1, cursor=tampered), 422, "E_JOB_INPUT_INVALID", before)
    assert api.get("/jobs", limit=1, cursor=cursor).status_code == 200


# -- GET /jobs/{id} and /attempts ------------------------------------------------------------------


def test_get_shows_lease_epoch_progress_checkpoint_and_requests(api, red):
    job = red.defer(OP, submission({"n": 1}, key="g"))
    lease = red.claim(job.pk)
    red.progress(lease, 40)
    red.checkpoint(lease, '{"step":2}')
    red.request_cancel(job.pk)
    response = api.get(f"/jobs/{job.pk}")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["status"], body["ownership"], body["epoch"], body["attempts"]) == (
        "running",
        "current",
        1,
        1,
    )
    assert body["progress"] == 40.0
    assert body["checkpoint"] == {"step": 2}
    assert body["lease"]["owner_id"] == red.owner_id
    assert body["lease"]["claimed_by"] == "worker-red"
    assert body["lease"]["expires_at"] is not None
    assert body["requests"]["cancellation_requested_at"] is not None
    assert body["result"] is None and body["error"] is None


def test_unknown_job_is_404_and_malformed_id_is_422_never_500(api):
    before = db_state()
    refused(api.get(f"/jobs/{uuid.uuid4()}"), 404, "E_JOB_NOT_FOUND", before)
    for path in ("/jobs/not-a-uuid", "/jobs/123/attempts"):
        refused(api.get(path), 422, "E_JOB_INPUT_INVALID", before)
    for path in ("/jobs/not-a-uuid/cancel", "/jobs/%00/retry"):
        response = api.post(path)
        assert response.status_code in (404, 422), response.content
        assert db_state() == before


def test_attempts_lists_ended_attempts_oldest_first(api, red, now_clock):
    job = red.defer(OP, submission({"n": 1}, key="a"))
    red.claim(job.pk)
    now_clock.advance(red.lease + 1)
    red.fail(red.claim(job.pk), "boom")
    response = api.get(f"/jobs/{job.pk}/attempts")
    assert response.status_code == 200, response.content
    body = response.json()
    assert [(a["epoch"], a["outcome"]) for a in body] == [(1, "interrupted"), (2, "failed")]
    assert body[1]["error"] and "boom" in body[1]["error"]
    assert api.get(f"/jobs/{job.pk}").json()["error"]
    before = db_state()
    refused(api.get(f"/jobs/{uuid.uuid4()}/attempts"), 404, "E_JOB_NOT_FOUND", before)


# -- cancel and retry ------------------------------------------------------------------------------


def test_attempts_include_a_claim_released_unstarted(api, red):
    job = red.defer(OP, submission({"n": 1}, key="released"))
    [claim] = red.claim_batch(limit=1, operations=[OP], resume_expired=[])
    assert red.release([claim.lease]) == 1
    body = api.get(f"/jobs/{job.pk}/attempts").json()
    assert [(a["epoch"], a["outcome"]) for a in body] == [(1, "released")]
    shown = api.get(f"/jobs/{job.pk}").json()
    assert (shown["status"], shown["ownership"], shown["attempts"]) == ("pending", "unclaimed", 0)


def test_cancel_ends_a_pending_job_and_asks_a_running_one_to_stop(api, red):
    pending = red.defer(OP, submission({"n": 1}, key="c1"))
    running = red.defer(OP, submission({"n": 2}, key="c2"))
    red.claim(running.pk)
    response = api.post(f"/jobs/{pending.pk}/cancel")
    assert response.status_code == 200, response.content
    assert response.json()["accepted"] is True
    assert Job.objects.get(pk=pending.pk).status == "cancelled"
    response = api.post(f"/jobs/{running.pk}/cancel")
    assert response.status_code == 200 and response.json()["accepted"] is True
    row = Job.objects.get(pk=running.pk)
    assert row.status == "running" and row.cancellation_requested_at is not None
    assert response.json()["job"]["requests"]["cancellation_requested_at"] is not None


def test_cancel_of_an_ended_job_is_not_accepted_and_changes_nothing(api, red):
    job = red.defer(OP, submission({"n": 1}, key="c"))
    red.complete(red.claim(job.pk), 1)
    before = db_state()
    response = api.post(f"/jobs/{job.pk}/cancel")
    assert response.status_code == 200
    assert response.json()["accepted"] is False and response.json()["job"]["status"] == "complete"
    assert db_state() == before
    refused(api.post(f"/jobs/{uuid.uuid4()}/cancel"), 404, "E_JOB_NOT_FOUND", before)


def test_retry_records_a_request_on_a_failed_job(api, red):
    job = red.defer(OP, submission({"n": 1}, key="r"))
    red.fail(red.claim(job.pk), "boom")
    response = api.post(f"/jobs/{job.pk}/retry")
    assert response.status_code == 200, response.content
    assert response.json()["accepted"] is True
    assert Job.objects.get(pk=job.pk).retry_requested_at is not None


def test_retry_of_a_complete_job_is_409_and_of_a_pending_one_not_accepted(api, red):
    done = red.defer(OP, submission({"n": 1}, key="r1"))
    red.complete(red.claim(done.pk), 1)
    waiting = red.defer(OP, submission({"n": 2}, key="r2"))
    before = db_state()
    refused(api.post(f"/jobs/{done.pk}/retry"), 409, "E_JOB_NOT_RECLAIMABLE", before)
    response = api.post(f"/jobs/{waiting.pk}/retry")
    assert response.status_code == 200 and response.json()["accepted"] is False
    assert db_state() == before
    refused(api.post(f"/jobs/{uuid.uuid4()}/retry"), 404, "E_JOB_NOT_FOUND", before)


# -- the error table -------------------------------------------------------------------------------


def test_capacity_reached_maps_to_429_with_retry_after():
    response = error_response(CapacityReached("busy"))
    assert response.status_code == 429
    assert int(response["Retry-After"]) > 0
    assert json.loads(response.content) == {"code": "E_JOB_CAPACITY_REACHED", "message": "busy"}
    assert status_for(DeadlineExceeded("slow")) == 503
    assert status_for(JobError("other")) == 400
