"""Fixtures of the worker tests."""

from __future__ import annotations

import pytest

from tests.worker_support import WorkerPool


@pytest.fixture
def workers(transactional_db, db_settings_env, tmp_path):
    """Start runjobs children; every one is killed before the test database is flushed."""
    with WorkerPool(db_settings_env, tmp_path) as pool:
        yield pool
