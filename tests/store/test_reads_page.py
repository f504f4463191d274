"""store.page(): keyset pages across operations, filtered by status or ownership, signed cursors."""

from __future__ import annotations

import pytest

from django_durable_jobs.rules.errors import InputInvalid, ScopeMismatch
from django_durable_jobs.store import DurableJobStore
from tests.support import assert_refused, submission

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def jobs(clock):
    """Five pending jobs over two operations in scope red, one in scope blue, one running."""
    red = DurableJobStore(scope="red", actor="w", lease_seconds=30, clock=clock)
    made = []
    for n in range(5):
        clock.advance(1)
        made.append(red.defer("op.a" if n % 2 else "op.b", submission({"n": n}, key=f"k{n}")))
    DurableJobStore(scope="blue", clock=clock).defer("op.a", submission(key="blue"))
    red.claim(made[0].pk)
    return red, made


def all_pages(store, **filters):
    seen, cursor = [], None
    while True:
        page = store.page(limit=2, after=cursor, **filters)
        seen += [job.pk for job in page.candidates]
        cursor = page.next_cursor
        assert page.has_more == (cursor is not None)
        if cursor is None:
            return seen


def test_pages_cover_the_scope_oldest_first_across_operations(jobs):
    red, made = jobs
    assert all_pages(red) == [job.pk for job in made]


def test_filters_by_operation_status_and_ownership(jobs):
    red, made = jobs
    assert all_pages(red, operation="op.a") == [made[1].pk, made[3].pk]
    assert all_pages(red, status="running") == [made[0].pk]
    assert all_pages(red, ownership="unclaimed") == [job.pk for job in made[1:]]
    assert all_pages(red, ownership="current") == [made[0].pk]


def test_a_cursor_is_bound_to_scope_and_filters(jobs, clock):
    red, _ = jobs
    cursor = red.page(limit=2).next_cursor
    blue = DurableJobStore(scope="blue", clock=clock)
    assert_refused(ScopeMismatch, "E_JOB_SCOPE_MISMATCH", lambda: blue.page(limit=2, after=cursor))
    assert_refused(
        ScopeMismatch,
        "E_JOB_SCOPE_MISMATCH",
        lambda: red.page(limit=2, status="pending", after=cursor),
    )
    assert_refused(
        ScopeMismatch, "E_JOB_SCOPE_MISMATCH", lambda: red.page(limit=2, after=cursor[:-1] + "x")
    )


@pytest.mark.parametrize(
    "filters",
    [{"limit": 0}, {"limit": 101}, {"status": "stuck"}, {"ownership": "mine"}, {"operation": ""}],
)
def test_bad_filters_are_refused(jobs, filters):
    red, _ = jobs
    assert_refused(InputInvalid, "E_JOB_INPUT_INVALID", lambda: red.page(**filters))
