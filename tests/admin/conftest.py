"""Fixtures of the admin tests: a logged-in superuser and a clock just behind the admin's."""

from __future__ import annotations

import pytest

from tests.support import FakeClock, live_clock


@pytest.fixture
def root(client, django_user_model):
    """Return the test client, logged in as a superuser."""
    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(user)
    return client


@pytest.fixture
def near_now() -> FakeClock:
    """A FakeClock two minutes before the wall clock the admin's own store reads."""
    return live_clock(offset=-120)
