"""Bad input to the store is refused clearly and writes nothing, on every database.

Proves that non-JSON proposals and checkpoints, coroutines where JSON text is expected, non-finite
progress, payloads over the UTF-8 byte cap, empty or over-long names, malformed job ids, unknown
status filters, bad limits and counters at their maximum are each refused with the documented
``JobError`` code, and that the database is exactly as it was before the call. Values at the
documented limits are accepted and stored exactly.
"""

from __future__ import annotations

import dataclasses
import inspect
import uuid
from datetime import datetime, timedelta

import pytest
from django.test import override_settings

from django_durable_jobs.models import Job, JobAttempt
from django_durable_jobs.rules.errors import InputInvalid, JobError
from django_durable_jobs.rules.jsontext import Serialised
from django_durable_jobs.store import (
    AttemptOutcome,
    DurableJobStore,
    Execution,
    Identity,
    PageQuery,
    Submission,
)
from tests.support import LEASE, T0, db_state, execution_for, submission

pytestmark = pytest.mark.django_db(transaction=True)

OP = "bad.op"
INVALID = "E_JOB_INPUT_INVALID"


@pytest.fixture
def lease(store):
    """A live lease, with some other rows around so "nothing written" has something to compare."""
    store.defer(OP, submission(key="bystander"))
    return store.insert(OP, submission=submission({"n": 1}, key="live"))


def refused(call, error: type[JobError] = InputInvalid, code: str = INVALID, *, case=None):
    """Run ``call``, require ``error`` with ``code``, and prove nothing was written.

    ``case`` names the input in failure messages, so one test can try many bad values (each
    database flush between tests is slow on PostgreSQL; a refusal changes nothing anyway).
    """
    before = db_state()
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - anything but the documented refusal is a failure
        caught = exc
    else:
        pytest.fail(f"{case!r} was not refused")
    assert isinstance(caught, error), f"{case!r} raised {caught!r}, not {error.__name__}"
    assert caught.code == code, f"{case!r}: {caught!r}"
    assert caught.message, case  # says what to do instead
    assert db_state() == before, f"refusing {case!r} changed the database"
    return caught


async def _receipt(*args) -> str:
    return '{"ok": true}'


# -- proposals and checkpoints that are not JSON text ------------------------------------------

NOT_JSON_TEXT = ["not json", "{'a': 1}", '{"a": 1', "", "NaN", '{"x": Infinity}', b"{}", {}, None]


def test_a_proposal_that_is_not_json_text_is_refused(store, lease):
    for proposal in NOT_JSON_TEXT:
        sub = Submission(scope=None, idempotency_key="k", proposal=proposal)
        refused(lambda sub=sub: store.insert(OP, submission=sub), case=("insert", proposal))
        refused(lambda sub=sub: store.defer(OP, sub), case=("defer", proposal))


def test_a_payload_that_cannot_be_serialised_is_refused_by_submission_of():
    for payload in (object(), {"x": float("nan")}, [float("inf")], {1j}):
        with pytest.raises(InputInvalid) as caught:
            Submission.of(None, "k", payload)
        assert caught.value.code == INVALID


def test_a_checkpoint_that_is_not_json_text_is_refused(store, lease):
    for value in NOT_JSON_TEXT:
        refused(lambda value=value: store.checkpoint(lease, value), case=value)


def test_a_result_that_is_not_json_serialisable_is_refused(store, lease):
    for value in (float("nan"), float("inf"), {"x": float("-inf")}, object()):
        refused(lambda value=value: store.complete(lease, value), case=value)


def test_a_value_that_is_not_a_lease_is_refused(store, lease):
    refused(lambda: store.heartbeat(lease.job_id), case="a job id")
    refused(lambda: store.complete((lease.job_id, lease.owner_id, lease.epoch)), case="a tuple")


# -- coroutines where JSON text is expected ---------------------------------------------------


def _assert_closed(coroutine) -> None:
    """The refused coroutine was closed, so Python will not warn that it was never awaited."""
    assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED


def test_a_coroutine_returned_as_a_receipt_is_refused_and_the_job_stays_running(store, lease):
    job = Job.objects.get(pk=lease.job_id)
    returned = []

    def mutation(execution):
        returned.append(_receipt())
        return returned[0]

    error = refused(lambda: store.complete_atomically(execution_for(store, job, lease), mutation))
    assert "coroutine" in error.message
    _assert_closed(returned[0])
    after = Job.objects.get(pk=lease.job_id)
    assert (after.status, after.fencing_epoch, after.result) == ("running", 1, None)


