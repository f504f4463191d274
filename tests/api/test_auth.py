"""REST API security: authentication, permissions, scopes, tokens, CSRF and ATOMIC_REQUESTS.

Proves: anonymous calls are 401 everywhere; each permission gates its endpoints (403); a job of
another scope is a 404 and absent from lists, for bearer tokens and sessions alike; revoked,
malformed and foreign tokens are refused; tokens are stored only as hashes; session writes need
CSRF; views run outside ATOMIC_REQUESTS so the store owns its transactions.
"""

from __future__ import annotations

import hashlib
import uuid

import pytest
from django.core.checks import run_checks
from django.db import connection
from django.middleware.csrf import _get_new_csrf_string
from django.test import Client, override_settings

from django_durable_jobs.models import ApiToken, Job
from django_durable_jobs.models.tokens import create_token
from django_durable_jobs.store import DurableJobStore
from tests.api.support import BASE, OP, Api, make_user, refused
from tests.support import db_state, submission

pytestmark = pytest.mark.django_db(transaction=True)

ENDPOINTS = [
    ("get", "/jobs"),
    ("post", "/jobs"),
    ("get", "/jobs/{id}"),
    ("get", "/jobs/{id}/attempts"),
    ("post", "/jobs/{id}/cancel"),
    ("post", "/jobs/{id}/retry"),
]


def _call(client: Api, method: str, path: str, job_id):
    path = path.format(id=job_id)
    if method == "get":
        return client.get(path)
    return client.post(path, {"operation": OP, "payload": {"n": 9}})


def scope_from_username(request) -> str:
    """A SCOPE_RESOLVER for the tests: every user works in a scope named after them."""
    return f"user-{request.user.get_username()}"


# -- authentication --------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_every_endpoint_refuses_anonymous_callers_with_401(red, method, path):
    job = red.defer(OP, submission(key="x"))
    before = db_state()
    response = _call(Api(), method, path, job.pk)
    refused(response, 401, "E_API_UNAUTHENTICATED", before)
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_docs_and_openapi_document_need_authentication(api):
    client = Client()
    for path in ("/openapi.json", "/docs"):
        assert client.get(BASE + path).status_code == 401
    assert api.get("/openapi.json").status_code == 200
    assert api.get("/docs").status_code == 200


@pytest.mark.parametrize(
    "header",
    [
        "Bearer",
        "Bearer ",
        "Bearer djt_",
        "Bearer not-a-token",
        "Bearer djt_0123456789ab_" + "x" * 43,  # unknown prefix
        "Bearer djt_ZZZZZZZZZZZZ_" + "x" * 43,
        "Basic YWxpY2U6cHc=",
        "Token whatever",
    ],
)
def test_malformed_and_unknown_tokens_are_refused_with_401(api, red, header):
    red.defer(OP, submission(key="x"))
    before = db_state()
    client = Client()
    response = client.get(BASE + "/jobs", headers={"Authorization": header})
    refused(response, 401, "E_API_UNAUTHENTICATED", before)
    response = client.post(
        BASE + "/jobs",
        {"operation": OP},
        content_type="application/json",
        headers={"Authorization": header},
    )
    refused(response, 401, "E_API_UNAUTHENTICATED", before)


def test_a_token_with_the_right_prefix_but_a_wrong_secret_is_refused(token):
    prefix = token.rsplit("_", 1)[0]
    forged = prefix + "_" + ("A" * 43 if not token.endswith("A" * 43) else "B" * 43)
    before = db_state()
    refused(Api(forged).get("/jobs"), 401, "E_API_UNAUTHENTICATED", before)
    assert Api(token).get("/jobs").status_code == 200


def test_a_revoked_token_is_refused_and_others_keep_working(user, token):
    other = create_token(user, "red", "second").token
    assert Api(token).get("/jobs").status_code == 200
    row = ApiToken.objects.get(prefix=token.split("_")[1])
    from django_durable_jobs.models.tokens import revoke_token

    assert revoke_token(row.pk) is True
    assert revoke_token(row.pk) is False  # already revoked
    before = db_state()
    refused(Api(token).get("/jobs"), 401, "E_API_UNAUTHENTICATED", before)
    refused(Api(token).post("/jobs", {"operation": OP}), 401, "E_API_UNAUTHENTICATED", before)
    assert Api(other).get("/jobs").status_code == 200


