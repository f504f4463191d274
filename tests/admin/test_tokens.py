"""The API token page: a token is shown once, works against the API, and stops when revoked.

Proves: the add form makes a token through ``create_token`` and shows it on the next page only
(never cached; the add form, the token's page, the list and the history never show it again);
the stored hash is never shown, searched or logged; the token authenticates against the REST API
until it is revoked by the action or the button, then gets 401; only the label can be changed;
nobody deletes a token; a user without ``add_apitoken`` cannot create one and one without
``change_apitoken`` cannot revoke one (each refusal leaves every token row as it was); a bad
scope, operation or expiry is refused by the form with nothing written.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from django_durable_jobs.models import ApiToken
from django_durable_jobs.models.tokens import create_token
from tests.api.support import Api, make_user

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.urls")]

LIST = "/admin/durable_jobs/apitoken/"
ADD = f"{LIST}add/"
TOKEN_RE = re.compile(r"djt_[0-9a-f]{12}_[A-Za-z0-9_\-]{20,}")


def tokens_state() -> str:
    """Every token row and admin history entry: equal dumps, nothing written."""
    rows = list(ApiToken.objects.order_by("id").values())
    history = list(LogEntry.objects.order_by("id").values())
    return json.dumps([rows, history], cls=DjangoJSONEncoder, sort_keys=True)


def change_url(pk) -> str:
    return f"{LIST}{pk}/change/"


def create(client, owner, **fields):
    """POST the add form for a token of ``owner``; return the response."""
    data = {
        "user": str(owner.pk),
        "scope": "red",
        "name": "ci",
        "operations_text": "",
        "expires_at_0": "",
        "expires_at_1": "",
        **fields,
    }
    return client.post(ADD, data)


def staff(client, django_user_model, *codenames: str):
    user = django_user_model.objects.create_user("ops", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client.force_login(user)
    return client


@pytest.fixture
def alice():
    return make_user("alice")  # every job permission: the API answers her token with 200


def test_create_shows_the_token_once_and_never_its_hash(root, alice):
    response = create(root, alice)
    assert response.status_code == 200
    html = response.content.decode()
    assert "cannot be shown again" in html
    (token,) = TOKEN_RE.findall(html)  # exactly once on the page
    assert "no-store" in response["Cache-Control"]
    row = ApiToken.objects.get()
    secret = token.split("_", 2)[2]
    assert token == f"djt_{row.prefix}_{secret}"
    assert row.token_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert (row.user, row.scope, row.name, row.operations, row.expires_at) == (
        alice,
        "red",
        "ci",
        [],
        None,
    )
    assert row.token_hash not in html
    pages = [ADD, LIST, change_url(row.pk), f"{LIST}{row.pk}/history/", f"{LIST}?q={row.prefix}"]
    for url in pages:
        page = root.get(url)
        assert page.status_code == 200, url
        text = page.content.decode()
        assert secret not in text and row.token_hash not in text, url
    assert f"djt_{row.prefix}_…" in root.get(LIST).content.decode()
    (entry,) = LogEntry.objects.all()  # the addition, with no value in it
    for logged in (entry.change_message, entry.object_repr):
        assert secret not in logged and row.token_hash not in logged


def test_the_shown_token_works_against_the_api_until_revoked_by_the_action(root, alice):
    token = TOKEN_RE.search(create(root, alice).content.decode()).group(0)
    assert Api(token).get("/jobs").status_code == 200
    row = ApiToken.objects.get()
    body = {"action": "revoke_tokens", "index": "0", "_selected_action": [str(row.pk)]}
    response = root.post(LIST, body, follow=True)
    said = [str(m) for m in response.context["messages"]]
    assert said == ["1 token revoked."]
    assert ApiToken.objects.get().revoked_at is not None
    assert Api(token).get("/jobs").status_code == 401
    again = root.post(LIST, body, follow=True)  # nothing left to revoke: nothing written
    assert [str(m) for m in again.context["messages"]] == [
        "0 tokens revoked; 1 token was already revoked."
    ]


def test_the_revoke_button_ends_the_token_once(root, alice):
    issued = create_token(alice, "red", "button")
    assert Api(issued.token).get("/jobs").status_code == 200
    page = root.get(change_url(issued.row.pk)).content.decode()
    revoke = f"{LIST}{issued.row.pk}/revoke/"
    assert f'action="{revoke}"' in page
    assert root.get(revoke).status_code == 405  # a link cannot revoke
    response = root.post(revoke, follow=True)
    assert [str(m) for m in response.context["messages"]] == [f"Token {issued.row.pk} revoked."]
    assert Api(issued.token).get("/jobs").status_code == 401
    assert f'action="{revoke}"' not in response.content.decode()  # no button any more
    before = tokens_state()
    again = root.post(revoke, follow=True)
    assert "was already revoked" in str(list(again.context["messages"])[0])
    assert tokens_state() == before


def test_several_tokens_are_counted_in_plural(root, alice):
    rows = [create_token(alice, "red", f"t{n}").row for n in range(2)]
    body = {"action": "revoke_tokens", "index": "0", "_selected_action": [r.pk for r in rows]}
    response = root.post(LIST, body, follow=True)
    assert [str(m) for m in response.context["messages"]] == ["2 tokens revoked."]


def test_only_the_label_can_be_changed_and_nobody_deletes(root, alice):
    issued = create_token(alice, "red", "old", operations=["tests.noop"])
    before = ApiToken.objects.get()
    data = {"name": "new", "scope": "blue", "token_hash": "0" * 64, "operations": "[]"}
    assert root.post(change_url(before.pk), data).status_code == 302
    after = ApiToken.objects.get()
    assert after.name == "new"
    assert (after.scope, after.token_hash, after.operations, after.prefix) == (
        before.scope,
        before.token_hash,
        before.operations,
        before.prefix,
    )
    assert Api(issued.token).get("/jobs").status_code == 200
    kept = tokens_state()
    refused = root.post(change_url(before.pk), {"name": "bad\nlabel"})
    assert refused.status_code == 200
    assert "may not contain control characters" in refused.content.decode()
    assert tokens_state() == kept
    assert root.get(f"{LIST}{before.pk}/delete/").status_code == 403
    assert 'value="delete_selected"' not in root.get(LIST).content.decode()


def test_a_user_without_add_permission_cannot_create(client, django_user_model, alice):
    viewer = staff(client, django_user_model, "view_apitoken", "change_apitoken")
    assert viewer.get(LIST).status_code == 200
    assert ADD not in viewer.get(LIST).content.decode()
    before = tokens_state()
    assert viewer.get(ADD).status_code == 403
    response = create(viewer, alice)
    assert response.status_code == 403
    assert TOKEN_RE.search(response.content.decode()) is None
    assert tokens_state() == before


def test_a_user_without_change_permission_cannot_revoke(client, django_user_model, alice):
    issued = create_token(alice, "red", "kept")
    viewer = staff(client, django_user_model, "view_apitoken")
    page = viewer.get(change_url(issued.row.pk)).content.decode()
    assert "durable-jobs-revoke" not in page and "Revoke this token" not in page
    assert "revoke_tokens" not in viewer.get(LIST).content.decode()
    before = tokens_state()
    assert viewer.post(f"{LIST}{issued.row.pk}/revoke/").status_code == 403
    body = {"action": "revoke_tokens", "index": "0", "_selected_action": [issued.row.pk]}
    viewer.post(LIST, body)
    assert tokens_state() == before
    assert Api(issued.token).get("/jobs").status_code == 200


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"scope": "bad\tscope"}, "A scope may not contain control characters"),
        ({"operations_text": "tests.noop, not an operation"}, "may contain only letters"),
        ({"expires_at_0": "2001-01-01", "expires_at_1": "00:00:00"}, "must be in the future"),
        ({"user": "999999"}, "Select a valid choice"),
    ],
)
def test_bad_input_is_refused_by_the_form_with_nothing_written(root, alice, fields, error):
    before = tokens_state()
    response = create(root, alice, **fields)
    assert response.status_code == 200
    html = response.content.decode()
    assert error in html.replace("&#x27;", "'")
    assert TOKEN_RE.search(html) is None
    assert tokens_state() == before


def test_limits_are_kept_and_shown(root, alice):
    expires = timezone.now() + timedelta(days=2)
    response = create(
        root,
        alice,
        operations_text="tests.noop\ntests.fail, tests.noop",
        expires_at_0=expires.strftime("%Y-%m-%d"),
        expires_at_1=expires.strftime("%H:%M:%S"),
    )
    assert "tests.noop, tests.fail" in response.content.decode()
    row = ApiToken.objects.get()
    assert row.operations == ["tests.noop", "tests.fail"]
    assert abs(row.expires_at - expires) < timedelta(seconds=1)


def test_search_never_matches_the_hash_and_the_state_filter_tells_tokens_apart(root, alice):
    active = create_token(alice, "red", "active").row
    revoked = create_token(alice, "red", "revoked").row
    ApiToken.objects.filter(pk=revoked.pk).update(revoked_at=timezone.now())
    expired = create_token(alice, "red", "expired").row
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(hours=1))

    def listed(query: str) -> set:
        response = root.get(f"{LIST}?{query}")
        assert response.status_code == 200
        return {row.pk for row in response.context["cl"].queryset}

    assert listed(f"q={active.token_hash}") == set()
    assert listed(f"q={active.token_hash[:12]}") == set()
    assert listed(f"q={active.prefix}") == {active.pk}
    assert listed("state=active") == {active.pk}
    assert listed("state=revoked") == {revoked.pk}
    assert listed("state=expired") == {expired.pk}
    html = root.get(LIST).content.decode()
    for row in (active, revoked, expired):
        assert row.token_hash not in html
