"""Pause and resume through the store: rows kept as evidence, refusals writing nothing."""

from __future__ import annotations

import pytest

from django_durable_jobs.models import Job, JobPause
from django_durable_jobs.rules.errors import InputInvalid, ScopeMismatch
from django_durable_jobs.store import DurableJobStore, PauseNotFound
from tests.flow.pause_support import pause_state
from tests.support import submission

pytestmark = pytest.mark.django_db(transaction=True)


def refused(error, call):
    before = pause_state()
    with pytest.raises(error) as caught:
        call()
    assert caught.value.code == "E_JOB_INPUT_INVALID" or error is ScopeMismatch
    assert pause_state() == before
    return caught.value


def test_pause_holds_pending_work_back_from_the_claim_and_resume_releases_it():
    store = DurableJobStore(actor="ops")
    held = store.defer("tests.noop", submission({"n": 1}), queue="mail")
    free = store.defer("tests.noop", submission({"n": 2}), queue="other")
    change = store.pause("queue", "mail", reason="provider down")
    assert change.changed and change.pause.active is True
    assert (change.pause.paused_by, change.pause.reason, change.pause.scope) == (
        "ops",
        "provider down",
        "",
    )
    claimed = store.claim_next(limit=10)
    assert [lease.job_id for lease in claimed] == [free.pk]
    assert list(Job.objects.paused().values_list("pk", flat=True)) == [held.pk]

    resumed = store.resume("queue", "mail", by="alice")
    assert resumed.changed
    row = JobPause.objects.get(pk=change.pause.pk)  # kept, as evidence
    assert (row.active, row.resumed_by) == (None, "alice")
    assert row.resumed_at is not None
    assert [lease.job_id for lease in store.claim_next(limit=10)] == [held.pk]


def test_a_second_pause_returns_the_one_in_force_and_a_new_one_follows_a_resume():
    store = DurableJobStore(actor="ops")
    first = store.pause("operation", "tests.noop", reason="first")
    again = store.pause("operation", "tests.noop", reason="second", by="bob")
    assert (again.changed, again.pause.pk, again.pause.reason) == (False, first.pause.pk, "first")
    store.resume(pause_id=first.pause.pk)
    assert store.resume(pause_id=first.pause.pk).changed is False  # already ended: unchanged
    later = store.pause("operation", "tests.noop", reason="again")
    assert later.changed and later.pause.pk != first.pause.pk
    assert JobPause.objects.count() == 2  # both kept
    assert [p.pk for p in store.pauses()] == [later.pause.pk]
    assert [p.pk for p in store.pauses(active=None)] == [later.pause.pk, first.pause.pk]


def test_a_pause_in_one_scope_holds_only_that_scope():
    store = DurableJobStore()
    a = store.defer("tests.noop", submission({"n": 1}, scope="acme"))
    b = store.defer("tests.noop", submission({"n": 2}, scope="globex"))
    store.pause("operation", "tests.noop", scope="acme")
    assert list(Job.objects.paused().values_list("pk", flat=True)) == [a.pk]
    assert list(Job.objects.unpaused().values_list("pk", flat=True)) == [b.pk]


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        (("queues", "mail"), {}),
        (("queue", ""), {}),
        (("queue", "   "), {}),
        (("operation", "no spaces allowed"), {}),
        (("queue", "mail"), {"reason": 12}),
        (("queue", "mail"), {"reason": "x" * 2001}),
        (("queue", "mail"), {"reason": "nul\x00"}),
        (("queue", "mail"), {"scope": "bad\x07scope"}),
        (("queue", "mail\x00"), {}),
    ],
)
def test_bad_pauses_are_refused_and_write_nothing(args, kwargs):
    refused(InputInvalid, lambda: DurableJobStore().pause(*args, **kwargs))


def test_resume_of_nothing_paused_is_refused_and_writes_nothing():
    store = DurableJobStore()
    store.pause("queue", "mail", scope="acme")
    error = refused(PauseNotFound, lambda: store.resume("queue", "mail"))  # every scope: none
    assert "No pause in force holds queue 'mail' in every scope" in error.message
    refused(PauseNotFound, lambda: store.resume(pause_id=999999))
    refused(InputInvalid, lambda: store.resume(pause_id="seven"))


def test_a_scoped_store_pauses_only_its_own_scope():
    scoped = DurableJobStore(scope="acme")
    change = scoped.pause("queue", "mail")
    assert change.pause.scope == "acme"
    refused(ScopeMismatch, lambda: scoped.pause("queue", "mail", scope="globex"))
    refused(ScopeMismatch, lambda: scoped.pause("queue", "mail", scope=""))
    everywhere = DurableJobStore().pause("queue", "sms")
    refused(ScopeMismatch, lambda: scoped.resume(pause_id=everywhere.pause.pk))
    assert {p.pk for p in scoped.pauses()} == {change.pause.pk, everywhere.pause.pk}
    assert {p.pk for p in DurableJobStore(scope="globex").pauses()} == {everywhere.pause.pk}


def test_pause_inside_a_callers_transaction_is_refused():
    from django.db import transaction

    from django_durable_jobs.rules.errors import TransactionOwned

    with transaction.atomic(), pytest.raises(TransactionOwned):
        DurableJobStore().pause("queue", "mail")
    assert not JobPause.objects.exists()