def test_a_coroutine_passed_as_result_or_checkpoint_is_refused(store, lease):
    for call in (store.complete, store.checkpoint):
        coroutine = _receipt()
        refused(lambda call=call, coro=coroutine: call(lease, coro), case=call.__name__)
        _assert_closed(coroutine)


def test_a_coroutine_returned_by_retain_outcome_is_refused_and_nothing_is_retried(store, lease):
    store.fail(lease, "boom")
    job = Job.objects.get(pk=lease.job_id)
    returned = []

    def retain(previous_json):
        returned.append(_receipt())
        return returned[0]

    refused(lambda: store.retry_atomically(job.pk, execution_for(store, job), retain))
    _assert_closed(returned[0])
    assert Job.objects.get(pk=job.pk).status == "failed"


def test_a_coroutine_returned_by_bookkeeping_leaves_the_job_pending_finalization(store, lease):
    job = Job.objects.get(pk=lease.job_id)
    returned = []

    def bookkeeping(execution):
        returned.append(_receipt())
        return returned[0]

    before = db_state()
    outcome = store.finalize_atomically(
        execution_for(store, job, lease), AttemptOutcome("failed", "boom"), bookkeeping
    )
    assert outcome.state == "pending-finalization" and outcome.reason.startswith(INVALID)
    _assert_closed(returned[0])
    assert db_state() == before


# -- progress ----------------------------------------------------------------------------------


def test_progress_that_is_not_a_finite_number_is_refused(store, lease):
    for percent in (float("nan"), float("inf"), float("-inf"), "50", None, True):
        refused(lambda percent=percent: store.progress(lease, percent), case=percent)


# -- payload caps, counted in UTF-8 bytes ------------------------------------------------------

CAP = 64
# 32 characters but 2 + 30 * 3 = 92 UTF-8 bytes: under the cap by characters, over it by bytes.
MULTI_BYTE = '"' + "€" * 30 + '"'


def test_a_serialised_payload_is_checked_for_size_and_surrogates_and_stored_as_plain_text(
    store, lease
):
    # Submission.of marks the text it wrote (strict JSON, depth checked) so that the store does
    # not parse it again; what is left to check still is, and a text put in its place is parsed.
    over = Submission.of(None, "big", "€" * 30)
    assert type(over.proposal) is Serialised
    surrogate = Submission.of(None, "lone", {"s": "\ud800"})
    replaced = dataclasses.replace(Submission.of(None, "swap", {"n": 1}), proposal="{not json")
    assert type(replaced.proposal) is str
    with override_settings(DURABLE_JOBS={"MAX_PAYLOAD_BYTES": CAP}):
        error = refused(lambda: store.defer(OP, over), case="over the cap")
        assert f"{CAP}-byte cap" in error.message
    error = refused(lambda: store.defer(OP, surrogate), case="a lone surrogate")
    assert "lone surrogate" in error.message
    refused(lambda: store.defer(OP, replaced), case="replaced with text that is not JSON")
    job = store.defer(OP, Submission.of(None, "fine", {"b": [1, 2], "a": "€"}))
    assert job.proposal == '{"a":"€","b":[1,2]}' and type(job.proposal) is str
    assert type(Job.objects.get(pk=job.pk).proposal) is str


def test_the_oversized_sample_is_under_the_cap_in_characters_but_over_it_in_bytes():
    assert len(MULTI_BYTE) < CAP < len(MULTI_BYTE.encode("utf-8"))


def test_a_payload_over_the_byte_cap_is_refused(store, lease):
    calls = {
        "insert": lambda: store.insert(OP, submission=Submission(None, "big", MULTI_BYTE)),
        "defer": lambda: store.defer(OP, Submission(None, "big", MULTI_BYTE)),
        "checkpoint": lambda: store.checkpoint(lease, MULTI_BYTE),
        "result": lambda: store.complete(lease, "€" * 30),
        "error message": lambda: store.fail(lease, "€" * 30),
    }
    with override_settings(DURABLE_JOBS={"MAX_PAYLOAD_BYTES": CAP}):
        for what, call in calls.items():
            error = refused(call, case=what)
            assert "UTF-8 bytes" in error.message and f"{CAP}-byte cap" in error.message


