"""
Suite-wide pytest configuration.

- A run on PostgreSQL or MariaDB fails at once when that database cannot be
  reached: a database is never skipped silently.
- `db_settings_env` gives the environment a subprocess needs to open the test
  database this run created.
- `clock`, `store` and `rival`: one movable time and two clients of the store
  sharing it (a module whose tests need another store overrides `store`).
"""

from __future__ import annotations

import os

import pytest

from django_durable_jobs.store import DurableJobStore
from tests.settings import REPO_ROOT, TEST_DB
from tests.support import LEASE, FakeClock

SERVER_DATABASES = {"postgresql", "mariadb"}


def pytest_report_header(config: pytest.Config) -> str:
    import django
    from django.conf import settings

    db = settings.DATABASES["default"]
    return (
        f"durable_jobs: DURABLE_JOBS_TEST_DB={TEST_DB} "
        f"(engine {db['ENGINE']}, host {db.get('HOST') or '-'}), Django {django.get_version()}"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the proofs when DURABLE_JOBS_TEST_PROOFS=0 (make test's Django 5.2 run).

    The proofs exercise the store and the worker, which are the same code under either Django;
    make test runs them with the newest Django on every database, and the Django 5.2 run checks
    compatibility with the rest of the suite in less time.
    """
    if os.environ.get("DURABLE_JOBS_TEST_PROOFS", "1") != "0":
        return
    skip = pytest.mark.skip(
        reason="proofs skipped: DURABLE_JOBS_TEST_PROOFS=0 (they run with the newest Django)"
    )
    for item in items:
        if item.get_closest_marker("proof"):
            item.add_marker(skip)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Fail the run when the selected database server cannot be reached."""
    if os.environ.get("DURABLE_JOBS_DB_NAME") and not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.exit(
            "DURABLE_JOBS_DB_NAME is set: it is only for subprocesses started by tests "
            "(see the db_settings_env fixture). Unset it and run pytest again.",
            returncode=1,
        )
    if TEST_DB not in SERVER_DATABASES:
        return
    from django.db import connections

    try:
        # A raw driver connection: pytest-django blocks ensure_connection() outside tests.
        connection = connections["default"]
        raw = connection.get_new_connection(connection.get_connection_params())
        raw.close()
    except Exception as exc:  # any driver or network error must stop the run
        settings_dict = connections.settings["default"]
        pytest.exit(
            f"DURABLE_JOBS_TEST_DB={TEST_DB}: cannot connect to {settings_dict['ENGINE']} at "
            f"{settings_dict.get('HOST')}:{settings_dict.get('PORT')} as "
            f"{settings_dict.get('USER')!r}: {type(exc).__name__}: {exc}\n"
            "Start the database (scripts/ensure-services) or choose DURABLE_JOBS_TEST_DB=sqlite. "
            "Tests for a database are never skipped.",
            returncode=1,
        )


@pytest.fixture(scope="session")
def db_settings_env(django_db_setup: None) -> dict[str, str]:
    """
    Return the environment variables a subprocess needs to open this run's test database.

    Merge it into a copy of os.environ; do not mutate it (it is shared by the session):
        subprocess.run([...], env={**os.environ, **db_settings_env})
    The subprocess then uses tests.settings with NAME replaced by the test database's
    name (for SQLite, its file path). Tests that share rows with a subprocess must
    commit them: use `transactional_db` / `django_db(transaction=True)`.
    """
    from django.db import connection

    pythonpath = str(REPO_ROOT)
    if os.environ.get("PYTHONPATH"):
        pythonpath = os.pathsep.join([pythonpath, os.environ["PYTHONPATH"]])
    return {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DURABLE_JOBS_TEST_DB": TEST_DB,
        "DURABLE_JOBS_DB_NAME": str(connection.settings_dict["NAME"]),
        "PYTHONPATH": pythonpath,
    }


@pytest.fixture
def clock() -> FakeClock:
    """Return a FakeClock at T0; stores built with it share one movable time."""
    return FakeClock()


@pytest.fixture
def store(clock: FakeClock) -> DurableJobStore:
    """Return the client under test: actor "worker-a", leases of ``tests.support.LEASE``."""
    return DurableJobStore(actor="worker-a", lease_seconds=LEASE, clock=clock)


@pytest.fixture
def rival(clock: FakeClock) -> DurableJobStore:
    """Return a second client on the same clock: actor "worker-b", the same lease length."""
    return DurableJobStore(actor="worker-b", lease_seconds=LEASE, clock=clock)