def test_a_token_of_an_inactive_user_is_refused(user, token):
    user.is_active = False
    user.save()
    before = db_state()
    refused(Api(token).get("/jobs"), 401, "E_API_UNAUTHENTICATED", before)


def test_tokens_are_stored_only_as_sha256_of_the_secret(user):
    issued = create_token(user, "red", "ci")
    _, prefix, secret = issued.token.split("_", 2)
    row = ApiToken.objects.get(pk=issued.row.pk)
    assert row.prefix == prefix
    assert row.token_hash == hashlib.sha256(secret.encode()).hexdigest()
    stored = [str(v) for v in ApiToken.objects.filter(pk=row.pk).values().get().values()]
    assert not any(secret in value for value in stored)
    assert row.last_used_at is None
    assert Api(issued.token).get("/jobs").status_code == 200
    assert ApiToken.objects.get(pk=row.pk).last_used_at is not None


# -- permissions -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("missing", "method", "path"),
    [
        ("view_job", "get", "/jobs"),
        ("view_job", "get", "/jobs/{id}"),
        ("view_job", "get", "/jobs/{id}/attempts"),
        ("add_job", "post", "/jobs"),
        ("cancel_job", "post", "/jobs/{id}/cancel"),
        ("retry_job", "post", "/jobs/{id}/retry"),
    ],
)
@pytest.mark.parametrize("kind", ["token", "session"])
def test_each_endpoint_needs_its_permission_403(red, now_clock, missing, method, path, kind):
    from tests.api.support import ALL_PERMS

    perms = tuple(p for p in ALL_PERMS if p != missing)
    weak = make_user("bob", perms)
    job = red.defer(OP, submission(key="x"))
    red.fail(red.claim(job.pk), "boom")  # retry would be accepted with the permission
    if kind == "token":
        client = Api(create_token(weak, "red").token)
    else:
        client = Api(client=Client())
        client.client.force_login(weak)
    before = db_state()
    body = refused(_call(client, method, path, job.pk), 403, "E_API_FORBIDDEN", before)
    assert missing in body["message"]


# -- scopes ----------------------------------------------------------------------------------------


def _session(user) -> Api:
    client = Api(client=Client())
    client.client.force_login(user)
    return client


@pytest.mark.parametrize("kind", ["token", "session"])
def test_a_job_of_another_scope_behaves_exactly_like_a_missing_one(user, blue, now_clock, kind):
    # A token acts in its own scope ("red"); a session user in DEFAULT_SCOPE ("default").
    scope = "red" if kind == "token" else "default"
    client = Api(create_token(user, "red").token) if kind == "token" else _session(user)
    own = DurableJobStore(scope=scope, clock=now_clock).defer(OP, submission({"o": 1}, key="own"))
    foreign = blue.defer(OP, submission({"foreign": 1}, key="foreign"))
    blue.fail(blue.claim(foreign.pk), "boom")  # cancel and retry would otherwise act on it
    before = db_state()
    for method, path in ENDPOINTS[2:]:
        foreign_response = _call(client, method, path, foreign.pk)
        missing_id = uuid.uuid4()
        missing_response = _call(client, method, path, missing_id)
        refused(foreign_response, 404, "E_JOB_NOT_FOUND", before)
        refused(missing_response, 404, "E_JOB_NOT_FOUND", before)
        assert foreign_response.json()["message"].replace(str(foreign.pk), "ID") == (
            missing_response.json()["message"].replace(str(missing_id), "ID")
        )
    listed = client.get("/jobs").json()["items"]
    assert [item["id"] for item in listed] == [str(own.pk)]
    assert [item["scope"] for item in listed] == [scope]
    assert client.get(f"/jobs/{own.pk}").status_code == 200


