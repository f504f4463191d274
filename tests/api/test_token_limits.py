"""API tokens limited to operations and expiring: made by ``create_token`` and ``jobs token``.

A token limited to operations submits only those (any other is 403 ``E_API_FORBIDDEN`` with
nothing written); a session user is limited by permissions alone. An expired token is refused
like an unknown one (401), and using it changes nothing. Bad limits are refused before any row
is written, through the function and through the command.
"""

from __future__ import annotations

import io
import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from django_durable_jobs.models import ApiToken, Job
from django_durable_jobs.models.tokens import authenticate_token, create_token, token_allows
from django_durable_jobs.rules.errors import InputInvalid
from tests.api.support import OP, Api, make_user, refused
from tests.support import db_state

pytestmark = pytest.mark.django_db(transaction=True)

OTHER_OP = "tests.steps"  # registered too
TOKEN_LINE = re.compile(r"^(djt_[0-9a-f]{12}_\S+)$", re.MULTILINE)


def _tokens() -> list[dict]:
    return list(ApiToken.objects.order_by("id").values())


# -- create_token ---------------------------------------------------------------------------------


def test_create_token_stores_checked_operations_and_expiry(user):
    later = timezone.now() + timedelta(hours=1)
    issued = create_token(user, "red", operations=[OP, OTHER_OP, OP], expires_at=later)
    row = ApiToken.objects.get(pk=issued.row.pk)
    assert row.operations == [OP, OTHER_OP]  # de-duplicated, in the order given
    assert row.expires_at == later
    unlimited = ApiToken.objects.get(pk=create_token(user, "red").row.pk)
    assert (unlimited.operations, unlimited.expires_at) == ([], None)
    assert token_allows(unlimited, "anything.at.all")
    assert token_allows(row, OP) and not token_allows(row, "tests.fail")


@pytest.mark.parametrize(
    "limits",
    [
        {"operations": "tests.noop"},  # a string, not a list of names
        {"operations": ["bad name!"]},
        {"operations": [""]},
        {"operations": [OP, 7]},
        {"operations": 5},
        {"expires_at": datetime(2030, 1, 1)},  # naive  # noqa: DTZ001
        {"expires_at": "2030-01-01T00:00:00+00:00"},  # text, not a datetime
        {"expires_at": datetime(2000, 1, 1, tzinfo=UTC)},  # the past
        {"expires_at": datetime(9999, 12, 31, tzinfo=UTC)},  # not storable everywhere
    ],
)
def test_create_token_refuses_bad_limits_and_writes_nothing(user, limits):
    before = (_tokens(), db_state())
    with pytest.raises(InputInvalid) as caught:
        create_token(user, "red", "x", **limits)
    assert caught.value.code == "E_JOB_INPUT_INVALID"
    assert (_tokens(), db_state()) == before


def test_expiry_now_is_already_the_past(user, monkeypatch):
    now = timezone.now()
    monkeypatch.setattr("django_durable_jobs.models.tokens.timezone.now", lambda: now)
    before = _tokens()
    with pytest.raises(InputInvalid, match="future"):
        create_token(user, "red", expires_at=now)
    assert _tokens() == before


# -- the submit route ------------------------------------------------------------------------------


def test_limited_token_submits_its_operations_only(user):
    token = create_token(user, "red", operations=[OP]).token
    client = Api(token)
    assert client.post("/jobs", {"operation": OP, "payload": {"n": 1}}).status_code == 201
    before = db_state()
    for operation in (OTHER_OP, "tests.not_registered"):
        response = client.post("/jobs", {"operation": operation, "payload": {"n": 1}})
        body = refused(response, 403, "E_API_FORBIDDEN", before)
        assert operation in body["message"] and "--operation" in body["message"]
    assert Job.objects.filter(operation=OTHER_OP).count() == 0
    # reading is not limited by the list: the token sees its scope's jobs
    assert len(client.get("/jobs").json()["items"]) == 1


def test_malformed_operation_is_still_422_for_a_limited_token(user):
    client = Api(create_token(user, "red", operations=[OP]).token)
    before = db_state()
    refused(client.post("/jobs", {"operation": "no spaces"}), 422, "E_JOB_INPUT_INVALID", before)


def test_unlimited_token_submits_any_registered_operation(token, api):
    for operation in (OP, OTHER_OP):
        response = api.post("/jobs", {"operation": operation, "payload": {"n": 1}})
        assert response.status_code == 201, response.content


def test_session_users_are_not_limited_by_their_tokens(user):
    create_token(user, "default", operations=[OP])  # the user has a limited token…
    client = Client()
    client.force_login(user)  # …but calls with its session
    response = client.post(
        "/jobs/api/jobs", {"operation": OTHER_OP, "payload": {}}, content_type="application/json"
    )
    assert response.status_code == 201, response.content


# -- expiry ---------------------------------------------------------------------------------------


