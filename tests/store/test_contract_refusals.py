"""Refusals the contract names, on every database, each proven to write nothing.

- ``max_running`` that is not a positive whole number (0, negative, a bool, a float, text) is
  bad input (``InputInvalid``), not a full capacity (``CapacityReached``): for ``insert``,
  ``claim``, ``claim_next``, ``claim_batch``, ``retry_atomically`` and ``@operation``, whether or
  not any row would have been claimed.
- ``request_cancel`` / ``request_cancel_result`` given an execution of another scope than the
  store's (or, for an unscoped store, than the job's) is ``ScopeMismatch``.
"""

from __future__ import annotations

import uuid

import pytest

from django_durable_jobs import operation
from django_durable_jobs.rules.errors import CapacityReached, InputInvalid, ScopeMismatch
from django_durable_jobs.rules.execution import Execution, Identity
from django_durable_jobs.rules.registry import get as registered
from django_durable_jobs.rules.vocabulary import JobStatus
from django_durable_jobs.store import DurableJobStore
from tests.support import LEASE, assert_refused, execution_for, submission

pytestmark = pytest.mark.django_db(transaction=True)

OP = "refusals.op"
BAD_MAX_RUNNING = [0, -1, -(2**70), True, False, 1.0, 2.5, "2", [1]]
INVALID = "E_JOB_INPUT_INVALID"
MISMATCH = "E_JOB_SCOPE_MISMATCH"


def _failed(store: DurableJobStore):
    job = store.defer(OP, submission(key=f"f-{uuid.uuid4()}"))
    store.fail(store.claim(job.pk), "boom")
    return store.get(job.pk)


# -- max_running ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", BAD_MAX_RUNNING, ids=repr)
def test_insert_refuses_a_max_running_that_is_not_positive(store, bad):
    store.defer(OP, submission(key="waiting"))
    error = assert_refused(
        InputInvalid, INVALID, lambda: store.insert(OP, submission=submission(), max_running=bad)
    )
    assert "max_running" in error.message and not isinstance(error, CapacityReached)


@pytest.mark.parametrize("bad", BAD_MAX_RUNNING, ids=repr)
def test_claim_refuses_a_max_running_that_is_not_positive(store, bad):
    job = store.defer(OP, submission())
    assert_refused(InputInvalid, INVALID, lambda: store.claim(job.pk, max_running=bad))
    # bad input is refused before the job is even looked at
    assert_refused(InputInvalid, INVALID, lambda: store.claim(uuid.uuid4(), max_running=bad))


@pytest.mark.parametrize("bad", BAD_MAX_RUNNING, ids=repr)
@pytest.mark.parametrize("method", ["claim_next", "claim_batch"])
def test_claim_next_refuses_a_max_running_that_is_not_positive(store, bad, method):
    claim = getattr(store, method)
    # with nothing to claim, and with work waiting
    assert_refused(InputInvalid, INVALID, lambda: claim(max_running=bad))
    store.defer(OP, submission())
    assert_refused(InputInvalid, INVALID, lambda: claim(max_running=bad, limit=5))
    assert_refused(InputInvalid, INVALID, lambda: claim(operations=[OP], max_running=bad))


@pytest.mark.parametrize("bad", BAD_MAX_RUNNING, ids=repr)
def test_retry_atomically_refuses_a_max_running_that_is_not_positive(store, bad):
    job = _failed(store)
    execution = execution_for(store, job)
    assert_refused(
        InputInvalid,
        INVALID,
        lambda: store.retry_atomically(job.pk, execution, max_running=bad),
    )
    assert store.get(job.pk).status == JobStatus.FAILED


@pytest.mark.parametrize("bad", BAD_MAX_RUNNING, ids=repr)
def test_operation_registration_refuses_a_max_running_that_is_not_positive(bad):
    name = f"refusals.registered-{uuid.uuid4().hex[:8]}"
    with pytest.raises(InputInvalid) as caught:
        operation(name, max_running=bad)(lambda ctx, payload: None)
    assert caught.value.code == INVALID
    assert registered(name) is None


def test_a_positive_max_running_is_still_a_capacity(store, rival):
    """The limit itself is unchanged: full is ``CapacityReached``, retryable later."""
    first, second = (store.defer(OP, submission(key=k)) for k in ("a", "b"))
    store.claim(first.pk, max_running=1)
    assert_refused(
        CapacityReached, "E_JOB_CAPACITY_REACHED", lambda: rival.claim(second.pk, max_running=1)
    )
    assert rival.claim_next(max_running=1) == []
    assert rival.claim(second.pk, max_running=2).epoch == 1


# -- request_cancel with an execution of another scope --------------------------------------------


def _execution(scope: str | None, job, actor: str = "canceller") -> Execution:
    return Execution.start(Identity(scope, actor, job.operation, job.idempotency_key), budget=5.0)


@pytest.fixture
def red(clock) -> DurableJobStore:
    return DurableJobStore(scope="red", actor="red-worker", lease_seconds=LEASE, clock=clock)


@pytest.mark.parametrize("method", ["request_cancel", "request_cancel_result"])
@pytest.mark.parametrize("state", ["pending", "running"])
def test_scoped_store_refuses_a_cancel_by_an_execution_of_another_scope(red, method, state):
    job = red.defer(OP, submission())
    if state == "running":
        red.claim(job.pk)
    ask = getattr(red, method)
    for scope in ("blue", None):
        error = assert_refused(
            ScopeMismatch, MISMATCH, lambda s=scope: ask(job.pk, execution=_execution(s, job))
        )
        assert "red" in error.message
    # also for a job id that does not exist: the execution is refused before any lookup
    assert_refused(
        ScopeMismatch,
        MISMATCH,
        lambda: ask(uuid.uuid4(), execution=_execution("blue", job)),
    )
    assert ask(job.pk, execution=_execution("red", job))  # its own scope is obeyed
    row = red.get(job.pk)
    assert row.cancellation_requested_at is not None


@pytest.mark.parametrize("method", ["request_cancel", "request_cancel_result"])
@pytest.mark.parametrize("state", ["pending", "running"])
def test_unscoped_store_refuses_a_cancel_by_an_execution_of_another_scope_than_the_jobs(
    store, red, method, state
):
    job = red.defer(OP, submission())
    if state == "running":
        red.claim(job.pk)
    ask = getattr(store, method)  # the operator's store sees every scope
    for scope in ("blue", None):
        error = assert_refused(
            ScopeMismatch, MISMATCH, lambda s=scope: ask(job.pk, execution=_execution(s, job))
        )
        assert str(job.pk) in error.message
    assert ask(job.pk, execution=_execution("red", job))
    assert store.get(job.pk).cancellation_requested_at is not None


def test_cancel_with_an_execution_of_the_wrong_type_is_invalid(red):
    job = red.defer(OP, submission())
    assert_refused(InputInvalid, INVALID, lambda: red.request_cancel(job.pk, execution="red"))


def test_unscoped_store_answers_missing_jobs_the_same_with_any_execution(store, red):
    job = red.defer(OP, submission())
    missing = uuid.uuid4()
    result = store.request_cancel_result(missing, execution=_execution("blue", job))
    assert result.job is None and not result.accepted
