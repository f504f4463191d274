"""A NUL byte anywhere a caller can put one answers a JSON 4xx on every database, never a 500.

PostgreSQL's driver refuses a string holding NUL where SQLite and MariaDB find nothing; the API
refuses it before any query, with the same answer on all three, and writes nothing. (The
schedule routes have their own tests in test_schedules.py.)
"""

from __future__ import annotations

import json

import pytest

from tests.api.support import OP
from tests.support import db_state

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    "query",
    [
        {"operation": "a\x00b"},
        {"cursor": "\x00"},
        {"status": "pend\x00ing"},
        {"ownership": "\x00"},
        {"limit": "1\x00"},
    ],
    ids=["operation", "cursor", "status", "ownership", "limit"],
)
def test_a_nul_byte_in_a_list_query_is_422(api, query):
    before = db_state()
    response = api.get("/jobs", **query)
    assert response.status_code == 422, response.content
    assert db_state() == before


@pytest.mark.parametrize("path", ["/jobs/a%00b", "/jobs/a%00b/attempts"])
def test_a_nul_byte_in_a_job_id_is_not_a_job(api, path):
    response = api.get(path)
    assert response.status_code in (404, 422), response.content
    assert "code" in response.json()


@pytest.mark.parametrize(
    "body",
    [
        {"operation": OP, "idempotency_key": "k\x00"},
        {"operation": OP, "queue": "q\x00"},
        {"operation": OP, "payload": {"k\x00": "v\x00"}},
        {"operation": OP, "proposal": '{"a":"\\u0000"}', "idempotency_key": "escaped"},
        {"operation": "tests.no\x00op"},
    ],
    ids=["key", "queue", "payload", "escaped-in-proposal", "operation"],
)
def test_a_nul_byte_in_a_submission_is_refused_or_stored_exactly(api, body):
    before = db_state()
    response = api.post("/jobs", body)
    if body.get("idempotency_key") == "escaped":
        # An escaped NUL is ASCII text every database stores: the input is kept byte for byte.
        assert response.status_code == 201, response.content
        assert response.json()["proposal"] == {"a": "\x00"}
        return
    assert response.status_code in (201, 422), response.content
    if response.status_code == 422:
        assert db_state() == before
    else:  # a payload value is stored as canonical JSON, where NUL is an escape
        assert json.loads(api.get(f"/jobs/{response.json()['id']}").content)["proposal"] == {
            "k\x00": "v\x00"
        }


def test_a_nul_byte_in_a_bearer_token_is_401(api):
    api.headers = {"Authorization": "Bearer dj_abc\x00def_123"}
    response = api.get("/jobs")
    assert response.status_code == 401, response.content
