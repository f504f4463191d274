"""The schedule endpoints: list and get the schedules of your scope, pause and resume them.

Proves: ``GET /schedules`` lists the schedules whose jobs are enqueued in the caller's scope (a
schedule naming no scope belongs to ``DEFAULT_SCOPE``), with their definition, state, next tick
and last job; ``GET /schedules/{name}`` shows one; ``POST .../pause`` and ``.../resume`` go
through the store and say whether they changed anything; a schedule of another scope is exactly
as missing as one that does not exist (404, absent from the list, untouched); reading needs
``view_schedule`` and pausing ``change_schedule`` (403 otherwise); every refusal is
``{code, message}`` and changes nothing; the OpenAPI document describes the endpoints.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from django_durable_jobs.models import Schedule
from django_durable_jobs.models.tokens import create_token
from django_durable_jobs.schedules import next_tick
from django_durable_jobs.store import DurableJobStore
from tests.api.support import Api, make_user
from tests.schedule_rows import everything, make_schedule, tick_job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.urls")]

SCHEDULE_PERMS = ("view_schedule", "change_schedule")
T1 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


def refused(response, status: int, code: str, before: str) -> dict:
    """Assert a JSON refusal that left every job and schedule row as it was."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"code", "message"} and body["code"] == code and body["message"]
    assert everything() == before
    return body


@pytest.fixture
def ops(db):
    return make_user("ops", SCHEDULE_PERMS)


@pytest.fixture
def red_api(ops) -> Api:
    """A client of scope "red" with both schedule permissions."""
    return Api(create_token(ops, "red").token)


@pytest.fixture
def rows():
    """Schedules of scope red, blue and none (DEFAULT_SCOPE); red's nightly has a last job."""
    nightly = make_schedule("red-nightly", scope="red", timezone="Europe/Paris")
    made = {
        "red-nightly": nightly,
        "red-flush": make_schedule("red-flush", scope="red", interval_seconds=30),
        "blue-nightly": make_schedule("blue-nightly", scope="blue"),
        "unscoped": make_schedule("unscoped"),
    }
    job = tick_job(nightly, T1, DurableJobStore(scope="red", actor="scheduler"))
    return {**made, "job": job}


def test_the_list_shows_the_schedules_of_the_callers_scope(red_api, rows):
    response = red_api.get("/schedules")
    assert response.status_code == 200, response.content
    items = response.json()
    assert [item["name"] for item in items] == ["red-flush", "red-nightly"]
    nightly = items[1]
    assert nightly["operation"] == "tests.noop" and nightly["scope"] == "red"
    assert nightly["cron"] == "0 3 * * *" and nightly["every_seconds"] is None
    assert nightly["timezone"] == "Europe/Paris" and nightly["payload"] == {"kind": "full"}
    assert nightly["state"] == "active" and nightly["overlap"] == "skip"
    assert nightly["last_job_id"] == str(rows["job"].pk)
    assert nightly["last_job_status"] == "pending"
    assert datetime.fromisoformat(nightly["last_tick_at"]) == T1
    expected = next_tick(rows["red-nightly"], timezone.now())
    assert datetime.fromisoformat(nightly["next_tick"]) == expected
    assert items[0]["every_seconds"] == 30 and items[0]["cron"] is None


def test_an_unscoped_schedule_belongs_to_the_default_scope(ops, rows):
    client = Api(create_token(ops, "default").token)
    items = client.get("/schedules").json()
    assert [item["name"] for item in items] == ["unscoped"]
    assert items[0]["scope"] == "default"
    with override_settings(DURABLE_JOBS={"DEFAULT_SCOPE": "red"}):
        names = [
            item["name"] for item in Api(create_token(ops, "red").token).get("/schedules").json()
        ]
    assert names == ["red-flush", "red-nightly", "unscoped"]


def test_get_one_schedule(red_api, rows):
    response = red_api.get("/schedules/red-flush")
    assert response.status_code == 200
    assert response.json()["name"] == "red-flush" and response.json()["every_seconds"] == 30


def test_pause_and_resume_through_the_store(red_api, rows):
    response = red_api.post("/schedules/red-nightly/pause")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["changed"] is True and body["message"] == "Paused."
    assert body["schedule"]["state"] == "paused" and body["schedule"]["next_tick"] is None
    row = Schedule.objects.get(name="red-nightly")
    assert row.paused_at is not None and row.paused_by.startswith("api:ops")

    again = red_api.post("/schedules/red-nightly/pause").json()
    assert again["changed"] is False and "already paused" in again["message"]

    body = red_api.post("/schedules/red-nightly/resume").json()
    assert body["changed"] is True and body["schedule"]["state"] == "active"
    assert Schedule.objects.get(name="red-nightly").paused_at is None
    body = red_api.post("/schedules/red-nightly/resume").json()
    assert body["changed"] is False and "not paused" in body["message"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/schedules/{name}"),
        ("post", "/schedules/{name}/pause"),
        ("post", "/schedules/{name}/resume"),
    ],
)
def test_a_schedule_of_another_scope_is_exactly_like_a_missing_one(red_api, rows, method, path):
    Schedule.objects.filter(name="blue-nightly").update(paused_at=timezone.now())
    before = everything()
    call = getattr(red_api, method)
    foreign = refused(call(path.format(name="blue-nightly")), 404, "E_SCHEDULE_NOT_FOUND", before)
    missing = refused(call(path.format(name="no-such")), 404, "E_SCHEDULE_NOT_FOUND", before)
    assert foreign["message"].replace("blue-nightly", "X") == missing["message"].replace(
        "no-such", "X"
    )
    assert "blue-nightly" not in [item["name"] for item in red_api.get("/schedules").json()]


