"""Every JSON the store accepts nests at most 64 levels, the same on every database.

Proves, through each way in (``defer``, ``defer_many``, ``insert``, ``checkpoint``, ``complete``,
``complete_atomically``'s receipt, ``submit`` and ``submit_many``): 64 levels are stored, 65 are
refused as ``InputInvalid`` with nothing written, and a value nested a million levels deep (text
or Python) is refused the same way, never a ``RecursionError``. Every path that writes a proposal
marks it checked (``proposal_checked``). Rows written outside the app with JSON 10,000 levels deep
are read (``get``, ``list``, ``page``) without a crash and diagnosed; a row whose checked proposal
was rewritten outside the app is claimed like any other and its attempt fails on it, saying why.
"""

from __future__ import annotations

import pytest

from django_durable_jobs import submit, submit_many
from django_durable_jobs.models import Job
from django_durable_jobs.rules.errors import InputInvalid
from django_durable_jobs.rules.values import Claimed
from django_durable_jobs.store import Submission
from django_durable_jobs.worker.attempt import context_of
from tests.deep_json import nested_text, nested_value, outside_row
from tests.support import T0, assert_refused, db_state, execution_for, submission

pytestmark = pytest.mark.django_db(transaction=True)

OP = "tests.noop"  # registered, so submit() takes it
INVALID = "E_JOB_INPUT_INVALID"
DEPTHS = [(64, False), (65, True), (100_000, True)]
DEPTH_IDS = ["64-stored", "65-refused", "100000-refused"]


def text_submission(text: str, key: str = "k") -> Submission:
    return Submission(scope=None, idempotency_key=key, proposal=text)


def refused_deep(call, depth: int) -> None:
    error = assert_refused(InputInvalid, INVALID, call)
    assert "nested" in error.message and "64" in error.message, error.message
    assert f"{depth:,}" in error.message or "more than 64" in error.message, error.message


# -- the ways in ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("depth", "refused"), DEPTHS, ids=DEPTH_IDS)
def test_defer(store, depth, refused):
    text = nested_text(depth)
    if refused:
        refused_deep(lambda: store.defer(OP, text_submission(text)), depth)
        return
    job = store.defer(OP, text_submission(text))
    stored = Job.objects.get(pk=job.pk)
    assert (stored.proposal, stored.proposal_checked, stored.ownership) == (text, True, "unclaimed")


@pytest.mark.parametrize(("depth", "refused"), DEPTHS, ids=DEPTH_IDS)
def test_insert(store, depth, refused):
    text = nested_text(depth)
    if refused:
        refused_deep(lambda: store.insert(OP, submission=text_submission(text)), depth)
        return
    lease = store.insert(OP, submission=text_submission(text))
    stored = Job.objects.get(pk=lease.job_id)
    assert (stored.proposal, stored.proposal_checked, stored.status) == (text, True, "running")


@pytest.mark.parametrize(("depth", "refused"), DEPTHS, ids=DEPTH_IDS)
def test_checkpoint(store, depth, refused):
    lease = store.claim(store.defer(OP, submission(key="cp")).pk)
    text = nested_text(depth)
    if refused:
        refused_deep(lambda: store.checkpoint(lease, text), depth)
        return
    store.checkpoint(lease, text)
    assert Job.objects.get(pk=lease.job_id).checkpoint == text


@pytest.mark.parametrize(("depth", "refused"), DEPTHS, ids=DEPTH_IDS)
def test_complete_with_a_python_value(store, depth, refused):
    lease = store.claim(store.defer(OP, submission(key="done")).pk)
    value = {"rows": nested_value(depth - 1)}
    if refused:
        error = assert_refused(InputInvalid, INVALID, lambda: store.complete(lease, value))
        assert "nested" in error.message and "64" in error.message
        return
    store.complete(lease, value)
    stored = Job.objects.get(pk=lease.job_id)
    assert stored.status == "complete"
    assert stored.result == '{"rows":' + nested_text(depth - 1) + "}"


@pytest.mark.parametrize(("depth", "refused"), DEPTHS, ids=DEPTH_IDS)
def test_the_receipt_of_complete_atomically(store, depth, refused):
    job = store.defer(OP, submission(key="atomic"))
    lease = store.claim(job.pk)
    execution = execution_for(store, Job.objects.get(pk=job.pk), lease)
    receipt = nested_text(depth)
    if refused:
        refused_deep(lambda: store.complete_atomically(execution, lambda e: receipt), depth)
        assert Job.objects.get(pk=job.pk).status == "running"
        return
    assert store.complete_atomically(execution, lambda e: receipt) == receipt