def test_a_submission_lands_in_the_callers_scope_whatever_the_body_says(api, blue):
    response = api.post("/jobs", {"operation": OP, "payload": {}, "scope": "blue"})
    assert response.status_code == 201, response.content
    assert Job.objects.get(pk=response.json()["id"]).scope == "red"
    # The same key in another scope is another job, not a conflict nor a coalescing.
    blue.defer(OP, submission({"n": 1}, key="shared"))
    response = api.post(
        "/jobs", {"operation": OP, "payload": {"n": 2}, "idempotency_key": "shared"}
    )
    assert response.status_code == 201
    assert Job.objects.filter(idempotency_key="shared").count() == 2


def test_a_cursor_of_one_scope_is_refused_in_another(user, red, blue):
    for i in range(3):
        red.defer(OP, submission({"i": i}, key=f"r{i}"))
        blue.defer(OP, submission({"i": i}, key=f"b{i}"))
    cursor = Api(create_token(user, "red").token).get("/jobs", limit=1).json()["next_cursor"]
    before = db_state()
    response = Api(create_token(user, "blue").token).get("/jobs", limit=1, cursor=cursor)
    refused(response, 422, "E_JOB_INPUT_INVALID", before)


def test_the_scope_resolver_setting_decides_the_callers_scope(user, now_clock):
    theirs = DurableJobStore(scope="user-alice", clock=now_clock).defer(OP, submission(key="a"))
    DurableJobStore(scope="default", clock=now_clock).defer(OP, submission(key="d"))
    resolver = resolver_path()
    with override_settings(DURABLE_JOBS={"SCOPE_RESOLVER": resolver}):
        client = _session(user)
        assert [i["id"] for i in client.get("/jobs").json()["items"]] == [str(theirs.pk)]
        created = client.post("/jobs", {"operation": OP, "payload": {"n": 1}})
        assert created.status_code == 201
        assert Job.objects.get(pk=created.json()["id"]).scope == "user-alice"


def test_a_scope_resolver_that_is_not_a_dotted_path_is_a_system_check_error():
    with override_settings(DURABLE_JOBS={"SCOPE_RESOLVER": 42}):
        ids = {m.id for m in run_checks()}
    assert "durable_jobs.E007" in ids
    with override_settings(DURABLE_JOBS={"SCOPE_RESOLVER": resolver_path()}):
        assert "durable_jobs.E007" not in {m.id for m in run_checks()}


def resolver_path() -> str:
    return f"{__name__}.scope_from_username"


# -- CSRF and transactions -------------------------------------------------------------------------


def test_session_writes_need_a_csrf_token_and_reads_do_not(user, now_clock):
    job = DurableJobStore(scope="default", clock=now_clock).defer(OP, submission(key="c"))
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    session = Api(client=client)
    assert session.get("/jobs").status_code == 200
    before = db_state()
    for path, body in (("/jobs", {"operation": OP}), (f"/jobs/{job.pk}/cancel", {})):
        body = refused(session.post(path, body), 403, "E_API_FORBIDDEN", before)
        assert "CSRF" in body["message"]
    secret = _get_new_csrf_string()
    client.cookies["csrftoken"] = secret
    response = session.post("/jobs", {"operation": OP, "payload": {}}, X_CSRFTOKEN=secret)
    assert response.status_code == 201, response.content
    response = session.post(f"/jobs/{job.pk}/cancel", X_CSRFTOKEN=secret)
    assert response.status_code == 200 and Job.objects.get(pk=job.pk).status == "cancelled"


def test_bearer_calls_need_no_csrf_and_anonymous_posts_are_401_not_403(token):
    client = Client(enforce_csrf_checks=True)
    before = db_state()
    refused(
        Api(client=client).post("/jobs", {"operation": OP}), 401, "E_API_UNAUTHENTICATED", before
    )
    response = Api(token, client=client).post("/jobs", {"operation": OP, "payload": {}})
    assert response.status_code == 201, response.content


def test_views_run_outside_atomic_requests_so_the_store_owns_its_transactions(
    api, red, monkeypatch
):
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    job = red.defer(OP, submission(key="t"))
    response = api.post("/jobs", {"operation": OP, "payload": {"n": 1}})
    assert response.status_code == 201, response.content
    assert Job.objects.filter(pk=response.json()["id"]).exists()
    response = api.post(f"/jobs/{job.pk}/cancel")
    assert response.status_code == 200, response.content
    assert Job.objects.get(pk=job.pk).status == "cancelled"
