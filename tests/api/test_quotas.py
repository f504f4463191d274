"""Quotas seen through the REST API: 429 with Retry-After, 422 over the priority ceiling.

Every refusal leaves the database as it was; the flood of one token or scope does not touch
another's allowance.
"""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_durable_jobs.models import Job
from django_durable_jobs.models.tokens import create_token
from tests.api.support import OP, Api, make_user, refused
from tests.support import db_state, in_one_window

pytestmark = pytest.mark.django_db(transaction=True)

CAPACITY = "E_JOB_CAPACITY_REACHED"


def quotas(**red):
    return override_settings(DURABLE_JOBS={"SCOPE_QUOTAS": {"red": red}})


def test_a_full_pending_cap_is_429_with_retry_after(api):
    with quotas(MAX_PENDING=2):
        for n in range(2):
            assert api.post("/jobs", {"operation": OP, "payload": {"n": n}}).status_code == 201
        before = db_state()
        response = api.post("/jobs", {"operation": OP, "payload": {"n": 2}})
        body = refused(response, 429, CAPACITY, before)
        assert "MAX_PENDING" in body["message"]
        assert int(response["Retry-After"]) > 0
    assert Job.objects.filter(scope="red").count() == 2


def test_a_used_up_submission_rate_is_429_until_its_window_ends(api):
    in_one_window(3600)
    with quotas(SUBMIT_RATE="2/h"):
        for n in range(2):
            assert api.post("/jobs", {"operation": OP, "payload": {"n": n}}).status_code == 201
        before = db_state()
        response = api.post("/jobs", {"operation": OP, "payload": {"n": 2}})
        refused(response, 429, CAPACITY, before)
        assert 0 < int(response["Retry-After"]) <= 3600


def test_each_token_has_its_own_rate_within_the_scope(user):
    first = Api(create_token(user, "red", "first").token)
    second = Api(create_token(user, "red", "second").token)
    in_one_window(3600)
    with quotas(TOKEN_SUBMIT_RATE="1/h"):
        assert first.post("/jobs", {"operation": OP, "payload": {"n": 1}}).status_code == 201
        before = db_state()
        response = first.post("/jobs", {"operation": OP, "payload": {"n": 2}})
        body = refused(response, 429, CAPACITY, before)
        assert "Token" in body["message"]
        assert "Retry-After" in response
        assert second.post("/jobs", {"operation": OP, "payload": {"n": 3}}).status_code == 201


@pytest.mark.parametrize(
    "bad",
    [
        {"operation": OP, "payload": {}, "queue": "bad\tqueue"},
        {"operation": OP, "proposal": "{not json"},
        {"operation": OP, "proposal": '"\\ud800"'},
        {"operation": OP, "payload": {}, "idempotency_key": "taken"},  # 409: different input
        {"operation": OP, "payload": {}, "priority": 6},  # over the ceiling
    ],
    ids=["queue", "not-json", "surrogate", "conflict", "priority"],
)
def test_refused_submissions_do_not_use_up_a_token_s_window(user, bad):
    api = Api(create_token(user, "red", "limited").token)
    in_one_window(60)
    with quotas(TOKEN_SUBMIT_RATE="5/m", SUBMIT_RATE="5/m", MAX_PRIORITY=5):
        taken = {"operation": OP, "payload": {"first": True}, "idempotency_key": "taken"}
        assert api.post("/jobs", taken).status_code == 201
        before = db_state()
        for _ in range(5):
            response = api.post("/jobs", bad)
            assert response.status_code in (409, 422), response.content
        assert db_state() == before
        for n in range(4):  # the window still holds the four submissions left
            response = api.post("/jobs", {"operation": OP, "payload": {"n": n}})
            assert response.status_code == 201, response.content
        refused(
            api.post("/jobs", {"operation": OP, "payload": {"n": 5}}), 429, CAPACITY, db_state()
        )


def test_a_priority_over_the_scope_s_ceiling_is_422(api):
    with quotas(MAX_PRIORITY=5):
        before = db_state()
        response = api.post("/jobs", {"operation": OP, "payload": {}, "priority": 6})
        body = refused(response, 422, "E_JOB_INPUT_INVALID", before)
        assert "priority 5 at most" in body["message"]
        ok = api.post("/jobs", {"operation": OP, "payload": {}, "priority": 5})
        assert ok.status_code == 201


def test_another_scope_is_not_limited_by_red_s_quotas():
    blue = Api(create_token(make_user("bob"), "blue", "b").token)
    with quotas(MAX_PENDING=1, SUBMIT_RATE="1/h"):
        for n in range(3):
            assert blue.post("/jobs", {"operation": OP, "payload": {"n": n}}).status_code == 201