def test_defer_many_refuses_the_whole_call_for_one_deep_proposal(store):
    items = [text_submission(nested_text(64), key=f"k{n}") for n in range(3)]
    items[1] = text_submission(nested_text(65), key="k1")
    error = assert_refused(InputInvalid, INVALID, lambda: store.defer_many(OP, items))
    assert error.message.startswith("Submission 1 (key 'k1'): The proposal is too deeply nested")
    assert "Nothing from this call was written" in error.message


@pytest.mark.parametrize(("depth", "refused"), DEPTHS, ids=DEPTH_IDS)
def test_submit(depth, refused):
    payload = {"data": nested_value(depth - 1)}
    if refused:
        error = assert_refused(InputInvalid, INVALID, lambda: submit(OP, payload))
        assert "nested" in error.message and "64" in error.message
        return
    job = submit(OP, payload)
    assert Job.objects.get(pk=job.pk).proposal == '{"data":' + nested_text(depth - 1) + "}"


@pytest.mark.parametrize(("depth", "refused"), DEPTHS, ids=DEPTH_IDS)
def test_submit_many(depth, refused):
    payloads = [{"n": n} for n in range(4)]
    payloads[2] = nested_value(depth)
    if refused:
        error = assert_refused(InputInvalid, INVALID, lambda: submit_many(OP, payloads))
        assert error.message.startswith("Payload 2: ")
        return
    jobs = submit_many(OP, payloads)
    assert Job.objects.get(pk=jobs[2].pk).proposal == nested_text(depth)


def test_every_way_in_marks_the_proposal_checked(store):
    store.defer(OP, submission(key="one"))
    store.insert(OP, submission=submission(key="inserted"))
    store.defer_many(OP, [submission({"n": n}, key=f"many-{n}") for n in range(5)])  # unnest
    store.defer_many(OP, [submission({"n": n}, key=f"two-{n}") for n in range(2)])
    submit(OP, {"n": 1})
    submit_many(OP, [{"n": n} for n in range(3)])
    assert Job.objects.count() == 13
    assert set(Job.objects.values_list("proposal_checked", flat=True)) == {True}


# -- reading rows written outside the app -----------------------------------------------------------


@pytest.fixture
def deep_rows(store):
    """Rows 10,000 levels deep in every payload, as an import or a hand-made fix writes them."""
    deep = nested_text(10_000)
    rows = [
        outside_row(deep, key="pending-unchecked", now=T0),
        outside_row(deep, key="pending-checked", checked=True, now=T0),
        outside_row(
            "{}", key="done", status="complete", checked=True, now=T0, checkpoint=deep, result=deep
        ),
    ]
    Job.objects.bulk_create(rows)
    return {row.idempotency_key: row.pk for row in rows}


def test_deep_rows_written_outside_the_app_are_read_and_diagnosed(store, deep_rows):
    for job in [store.get(pk) for pk in deep_rows.values()] + store.list():
        assert job.ownership in ("legacy-unknown", "unclaimed", "terminal")
        job.diagnostic_error  # noqa: B018 - reading it must not raise
    unchecked = store.get(deep_rows["pending-unchecked"])
    assert unchecked.ownership == "legacy-unknown"
    assert "not written by this app" in unchecked.diagnostic_error
    done = store.get(deep_rows["done"])
    assert done.diagnostic_error == (
        "The stored result is nested 10,000 levels deep, deeper than the 64 this app reads; see "
        "its stored text."
    )
    assert len(store.page(limit=10).candidates) == 3


def test_a_checked_proposal_rewritten_outside_the_app_fails_its_attempt(store, deep_rows):
    # The flag vouches for the JSON, so SQL and Python both call the row unclaimed and a claim
    # takes it; the worker cannot read the text and its attempt fails, saying why.
    pk = deep_rows["pending-checked"]
    assert store.get(pk).ownership == "unclaimed"
    assert "changed outside the app" in store.get(pk).diagnostic_error
    before = db_state()
    (lease,) = store.claim_next(limit=1, resume_expired=[])
    assert lease.job_id == pk and db_state() != before
    with pytest.raises(InputInvalid) as caught:
        context_of(store, Claimed(lease, Job.objects.get(pk=pk)), cancel_event=None)
    assert f"Job {pk}'s stored proposal is not JSON this app accepts" in caught.value.message
    assert "changed outside the app" in caught.value.message