def test_a_payload_of_exactly_the_cap_in_bytes_is_accepted(store, lease):
    exact = '"' + "€" * 20 + "ab" + '"'  # 2 + 60 + 2 = 64 bytes
    one_over = '"' + "€" * 20 + "abc" + '"'
    with override_settings(DURABLE_JOBS={"MAX_PAYLOAD_BYTES": CAP}):
        refused(lambda: store.checkpoint(lease, one_over))
        store.checkpoint(lease, exact)
        job = store.defer(OP, Submission(None, "exact", exact))
    assert Job.objects.get(pk=lease.job_id).checkpoint == exact
    assert Job.objects.get(pk=job.pk).proposal == exact


# -- names -------------------------------------------------------------------------------------

BAD_OPERATIONS = ["", "o" * 201, "has space", "tab\there", "slash/op", None, 7]
BAD_NAMES = ["", "   ", "n" * 201, "nul\x00byte", "new\nline", None, 7]
BAD_KEYS = ["", "   ", "k" * 256, "bell\x07", 7]


def test_a_bad_operation_name_is_refused_everywhere(store, lease):
    for op in BAD_OPERATIONS:
        refused(lambda op=op: store.insert(op, submission=submission(key="k2")), case=op)
        refused(lambda op=op: store.defer(op, submission(key="k2")), case=op)
        refused(lambda op=op: store.find_submission(op, submission(key="k2")), case=op)
        refused(lambda op=op: store.claim_next(operations=[op], resume_expired=[]), case=op)
        refused(lambda op=op: store.claim_next(resume_expired=[op]), case=op)


def test_a_bad_submission_scope_or_idempotency_key_is_refused(store, lease):
    subs = [submission(key="k2", scope=scope) for scope in BAD_NAMES if scope is not None]
    subs += [submission(key=key) for key in BAD_KEYS]
    for sub in subs:
        refused(lambda sub=sub: store.insert(OP, submission=sub), case=sub)
        refused(lambda sub=sub: store.defer(OP, sub), case=sub)


def test_a_bad_queue_name_is_refused(store, lease):
    for queue in BAD_NAMES:
        if queue is not None:  # None means "the default queue" for defer
            refused(lambda q=queue: store.defer(OP, submission(key="k2"), queue=q), case=queue)
        refused(lambda q=queue: store.claim_next(queues=[q], resume_expired=[]), case=queue)


def test_a_store_with_bad_arguments_is_refused_and_writes_nothing(lease):
    """None means unscoped / anonymous; every other bad value is refused at construction."""
    bad = [{f: n} for f in ("scope", "actor") for n in BAD_NAMES if n is not None]
    bad += [{"lease_seconds": v} for v in (0, -1, float("nan"), float("inf"), "30", True)]
    bad += [{"using": "no-such-database"}]
    for kwargs in bad:
        refused(lambda kwargs=kwargs: DurableJobStore(**kwargs), case=kwargs)


def test_names_at_their_maximum_length_are_stored_exactly(clock):
    """200-character operation, scope and queue; 255-character key; multi-byte where allowed."""
    operation, scope, queue = "o" * 200, "é" * 200, "ü" * 200
    key = "ключ" * 63 + "key"
    scoped = DurableJobStore(scope=scope, actor="å" * 200, clock=clock)
    job = scoped.defer(operation, Submission(None, key, "{}"), queue=queue)
    stored = Job.objects.get(pk=job.pk)
    assert (stored.operation, stored.scope, stored.idempotency_key, stored.queue) == (
        operation,
        scope,
        key,
        queue,
    )
    (claimed,) = scoped.claim_next(operations=[operation], queues=[queue], resume_expired=[])
    assert Job.objects.get(pk=claimed.job_id).claimed_by == "å" * 200


# -- job ids -----------------------------------------------------------------------------------

BAD_IDS = ["not-a-uuid", "", "1234", str(uuid.uuid4())[:-1], 42, None, 3.5, b"\x00" * 16]
READS_AND_REQUESTS = {
    "get": lambda s, j: s.get(j),
    "claim": lambda s, j: s.claim(j),
    "request_cancel": lambda s, j: s.request_cancel(j),
    "request_retry": lambda s, j: s.request_retry(j),
}


def test_a_malformed_job_id_is_refused(store, lease):
    for job_id in BAD_IDS:
        for method, call in READS_AND_REQUESTS.items():
            refused(lambda call=call, j=job_id: call(store, j), case=(method, job_id))


def test_insert_or_defer_with_a_malformed_job_id_is_refused(store, lease):
    """``job_id=None`` means "choose one"; anything else must be a UUID."""
    sub = submission(key="k2")
    for j in BAD_IDS:
        if j is None:
            continue
        refused(lambda j=j: store.insert(OP, submission=sub, job_id=j), case=("insert", j))
        refused(lambda j=j: store.defer(OP, sub, job_id=j), case=("defer", j))


