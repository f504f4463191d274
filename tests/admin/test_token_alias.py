"""The API token page reads and writes tokens through ``DURABLE_JOBS['DATABASE']``.

As in ``test_database_alias.py`` (whose second alias this module borrows): with ``DATABASE`` set
to another connection to the test database, every query on the token table made by the list, its
search and filter, the token's page, the add form and both ways of revoking goes through that
connection and none through ``default``.
"""

from __future__ import annotations

import re

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.models import ApiToken
from django_durable_jobs.models.tokens import create_token
from tests.admin.test_database_alias import OTHER, _second_alias, other_alias  # noqa: F401
from tests.api.support import make_user

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", OTHER]),
    pytest.mark.urls("tests.urls"),
]
LIST = "/admin/durable_jobs/apitoken/"
TOKEN_TABLE = re.compile(r"durable_jobs_apitoken\b")


def _only_other(root, url: str, data: dict | None = None, *, post: bool = False):
    """Request ``url``; require token-table queries on the other alias and none on default."""
    with (
        CaptureQueriesContext(connections["default"]) as on_default,
        CaptureQueriesContext(connections[OTHER]) as on_other,
    ):
        if post:
            response = root.post(url, data or {}, follow=True)
        else:
            response = root.get(url, data or {})
    assert response.status_code == 200, (url, response.status_code)
    default_sql = [q["sql"] for q in on_default.captured_queries if TOKEN_TABLE.search(q["sql"])]
    other_sql = [q["sql"] for q in on_other.captured_queries if TOKEN_TABLE.search(q["sql"])]
    assert default_sql == [], (url, default_sql)
    assert other_sql, url
    return response


def test_the_token_page_reads_and_writes_the_configured_alias(root, other_alias):  # noqa: F811
    alice = make_user("alice")
    row = create_token(alice, "red", "first").row
    for params in ({}, {"q": row.prefix}, {"state": "active"}, {"scope__exact": "red"}):
        assert _only_other(root, LIST, params).context["cl"].result_count == 1, params
    _only_other(root, f"{LIST}{row.pk}/change/")
    form = {
        "user": alice.pk,
        "scope": "red",
        "name": "second",
        "expires_at_0": "",
        "expires_at_1": "",
    }
    created = _only_other(root, f"{LIST}add/", form, post=True)
    assert "cannot be shown again" in created.content.decode()
    second = ApiToken.objects.get(name="second")
    _only_other(root, f"{LIST}{second.pk}/revoke/", post=True)
    body = {"action": "revoke_tokens", "index": "0", "_selected_action": [row.pk]}
    _only_other(root, LIST, body, post=True)
    assert not ApiToken.objects.filter(revoked_at__isnull=True).exists()
