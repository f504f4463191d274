"""The REST API refuses JSON nested deeper than 64 levels with 422, and reads any stored row.

Proves: a ``payload`` (or a ``proposal`` text) 64 levels deep is accepted (201) and one of 65 is
refused with 422 ``{code, message}`` and nothing written; a body nested 100,000 levels deep is a
422 saying so, never a 500; rows written outside the app with JSON 10,000 levels deep are listed
with their scope's other jobs and read one by one (their payloads ``null``, the diagnostic saying
why) without a crash.
"""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from django_durable_jobs.models import Job
from tests.api.support import OP, refused
from tests.deep_json import deep_outside_rows, nested_text, nested_value
from tests.support import db_state

pytestmark = pytest.mark.django_db(transaction=True)

INVALID = "E_JOB_INPUT_INVALID"


def test_a_payload_64_levels_deep_is_accepted(api):
    response = api.post("/jobs", {"operation": OP, "payload": nested_value(64)})
    assert response.status_code == 201, response.content
    assert Job.objects.get().proposal == nested_text(64)
    assert response.json()["proposal"] == nested_value(64)


def test_a_payload_65_levels_deep_is_refused_with_422(api):
    before = db_state()
    body = refused(
        api.post("/jobs", {"operation": OP, "payload": nested_value(65)}), 422, INVALID, before
    )
    assert "nested" in body["message"] and "64" in body["message"]


def test_a_proposal_text_is_held_to_the_same_limit(api):
    ok = api.post("/jobs", {"operation": OP, "proposal": nested_text(64), "idempotency_key": "a"})
    assert ok.status_code == 201, ok.content
    before = db_state()
    body = refused(
        api.post("/jobs", {"operation": OP, "proposal": nested_text(65), "idempotency_key": "b"}),
        422,
        INVALID,
        before,
    )
    assert body["message"].startswith("The proposal is too deeply nested: it is nested 65 levels")


@pytest.mark.parametrize("where", ["payload", "proposal", "body"])
def test_a_body_100000_levels_deep_is_a_422_not_a_500(api, where):
    deep = nested_text(100_000)
    if where == "payload":
        raw = '{"operation": "' + OP + '", "payload": ' + deep + "}"
    elif where == "proposal":
        raw = json.dumps({"operation": OP, "proposal": deep})
    else:
        raw = deep
    before = db_state()
    body = refused(api.post("/jobs", raw=raw), 422, INVALID, before)
    assert "nested" in body["message"] and "64" in body["message"], body


def test_rows_written_outside_the_app_10000_levels_deep_are_listed_and_read(api):
    now = timezone.now()
    deep = nested_text(10_000)
    rows = list(deep_outside_rows(deep, now=now, scope="red").values())
    Job.objects.bulk_create(rows)
    listed = api.get("/jobs", limit=100)
    assert listed.status_code == 200, listed.content
    assert {item["id"] for item in listed.json()["items"]} == {str(r.pk) for r in rows}
    for ownership in ("unclaimed", "legacy-unknown", "terminal"):
        assert api.get("/jobs", ownership=ownership).status_code == 200
    for row in rows:
        response = api.get(f"/jobs/{row.pk}")
        assert response.status_code == 200, response.content
        body = response.json()
        assert body["diagnostic"], body
        if row.idempotency_key != "done":
            assert body["proposal"] is None  # not JSON this app reads; see the diagnostic
    done = api.get(f"/jobs/{rows[2].pk}").json()
    assert (done["checkpoint"], done["result"]) == (None, None)
    assert "nested 10,000 levels deep" in done["diagnostic"]
