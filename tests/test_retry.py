"""Automatic retries: the pure backoff policy, and failed jobs coming back when it is due."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_durable_jobs.models import Job, JobAttempt
from django_durable_jobs.rules import registry
from django_durable_jobs.rules.errors import InputInvalid
from django_durable_jobs.rules.retry import RetryPolicy
from django_durable_jobs.store import DurableJobStore
from tests.support import submission

OP = "retrying.op"


# -- the policy, without a database --------------------------------------------------------------


def test_delay_doubles_per_attempt_and_is_capped():
    policy = RetryPolicy(max_attempts=10, base_delay=2, max_delay=20, jitter=0)
    assert [policy.delay(n) for n in range(1, 6)] == [2, 4, 8, 16, 20]


@given(
    attempts=st.integers(min_value=1, max_value=60),
    rand=st.floats(min_value=0, max_value=1),
    jitter=st.floats(min_value=0, max_value=1),
)
def test_jitter_stays_within_its_fraction_of_the_backoff(attempts, rand, jitter):
    policy = RetryPolicy(max_attempts=100, base_delay=1.5, max_delay=600, jitter=jitter)
    plain = min(600, 1.5 * 2 ** (attempts - 1))
    delay = policy.delay(attempts, rand=lambda: rand)
    assert plain * (1 - jitter) - 1e-9 <= delay <= plain * (1 + jitter) + 1e-9


def test_allows_another_attempt_until_max_attempts():
    policy = RetryPolicy(max_attempts=3)
    assert [policy.allows_another(n) for n in (1, 2, 3, 4)] == [True, True, False, False]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"max_attempts": True},
        {"max_attempts": 2.5},
        {"base_delay": -1},
        {"max_delay": float("nan")},
        {"jitter": 1.5},
    ],
)
def test_invalid_policies_are_refused(kwargs):
    with pytest.raises(InputInvalid) as refused:
        RetryPolicy(**kwargs)
    assert refused.value.code == "E_JOB_INPUT_INVALID"


def test_operation_retry_accepts_a_policy_or_an_attempt_count():
    assert RetryPolicy.of(4) == RetryPolicy(max_attempts=4)
    assert RetryPolicy.of(None) is None
    with pytest.raises(InputInvalid):
        RetryPolicy.of("three")


def test_max_attempts_counts_every_attempt_and_retry_int_means_the_same():
    assert RetryPolicy.from_options(3, None) == RetryPolicy(max_attempts=3)
    assert RetryPolicy.from_options(None, 3) == RetryPolicy(max_attempts=3)  # the older spelling
    policy = RetryPolicy(max_attempts=5, base_delay=2)
    assert RetryPolicy.from_options(None, policy) is policy
    assert RetryPolicy.from_options(None, None) is None


@pytest.mark.parametrize(
    ("max_attempts", "retry", "words"),
    [
        (3, 3, "not both"),
        (3, RetryPolicy(max_attempts=3), "not both"),
        (0, None, "at least 1"),
        ("3", None, "attempts in all"),
        (True, None, "attempts in all"),
    ],
)
def test_operation_refuses_both_spellings_at_once_or_a_bad_count(max_attempts, retry, words):
    with pytest.raises(InputInvalid) as refused:
        registry.operation("retrying.both", max_attempts=max_attempts, retry=retry)(
            lambda ctx, payload: None
        )
    assert refused.value.code == "E_JOB_INPUT_INVALID"
    assert words in refused.value.message
    assert registry.get("retrying.both") is None


@pytest.mark.parametrize("spelling", [{"max_attempts": 3}, {"retry": 3}])
def test_both_spellings_register_three_attempts_in_all(spelling):
    registry.operation("retrying.spelled", **spelling)(lambda ctx, payload: None)
    try:
        policy = registry.get("retrying.spelled").retry
        assert policy == RetryPolicy(max_attempts=3)
        assert [policy.allows_another(n) for n in (1, 2, 3)] == [True, True, False]
    finally:
        registry.unregister("retrying.spelled")


# -- failed jobs come back when the backoff is over ------------------------------------------------


@pytest.fixture
def retrying_operation():
    policy = RetryPolicy(max_attempts=2, base_delay=10, max_delay=10, jitter=0)
    registry.operation(OP, retry=policy)(lambda ctx, payload: None)
    yield policy
    registry.unregister(OP)


@pytest.mark.django_db(transaction=True)
def test_a_failed_job_is_retried_after_its_backoff_and_not_past_max_attempts(
    clock, retrying_operation
):
    store = DurableJobStore(actor="w", lease_seconds=30, clock=clock)
    job = store.defer(OP, submission(key="flaky"))
    [lease] = store.claim_next(operations=[OP])
    store.fail(lease, "upstream 503")

    row = Job.objects.get(pk=job.pk)
    assert row.status == "failed"
    assert row.retry_requested_at == clock.now
    assert row.run_after == clock.now + timedelta(seconds=10)
    assert store.claim_next(operations=[OP]) == []  # not due yet

    clock.advance(10)
    [second] = store.claim_next(operations=[OP])
    assert second.epoch == 2
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempts, row.error, row.retry_requested_at) == (
        "running",
        2,
        None,
        None,
    )

    store.fail(second, "upstream 503 again")
    clock.advance(3600)
    assert store.claim_next(operations=[OP]) == []  # max_attempts reached: failed for good
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.retry_requested_at) == ("failed", None)
    outcomes = list(JobAttempt.objects.filter(job=job.pk).values_list("outcome", flat=True))
    assert outcomes == ["failed", "failed"]


@pytest.mark.django_db(transaction=True)
def test_a_person_asking_for_a_retry_does_not_wait_out_the_backoff(clock, retrying_operation):
    store = DurableJobStore(actor="w", lease_seconds=30, clock=clock)
    job = store.defer(OP, submission(key="flaky"))
    [lease] = store.claim_next(operations=[OP])
    store.fail(lease, "upstream 503")
    assert store.claim_next(operations=[OP]) == []

    assert store.request_retry(job.pk) is True
    [again] = store.claim_next(operations=[OP])
    assert again.epoch == 2


@pytest.mark.django_db(transaction=True)
def test_an_operation_without_a_policy_stays_failed(clock):
    store = DurableJobStore(actor="w", lease_seconds=30, clock=clock)
    job = store.defer("no.policy", submission(key="once"))
    [lease] = store.claim_next(operations=["no.policy"])
    store.fail(lease, "boom")
    clock.advance(86_400)
    assert store.claim_next(operations=["no.policy"]) == []
    assert Job.objects.get(pk=job.pk).retry_requested_at is None
