"""Plain helpers of the REST API tests: a JSON client, users with permissions, refusals.

The fixtures (``user``, ``token``, ``api``, ``red``, ``blue``, ``now_clock``) are in conftest.py.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.models import Permission, User
from django.test import Client

from tests.support import db_state

BASE = "/jobs/api"
ALL_PERMS = ("view_job", "add_job", "cancel_job", "retry_job")
OP = "tests.noop"


def make_user(username: str, perms: tuple[str, ...] = ALL_PERMS, **extra: Any) -> User:
    user = User.objects.create_user(username=username, password="pw", **extra)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="durable_jobs", codename__in=perms)
    )
    return User.objects.get(pk=user.pk)  # fresh: no stale permission cache


class Api:
    """A test client speaking JSON to the API with a bearer token (or a session)."""

    def __init__(self, token: str | None = None, client: Client | None = None) -> None:
        self.client = client or Client()
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def get(self, path: str, **params: Any):
        return self.client.get(BASE + path, params, headers=self.headers)

    def post(self, path: str, body: Any = None, raw: str | None = None, **headers: str):
        data = raw if raw is not None else json.dumps(body if body is not None else {})
        return self.client.post(
            BASE + path, data, content_type="application/json", headers={**self.headers, **headers}
        )


def refused(response, status: int, code: str, before: str) -> dict:
    """Assert a JSON refusal with ``status`` and ``code`` that left the database unchanged."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"code", "message"}, body
    assert body["code"] == code
    assert body["message"]
    assert db_state() == before
    return body