def test_expired_token_is_refused_like_an_unknown_one_and_changes_nothing(user):
    issued = create_token(user, "red", expires_at=timezone.now() + timedelta(hours=1))
    client = Api(issued.token)
    assert client.get("/jobs").status_code == 200
    ApiToken.objects.filter(pk=issued.row.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)  # as if an hour went by
    )
    before = (_tokens(), db_state())
    unknown = Api("djt_000000000000_" + "x" * 43).get("/jobs")
    for response in (
        client.get("/jobs"),
        client.post("/jobs", {"operation": OP, "payload": {"n": 1}}),
        unknown,
    ):
        body = refused(response, 401, "E_API_UNAUTHENTICATED", before[1])
        assert body == unknown.json()  # nothing tells an expired token from an unknown one
        assert response["WWW-Authenticate"].startswith("Bearer")
    assert (_tokens(), db_state()) == before  # not even last_used_at
    assert authenticate_token(issued.token) is None


def test_token_works_until_the_moment_it_expires(user, monkeypatch):
    start = timezone.now()
    issued = create_token(user, "red", expires_at=start + timedelta(seconds=60))
    monkeypatch.setattr(
        "django_durable_jobs.models.tokens.timezone.now", lambda: start + timedelta(seconds=59)
    )
    assert authenticate_token(issued.token) is not None
    monkeypatch.setattr(
        "django_durable_jobs.models.tokens.timezone.now", lambda: start + timedelta(seconds=60)
    )
    assert authenticate_token(issued.token) is None


# -- manage.py jobs token -------------------------------------------------------------------------


def _jobs(*args: str) -> str:
    out = io.StringIO()
    call_command("jobs", "token", *args, stdout=out)
    return out.getvalue()


def test_command_creates_a_limited_expiring_token_and_lists_its_limits():
    make_user("gina")
    started = timezone.now()
    output = _jobs(
        "create",
        "--user",
        "gina",
        "--scope",
        "red",
        "--operation",
        OP,
        "--operation",
        OTHER_OP,
        "--expires-in",
        "1d12h",
    )
    row = ApiToken.objects.get()
    assert row.operations == [OP, OTHER_OP]
    expected = started + timedelta(days=1, hours=12)
    assert expected <= row.expires_at <= expected + timedelta(seconds=30)
    assert f"operations: {OP},{OTHER_OP}" in output
    token = TOKEN_LINE.search(output).group(1)
    before = db_state()
    response = Api(token).post("/jobs", {"operation": "tests.fail", "payload": {}})
    refused(response, 403, "E_API_FORBIDDEN", before)
    (listed,) = json.loads(_jobs("list", "--json"))
    assert listed["operations"] == f"{OP},{OTHER_OP}"
    assert listed["expires"] == row.expires_at.isoformat(timespec="seconds")


def test_command_expires_at_takes_an_iso_time_with_an_offset():
    make_user("hal")
    output = _jobs(
        "create", "--user", "hal", "--scope", "red", "--expires-at", "2031-02-03T04:05:06+02:00"
    )
    row = ApiToken.objects.get()
    assert row.expires_at == datetime(2031, 2, 3, 2, 5, 6, tzinfo=UTC)
    assert row.operations == []
    assert "operations: *" in output
    ApiToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    (listed,) = json.loads(_jobs("list", "--json"))
    assert listed["expires"].endswith("(expired)") and listed["expired"] is True
    assert listed["operations"] == "*"


def test_command_notes_an_operation_no_one_registered():
    make_user("ivy")
    output = _jobs("create", "--user", "ivy", "--scope", "red", "--operation", "not.registered")
    assert "Note: no @operation 'not.registered' is registered" in output
    assert ApiToken.objects.get().operations == ["not.registered"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--expires-in", "soon"], "--expires-in"),
        (["--expires-in", "0"], "--expires-in"),
        (["--expires-in", "0h"], "--expires-in"),
        (["--expires-in", "-5"], "--expires-in"),
        (["--expires-in", "99999999999999999999d"], "--expires-in"),
        (["--expires-in", "500000w"], "--expires-in"),  # past the year 9999
        (["--expires-at", "9999-06-01T00:00:00Z"], "expires_at"),  # past the year 9998
        (["--expires-at", "tomorrow"], "--expires-at"),
        (["--expires-at", "2031-02-03T04:05:06"], "UTC offset"),
        (["--expires-at", "2001-02-03T04:05:06Z"], "future"),
        (["--operation", "bad name"], "Operation"),
        (["--operation", ""], "Operation"),
    ],
)
def test_command_refuses_bad_limits_and_writes_nothing(args, says):
    make_user("jo")
    before = _tokens()
    out = io.StringIO()
    with pytest.raises(CommandError) as refused:
        call_command("jobs", "token", "create", "--user", "jo", "--scope", "red", *args, stdout=out)
    assert says in str(refused.value)
    assert str(refused.value).startswith(("--operation", "--expires-in", "--expires-at"))
    assert out.getvalue() == ""
    assert _tokens() == before


def test_command_refuses_both_expiry_options():
    make_user("kim")
    with pytest.raises(CommandError, match="not allowed with"):
        _jobs(
            "create",
            "--user",
            "kim",
            "--scope",
            "red",
            "--expires-in",
            "1h",
            "--expires-at",
            "2031-01-01T00:00:00Z",
        )
    assert not ApiToken.objects.exists()
