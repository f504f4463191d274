"""GET /jobs/stats: the snapshot of the caller's scope, with the permission to view jobs."""

from __future__ import annotations

import pytest
from django.utils import timezone

from django_durable_jobs.api import api as ninja_api
from django_durable_jobs.models.tokens import create_token
from django_durable_jobs.store import DurableJobStore
from tests.api.support import Api, make_user
from tests.stats_mix import expected
from tests.support import submission

OP = "tests.noop"
pytestmark = pytest.mark.django_db(transaction=True)  # the store commits its own writes


def _work(red: DurableJobStore, now_clock) -> None:
    """Red: two pending jobs (one in queue "slow"), one complete, one failed; blue: three pending."""
    blue = DurableJobStore(scope="blue", actor="worker-blue", clock=now_clock)
    for i in range(2):
        red.defer(OP, submission({"i": i}), queue="slow" if i else None)
    red.complete(red.claim(red.defer(OP, submission({"i": 2})).pk), {"ok": True})
    red.fail(red.claim(red.defer("tests.other", submission({"i": 3})).pk), "boom")
    for i in range(3):
        blue.defer("tests.blue_only", submission({"i": i}))


def test_the_numbers_of_the_token_s_scope_only(api, red, now_clock):
    _work(red, now_clock)
    response = api.get("/jobs/stats")
    assert response.status_code == 200, response.content
    body = response.json()
    want = expected(timezone.now(), "red")
    assert body["scope"] == "red"
    assert {
        (c["operation"], c["queue"], c["status"], c["ownership"]): c["count"] for c in body["jobs"]
    } == dict(want["live"])
    assert {
        (t["operation"], t["queue"], t["status"]): t["count"] for t in body["terminal_last_24h"]
    } == dict(want["day"])
    assert {q["queue"]: (q["pending"], q["due"], q["running"]) for q in body["queues"]} == {
        name: (q["pending"], q["due"], q["running"]) for name, q in want["queues"].items()
    }
    assert {a["kind"]: a["count"] for a in body["attention"]} == want["attention"]
    assert "tests.blue_only" not in response.content.decode()
    assert len(body["history_per_minute"]) == 60 and len(body["history_per_hour"]) == 24


def test_another_scope_sees_its_own(user, red, now_clock):
    _work(red, now_clock)
    body = Api(create_token(user, "blue", "tests").token).get("/jobs/stats").json()
    assert body["scope"] == "blue"
    assert [(c["operation"], c["count"]) for c in body["jobs"]] == [("tests.blue_only", 3)]
    assert body["terminal_last_24h"] == []


def test_it_needs_a_caller_with_the_view_permission(db):
    assert Api().get("/jobs/stats").status_code == 401
    viewer_not = make_user("bob", perms=("add_job",))
    response = Api(create_token(viewer_not, "red", "tests").token).get("/jobs/stats")
    assert response.status_code == 403
    assert response.json()["code"] == "E_API_FORBIDDEN"


def test_openapi_documents_the_route_and_its_body(db):
    schema = ninja_api.get_openapi_schema()
    paths = [p for p in schema["paths"] if p.endswith("/jobs/stats")]
    assert len(paths) == 1
    responses = schema["paths"][paths[0]]["get"]["responses"]
    ok = responses.get(200) or responses["200"]
    assert ok["content"]["application/json"]["schema"]["$ref"].endswith("/StatsOut")
    assert "lag_seconds" in schema["components"]["schemas"]["QueueOut"]["properties"]
