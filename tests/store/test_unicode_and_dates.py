"""Input no database can hold is refused as InputInvalid, nothing written (found by the API tests).

A lone surrogate has no UTF-8 form, so it can be neither stored nor hashed; a datetime outside the
years 1000-9998 (UTC) overflows or is stored differently on one database or another.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from django_durable_jobs.rules.errors import InputInvalid
from django_durable_jobs.store import DurableJobStore, Submission
from tests.support import assert_refused, submission

pytestmark = pytest.mark.django_db(transaction=True)
INVALID = "E_JOB_INPUT_INVALID"


@pytest.mark.parametrize(
    "sub",
    [
        Submission(scope=None, idempotency_key="k", proposal='"\ud800"'),
        Submission(scope=None, idempotency_key="k\udfff", proposal="{}"),
        Submission(scope="s\ud800", idempotency_key="k", proposal="{}"),
    ],
    ids=["proposal", "key", "scope"],
)
def test_a_lone_surrogate_is_refused(clock, sub):
    store = DurableJobStore(clock=clock)
    assert_refused(InputInvalid, INVALID, lambda: store.defer("tests.noop", sub))


def test_a_lone_surrogate_in_a_checkpoint_is_refused(clock):
    store = DurableJobStore(clock=clock)
    lease = store.insert("tests.noop", submission=submission(key="cp"))
    assert_refused(InputInvalid, INVALID, lambda: store.checkpoint(lease, '"\udc00"'))


@pytest.mark.parametrize(
    "when",
    [
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))),  # overflows on the way to UTC
        datetime(999, 12, 31, tzinfo=UTC),
        datetime(9999, 1, 1, tzinfo=UTC),
    ],
    ids=["year-1", "year-999", "year-9999"],
)
def test_a_run_after_outside_the_storable_years_is_refused(clock, when):
    store = DurableJobStore(clock=clock)
    sub = Submission(scope=None, idempotency_key="k", proposal="{}")
    assert_refused(InputInvalid, INVALID, lambda: store.defer("tests.noop", sub, run_after=when))


def test_run_after_at_the_edges_of_the_storable_years_is_kept(clock):
    store = DurableJobStore(clock=clock)
    for n, when in enumerate(
        [datetime(1000, 1, 1, tzinfo=UTC), datetime(9998, 12, 31, tzinfo=UTC)]
    ):
        job = store.defer("tests.noop", submission(key=f"edge-{n}"), run_after=when)
        assert store.get(job.pk).run_after == when