@pytest.mark.parametrize(
    ("perms", "method", "path", "missing"),
    [
        ((), "get", "/schedules", "view_schedule"),
        ((), "get", "/schedules/red-nightly", "view_schedule"),
        (("view_schedule",), "post", "/schedules/red-nightly/pause", "change_schedule"),
        (("view_schedule",), "post", "/schedules/red-nightly/resume", "change_schedule"),
        (("view_job", "cancel_job"), "post", "/schedules/red-nightly/pause", "change_schedule"),
    ],
)
def test_each_endpoint_needs_its_permission(rows, perms, method, path, missing):
    Schedule.objects.filter(name="red-nightly").update(paused_at=timezone.now())  # resumable
    weak = make_user("weak", perms)
    client = Api(create_token(weak, "red").token)
    before = everything()
    body = refused(getattr(client, method)(path), 403, "E_API_FORBIDDEN", before)
    assert f"durable_jobs.{missing}" in body["message"]


def test_a_session_pause_needs_the_csrf_token(ops, rows):
    session = Api(client=Client(enforce_csrf_checks=True))
    session.client.force_login(ops)
    before = everything()
    refused(session.post("/schedules/unscoped/pause"), 403, "E_API_FORBIDDEN", before)
    assert session.get("/schedules").status_code == 200  # reading needs no CSRF token


def test_anonymous_callers_are_refused(rows):
    before = everything()
    refused(Api().get("/schedules"), 401, "E_API_UNAUTHENTICATED", before)
    refused(Api().post("/schedules/red-nightly/pause"), 401, "E_API_UNAUTHENTICATED", before)


def test_the_openapi_document_describes_the_schedule_endpoints(red_api):
    document = red_api.get("/openapi.json").json()
    paths = document["paths"]
    assert set(paths["/jobs/api/schedules"]) == {"get"}
    assert set(paths["/jobs/api/schedules/{name}"]) == {"get"}
    for verb in ("pause", "resume"):
        responses = paths[f"/jobs/api/schedules/{{name}}/{verb}"]["post"]["responses"]
        assert {"200", "401", "403", "404"} <= set(responses)
        assert responses["404"]["content"]["application/json"]["schema"]["$ref"] == (
            "#/components/schemas/ErrorOut"
        )
    schemas = document["components"]["schemas"]
    schedule = schemas["ScheduleOut"]["properties"]
    for field in ("name", "cron", "every_seconds", "timezone", "state", "next_tick", "last_job_id"):
        assert field in schedule
    assert set(schemas["ScheduleActionOut"]["properties"]) == {"changed", "message", "schedule"}


# -- broken rows, names no schedule could have ------------------------------------------------------


@pytest.fixture
def broken(rows):
    """Two rows of scope red this server cannot read: an unknown time zone and a bad cron."""
    return {
        "red-zone": make_schedule("red-zone", scope="red", timezone="Mars/Olympus"),
        "red-cron": make_schedule("red-cron", scope="red", cron="61 * * * *"),
    }


def test_a_broken_row_is_listed_and_shown_with_its_problem(red_api, broken):
    response = red_api.get("/schedules")
    assert response.status_code == 200, response.content
    items = {item["name"]: item for item in response.json()}
    assert sorted(items) == ["red-cron", "red-flush", "red-nightly", "red-zone"]
    for name, words in (("red-zone", "'Mars/Olympus'"), ("red-cron", "'61 * * * *'")):
        item = items[name]
        assert (item["state"], item["next_tick"]) == ("broken", None)
        assert item["problem"].startswith(f"Schedule {name!r}: ") and words in item["problem"]
        assert "declaration" in item["problem"]
        one = red_api.get(f"/schedules/{name}")
        assert one.status_code == 200, one.content
        assert one.json() == item
    assert items["red-flush"]["state"] == "active" and items["red-flush"]["problem"] is None


def test_a_broken_row_is_paused_and_resumed_like_any_other(red_api, broken):
    body = red_api.post("/schedules/red-zone/pause").json()
    assert body["changed"] is True and body["schedule"]["state"] == "broken"
    assert body["schedule"]["paused_at"] is not None
    assert Schedule.objects.get(name="red-zone").paused_by.startswith("api:ops")
    body = red_api.post("/schedules/red-zone/resume").json()
    assert body["changed"] is True and body["schedule"]["paused_at"] is None


def test_a_row_with_a_policy_no_declaration_gives_is_listed_as_broken(red_api, rows):
    make_schedule("red-odd", scope="red", overlap="never", catch_up="maybe")
    item = red_api.get("/schedules/red-odd").json()
    assert (item["state"], item["overlap"], item["catch_up"]) == ("broken", "never", "maybe")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/schedules/{name}"),
        ("post", "/schedules/{name}/pause"),
        ("post", "/schedules/{name}/resume"),
    ],
)
@pytest.mark.parametrize(
    ("sent", "name"),
    [("a%00b", "a\x00b"), ("%00", "\x00"), ("a%0Ab", "a\nb"), ("x" * 201, "x" * 201)],
    ids=["nul", "only-nul", "newline", "too-long"],
)
def test_a_name_no_schedule_could_have_is_a_404_on_every_database(
    red_api, rows, method, path, sent, name
):
    make_schedule("a", scope="red")  # what a NUL byte would cut the name to
    before = everything()
    body = refused(
        getattr(red_api, method)(path.format(name=sent)), 404, "E_SCHEDULE_NOT_FOUND", before
    )
    assert body == {"code": "E_SCHEDULE_NOT_FOUND", "message": f"There is no schedule {name!r}."}
