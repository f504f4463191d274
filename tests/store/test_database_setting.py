"""``DurableJobStore()`` without ``using=`` works on ``DURABLE_JOBS['DATABASE']``, never "default".

The test settings define one database, so the module adds a second alias, ``durable_jobs_other``,
for its own duration: a second connection to the same test database (as
tests/admin/test_database_alias.py does). With ``DATABASE`` set to it, a store built without
``using=`` takes that alias, and its writes and reads go through that connection only; an alias
the settings do not know is refused when the store is built.
"""

from __future__ import annotations

import pytest
from django.db import connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.models import Job
from django_durable_jobs.rules.errors import InputInvalid
from django_durable_jobs.store import DurableJobStore
from tests.support import second_alias, submission

OTHER = "durable_jobs_other"

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", OTHER])


@pytest.fixture(scope="module", autouse=True)
def _second_alias(django_db_setup):
    """Add the alias ``OTHER``: the test database again, through a connection of its own."""
    with second_alias(OTHER):
        yield


def test_a_store_without_using_takes_the_database_setting_s_alias():
    with override_settings(DURABLE_JOBS={"DATABASE": OTHER}):
        store = DurableJobStore()
        assert store.using == OTHER
        with (
            CaptureQueriesContext(connections["default"]) as on_default,
            CaptureQueriesContext(connections[OTHER]) as on_other,
        ):
            job = store.defer("tests.noop", submission(key="k"))
            assert store.get(job.pk).pk == job.pk
        assert on_default.captured_queries == []
        assert on_other.captured_queries
    assert Job.objects.get().pk == job.pk  # the same test database, through the other alias


def test_without_the_setting_the_alias_is_default_and_using_still_wins():
    assert DurableJobStore().using == "default"
    with override_settings(DURABLE_JOBS={"DATABASE": OTHER}):
        assert DurableJobStore(using="default").using == "default"


def test_a_database_setting_naming_no_alias_is_refused_when_the_store_is_built():
    with override_settings(DURABLE_JOBS={"DATABASE": "nowhere"}):
        with pytest.raises(InputInvalid, match="nowhere"):
            DurableJobStore()
