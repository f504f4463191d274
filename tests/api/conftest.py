"""Fixtures of the REST API tests: a user with every job permission, its token, a client, stores."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from django_durable_jobs.models.tokens import create_token
from django_durable_jobs.store import DurableJobStore
from tests.api.support import Api, make_user
from tests.support import FakeClock, live_clock


@pytest.fixture
def now_clock() -> FakeClock:
    """A movable clock starting at the real now, so the API (real time) sees current leases."""
    return live_clock()


@pytest.fixture
def user(db) -> User:
    return make_user("alice")


@pytest.fixture
def token(user) -> str:
    return create_token(user, "red", "tests").token


@pytest.fixture
def api(token) -> Api:
    return Api(token)


@pytest.fixture
def red(now_clock) -> DurableJobStore:
    """A store of the token's scope ("red")."""
    return DurableJobStore(scope="red", actor="worker-red", clock=now_clock)


@pytest.fixture
def blue(now_clock) -> DurableJobStore:
    """A store of another scope ("blue")."""
    return DurableJobStore(scope="blue", actor="worker-blue", clock=now_clock)
