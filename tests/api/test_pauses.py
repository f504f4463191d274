"""The pause endpoints: ``GET /pauses``, ``POST /pauses``, ``POST /pauses/{id}/resume``.

Proves: a caller with ``pause_work`` pauses a queue or an operation in its own scope (201, then
200 for the pause already in force), lists the pauses holding its scope, and resumes them (the
row kept); without the permission every endpoint is 403 and writes nothing; bad input is 422;
another scope's pause is as missing as an unknown one (404, untouched); an every-scope pause
made by an operator is listed but only an operator resumes it (403).
"""

from __future__ import annotations

import pytest

from django_durable_jobs.models import JobPause
from django_durable_jobs.models.tokens import create_token
from django_durable_jobs.store import DurableJobStore
from tests.api.support import ALL_PERMS, Api, make_user
from tests.flow.pause_support import pause_state

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.urls")]


def refused(response, status: int, code: str, before: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"code", "message"} and body["code"] == code and body["message"]
    assert pause_state() == before
    return body


@pytest.fixture
def ops(db):
    return make_user("ops", (*ALL_PERMS, "pause_work"))


@pytest.fixture
def red_api(ops) -> Api:
    return Api(create_token(ops, "red").token)


def test_pause_list_and_resume_in_the_callers_scope(red_api):
    made = red_api.post("/pauses", {"target": "queue", "name": "mail", "reason": "incident"})
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["changed"] is True
    pause = body["pause"]
    assert (pause["scope"], pause["active"], pause["reason"]) == ("red", True, "incident")
    assert pause["paused_by"].startswith("api:ops:token-")

    again = red_api.post("/pauses", {"target": "queue", "name": "mail", "reason": "twice"})
    assert again.status_code == 200 and again.json()["pause"]["id"] == pause["id"]
    assert [p["id"] for p in red_api.get("/pauses").json()] == [pause["id"]]

    resumed = red_api.post(f"/pauses/{pause['id']}/resume")
    assert resumed.status_code == 200, resumed.content
    assert resumed.json()["changed"] is True and resumed.json()["pause"]["active"] is False
    assert JobPause.objects.get(pk=pause["id"]).active is None  # kept as evidence
    assert red_api.get("/pauses").json() == []
    assert [p["id"] for p in red_api.get("/pauses", all="true").json()] == [pause["id"]]
    assert red_api.post(f"/pauses/{pause['id']}/resume").json()["changed"] is False


def test_without_the_permission_every_endpoint_is_403_and_writes_nothing(db):
    viewer = Api(create_token(make_user("viewer"), "red").token)  # every job permission but this
    DurableJobStore(scope="red").pause("queue", "mail")
    paused = JobPause.objects.get()
    before = pause_state()
    refused(viewer.get("/pauses"), 403, "E_API_FORBIDDEN", before)
    refused(
        viewer.post("/pauses", {"target": "queue", "name": "sms"}), 403, "E_API_FORBIDDEN", before
    )
    body = refused(viewer.post(f"/pauses/{paused.pk}/resume"), 403, "E_API_FORBIDDEN", before)
    assert "durable_jobs.pause_work" in body["message"]


@pytest.mark.parametrize(
    "body",
    [
        {"target": "queues", "name": "mail"},
        {"target": "queue", "name": ""},
        {"target": "queue", "name": "bad\u0007name"},
        {"target": "operation", "name": "no spaces"},
        {"target": "queue", "name": "mail", "reason": "x" * 2001},
        {"target": "queue"},
    ],
)
def test_bad_input_is_422_and_writes_nothing(red_api, body):
    refused(red_api.post("/pauses", body), 422, "E_JOB_INPUT_INVALID", pause_state())


def test_another_scopes_pause_is_missing_and_an_every_scope_pause_is_an_operators(red_api):
    blue = DurableJobStore(scope="blue").pause("queue", "mail").pause
    everywhere = DurableJobStore().pause("operation", "tests.noop").pause
    assert [p["id"] for p in red_api.get("/pauses").json()] == [everywhere.pk]
    before = pause_state()
    refused(red_api.post(f"/pauses/{blue.pk}/resume"), 404, "E_PAUSE_NOT_FOUND", before)
    refused(red_api.post("/pauses/987654/resume"), 404, "E_PAUSE_NOT_FOUND", before)
    body = refused(red_api.post(f"/pauses/{everywhere.pk}/resume"), 403, "E_API_FORBIDDEN", before)
    assert "holds every scope" in body["message"]