def test_a_job_id_already_in_use_is_refused(store, lease):
    error = refused(lambda: store.defer(OP, submission(key="other"), job_id=lease.job_id))
    assert str(lease.job_id) in error.message


# -- status filters and limits -----------------------------------------------------------------


@pytest.fixture
def reader(clock):
    scoped = DurableJobStore(scope="tenant", actor="reader", clock=clock)
    scoped.defer(OP, submission(key="k"))
    return scoped, Execution.start(Identity("tenant", "reader", OP), budget=5.0)


def test_an_unknown_status_filter_is_refused(store, lease, reader):
    scoped, execution = reader
    for status in ("done", "PENDING", "", " running", 1):
        refused(lambda st=status: store.list(st), case=status)
        refused(
            lambda st=status: scoped.list_page(PageQuery(OP, status=st), execution), case=status
        )


def test_claim_next_with_a_bad_limit_is_refused(store, lease):
    for limit in (0, -1, 1001, True, 1.5, "2", None):
        refused(lambda limit=limit: store.claim_next(limit=limit, resume_expired=[]), case=limit)


def test_list_page_with_a_bad_limit_or_byte_cap_is_refused(reader):
    scoped, execution = reader
    bad = [{"limit": v} for v in (0, 101, True, "5")]
    bad += [{"max_payload_bytes": v} for v in (0, 1_048_577, 1.5)]
    for query in bad:
        refused(lambda q=query: scoped.list_page(PageQuery(OP, **q), execution), case=query)


def test_a_bad_max_running_is_refused(store, lease):
    job = store.defer(OP, submission(key="waiting"))
    sub = submission(key="k2")
    for cap in (-1, True, "1", 1.5):
        refused(lambda cap=cap: store.insert(OP, submission=sub, max_running=cap), case=cap)
        refused(lambda cap=cap: store.claim(job.pk, max_running=cap), case=cap)
        refused(lambda cap=cap: store.claim_next(max_running=cap, resume_expired=[]), case=cap)


def test_defer_with_a_bad_priority_is_refused(store, lease):
    sub = submission(key="k2")
    for priority in (101, -101, True, 1.5, "1", None):
        refused(lambda p=priority: store.defer(OP, sub, priority=p), case=priority)


def test_a_time_that_is_not_an_aware_datetime_is_refused(store, lease):
    for when in (datetime(2026, 1, 1, 12), "2026-01-01T12:00:00Z", 0):
        refused(lambda w=when: store.defer(OP, submission(key="k2"), run_after=w), case=when)
        refused(lambda w=when: store.purge_older_than(w), case=when)


# -- counter overflow --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "counter, maximum", [("fencing_epoch", 2**63 - 1), ("attempts", 2**31 - 1)]
)
def test_claiming_a_job_whose_counter_is_at_its_maximum_is_refused(
    store, lease, rival, clock, counter, maximum
):
    Job.objects.filter(pk=lease.job_id).update(**{counter: maximum})
    assert getattr(Job.objects.get(pk=lease.job_id), counter) == maximum  # the database holds it
    clock.advance(LEASE)
    error = refused(lambda: rival.claim(lease.job_id), case=counter)
    assert "maximum" in error.message
    assert not JobAttempt.objects.exists()  # no "interrupted" attempt was recorded either
    assert Job.objects.get(pk=lease.job_id).lease_expires_at == T0 + timedelta(seconds=LEASE)


def test_claim_next_skips_a_row_at_its_counter_maximum_and_claims_other_work(store, lease, clock):
    """One poisoned row must not wedge every worker: it is left alone, other work is claimed.

    (Interpretation: ``claim`` of that row refuses with InputInvalid, as above; the batch worker
    path cannot raise for it on every poll, or nothing else would ever be claimed.)
    """
    Job.objects.filter(pk=lease.job_id).update(fencing_epoch=2**63 - 1)
    clock.advance(LEASE)
    waiting = store.defer(OP, submission(key="waiting"))
    poisoned = db_state()
    leases = store.claim_next(limit=5, resume_expired=[OP])
    assert {claimed.job_id for claimed in leases} >= {waiting.pk}
    assert lease.job_id not in {claimed.job_id for claimed in leases}
    assert Job.objects.get(pk=lease.job_id).fencing_epoch == 2**63 - 1
    assert db_state() != poisoned  # the other work really was claimed
