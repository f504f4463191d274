"""Executions, identities, write-fence binding and the error codes, tested without a database.

Proves that an :class:`Execution` measures its budget on the monotonic clock (the earlier of budget
and deadline wins), that cancellation, closing and resource limits stop it with the documented
``E_OPERATION_*`` codes, that ``bind_write_fence`` shares budget and cancellation with the execution
it binds, and that every error class carries the code SPEC §3 documents.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import FrozenInstanceError

import pytest

from django_durable_jobs.rules import errors
from django_durable_jobs.rules.errors import ExecutionStopped, InputInvalid, JobCancelled, JobError
from django_durable_jobs.rules.execution import Execution, Identity, WriteFence, bind_write_fence
from django_durable_jobs.rules.values import Lease
from django_durable_jobs.rules.vocabulary import proposal_sha256
from tests.support import T0

IDENTITY = Identity(scope="s1", actor="worker", operation="reports.rebuild", idempotency_key="k1")
HASH = proposal_sha256('{"n":1}')


def _lease(epoch: int = 3) -> Lease:
    return Lease(job_id=uuid.uuid4(), owner_id="owner-1", epoch=epoch, expires_at=T0)


def _stopped_code(execution: Execution) -> str:
    with pytest.raises(ExecutionStopped) as excinfo:
        execution.assert_active()
    return excinfo.value.code


def _wait_for_monotonic_tick() -> None:
    start = time.monotonic()
    while time.monotonic() == start:
        pass


# -- identity ------------------------------------------------------------------------------------


def test_identity_is_frozen_and_the_key_is_optional():
    identity = Identity("s1", "worker", "reports.rebuild")
    assert identity.idempotency_key is None
    with pytest.raises(FrozenInstanceError):
        identity.scope = "s2"


def test_start_refuses_anything_but_an_identity():
    with pytest.raises(InputInvalid) as excinfo:
        Execution.start(("s1", "worker", "reports.rebuild", None))
    assert excinfo.value.code == "E_JOB_INPUT_INVALID"


@pytest.mark.parametrize("budget", [-0.001, float("nan"), True, "2", None])
def test_start_refuses_a_bad_budget(budget):
    with pytest.raises(InputInvalid) as excinfo:
        Execution.start(IDENTITY, budget=budget)
    assert excinfo.value.code == "E_JOB_INPUT_INVALID"


@pytest.mark.parametrize("limits", [{"max_bytes": -1}, {"max_items": -1}, {"max_items": 1.5}])
def test_start_refuses_negative_or_fractional_resource_limits(limits):
    with pytest.raises(InputInvalid) as excinfo:
        Execution.start(IDENTITY, **limits)
    assert excinfo.value.code == "E_JOB_INPUT_INVALID"


# -- budget and deadline -------------------------------------------------------------------------


def test_remaining_starts_at_most_the_budget_and_decreases():
    execution = Execution.start(IDENTITY, budget=30.0)
    first = execution.remaining()
    assert 29.0 < first <= 30.0
    _wait_for_monotonic_tick()
    second = execution.remaining()
    assert second < first
    execution.assert_active()  # plenty left: no refusal


def test_remaining_is_never_negative_once_the_budget_is_spent():
    execution = Execution.start(IDENTITY, budget=0.0)
    _wait_for_monotonic_tick()
    assert execution.remaining() == 0.0
    past = Execution.start(IDENTITY, budget=5.0, deadline=time.monotonic() - 100.0)
    assert past.remaining() == 0.0


def test_zero_budget_stops_with_the_deadline_code():
    execution = Execution.start(IDENTITY, budget=0)
    assert _stopped_code(execution) == "E_OPERATION_DEADLINE"
    assert ExecutionStopped.DEADLINE == "E_OPERATION_DEADLINE"


def test_an_earlier_monotonic_deadline_wins_over_the_budget():
    execution = Execution.start(IDENTITY, budget=60.0, deadline=time.monotonic() + 1.0)
    assert 0.0 < execution.remaining() <= 1.0
    spent = Execution.start(IDENTITY, budget=60.0, deadline=time.monotonic() - 0.001)
    assert _stopped_code(spent) == "E_OPERATION_DEADLINE"


def test_an_earlier_budget_wins_over_a_later_deadline():
    execution = Execution.start(IDENTITY, budget=1.0, deadline=time.monotonic() + 3600.0)
    assert 0.0 < execution.remaining() <= 1.0


# -- cancellation, closing, resources ------------------------------------------------------------


def test_cancel_sets_cancelled_and_stops_with_the_cancelled_code():
    execution = Execution.start(IDENTITY, budget=30.0)
    assert execution.cancelled is False
    execution.cancel()
    assert execution.cancelled is True
    assert _stopped_code(execution) == "E_OPERATION_CANCELLED"
    with pytest.raises(ExecutionStopped) as excinfo:
        execution.consume(bytes=1)
    assert excinfo.value.code == "E_OPERATION_CANCELLED"


def test_close_stops_with_the_closed_code_even_when_also_cancelled():
    execution = Execution.start(IDENTITY, budget=30.0)
    execution.close()
    assert execution.closed is True
    assert _stopped_code(execution) == "E_OPERATION_CLOSED"
    execution.cancel()
    assert _stopped_code(execution) == "E_OPERATION_CLOSED"


def test_consume_up_to_the_limits_is_allowed_and_past_them_is_refused():
    execution = Execution.start(IDENTITY, budget=30.0, max_bytes=10, max_items=2)
    execution.consume(bytes=6, items=1)
    execution.consume(bytes=4, items=1)  # exactly at both limits
    with pytest.raises(ExecutionStopped) as excinfo:
        execution.consume(bytes=1)
    assert excinfo.value.code == "E_OPERATION_RESOURCE_LIMIT"


def test_consume_past_max_items_is_refused_with_the_resource_code():
    execution = Execution.start(IDENTITY, budget=30.0, max_items=3)
    for _ in range(3):
        execution.consume(items=1)
    with pytest.raises(ExecutionStopped) as excinfo:
        execution.consume(items=1)
    assert excinfo.value.code == "E_OPERATION_RESOURCE_LIMIT"


def test_consume_without_limits_never_runs_out():
    execution = Execution.start(IDENTITY, budget=30.0)
    execution.consume(bytes=10**12, items=10**9)
    execution.assert_active()


def test_consume_refuses_negative_amounts():
    execution = Execution.start(IDENTITY, budget=30.0, max_bytes=10)
    with pytest.raises(InputInvalid) as excinfo:
        execution.consume(bytes=-5)
    assert excinfo.value.code == "E_JOB_INPUT_INVALID"
    execution.consume(bytes=10)  # the refused call counted nothing


def test_consume_after_the_budget_is_spent_stops_with_the_deadline_code():
    execution = Execution.start(IDENTITY, budget=0.0, max_bytes=100)
    with pytest.raises(ExecutionStopped) as excinfo:
        execution.consume(bytes=1)
    assert excinfo.value.code == "E_OPERATION_DEADLINE"


def test_a_shared_cancel_event_cancels_every_execution_started_with_it():
    event = threading.Event()
    first = Execution.start(IDENTITY, budget=30.0, cancel_event=event)
    second = Execution.start(IDENTITY, budget=30.0, cancel_event=event)
    other = Execution.start(IDENTITY, budget=30.0)
    first.cancel()
    assert event.is_set()
    assert second.cancelled is True
    assert _stopped_code(second) == "E_OPERATION_CANCELLED"
    assert other.cancelled is False


def test_setting_the_event_from_outside_cancels_the_execution():
    event = threading.Event()
    execution = Execution.start(IDENTITY, budget=30.0, cancel_event=event)
    thread = threading.Thread(target=event.set)
    thread.start()
    thread.join()
    assert _stopped_code(execution) == "E_OPERATION_CANCELLED"


# -- bind_write_fence ----------------------------------------------------------------------------


def test_bind_write_fence_sets_the_fence_and_leaves_the_original_unfenced():
    execution = Execution.start(IDENTITY, budget=30.0)
    lease = _lease(epoch=7)
    bound = bind_write_fence(execution, lease, HASH.upper(), using="other")
    assert bound is not execution
    assert execution.write_fence is None
    assert bound.write_fence == WriteFence(lease=lease, proposal_hash=HASH, using="other")
    assert bound.identity == execution.identity
    default = bind_write_fence(execution, lease, HASH)
    assert default.write_fence.using == "default"


def test_bind_write_fence_shares_cancellation_in_both_directions():
    execution = Execution.start(IDENTITY, budget=30.0)
    bound = bind_write_fence(execution, _lease(), HASH)
    bound.cancel()
    assert execution.cancelled is True
    assert _stopped_code(execution) == "E_OPERATION_CANCELLED"

    other = Execution.start(IDENTITY, budget=30.0)
    other_bound = bind_write_fence(other, _lease(), HASH)
    other.cancel()
    assert _stopped_code(other_bound) == "E_OPERATION_CANCELLED"


def test_bind_write_fence_shares_the_budget_counters_and_closing():
    execution = Execution.start(IDENTITY, budget=30.0, max_bytes=10)
    bound = bind_write_fence(execution, _lease(), HASH)
    assert abs(bound.remaining() - execution.remaining()) < 0.5
    bound.consume(bytes=8)
    with pytest.raises(ExecutionStopped) as excinfo:
        execution.consume(bytes=3)  # 11 bytes in all, counted across both
    assert excinfo.value.code == "E_OPERATION_RESOURCE_LIMIT"

    spent = Execution.start(IDENTITY, budget=0.0)
    assert _stopped_code(bind_write_fence(spent, _lease(), HASH)) == "E_OPERATION_DEADLINE"

    live = Execution.start(IDENTITY, budget=30.0)
    bind_write_fence(live, _lease(), HASH).close()
    assert _stopped_code(live) == "E_OPERATION_CLOSED"


@pytest.mark.parametrize(
    "bad_hash",
    [None, 123, "", HASH[:-1], HASH + "0", "z" * 64, "-" * 64],
    ids=["none", "int", "empty", "short", "long", "non-hex-z", "non-hex-dash"],
)
def test_bind_write_fence_refuses_a_bad_proposal_hash(bad_hash):
    execution = Execution.start(IDENTITY, budget=30.0)
    with pytest.raises(InputInvalid) as excinfo:
        bind_write_fence(execution, _lease(), bad_hash)
    assert excinfo.value.code == "E_JOB_INPUT_INVALID"


def test_bind_write_fence_refuses_a_non_execution_and_a_non_lease():
    execution = Execution.start(IDENTITY, budget=30.0)
    with pytest.raises(InputInvalid) as excinfo:
        bind_write_fence(IDENTITY, _lease(), HASH)
    assert excinfo.value.code == "E_JOB_INPUT_INVALID"
    with pytest.raises(InputInvalid) as excinfo:
        bind_write_fence(execution, object(), HASH)
    assert excinfo.value.code == "E_JOB_INPUT_INVALID"
    assert execution.write_fence is None


# -- errors --------------------------------------------------------------------------------------

DOCUMENTED_CODES = {
    errors.InputInvalid: "E_JOB_INPUT_INVALID",
    errors.CapacityReached: "E_JOB_CAPACITY_REACHED",
    errors.ScopeMismatch: "E_JOB_SCOPE_MISMATCH",
    errors.IdempotencyConflict: "E_JOB_IDEMPOTENCY_CONFLICT",
    errors.LeaseLost: "E_JOB_LEASE_LOST",
    errors.NotReclaimable: "E_JOB_NOT_RECLAIMABLE",
    errors.TransactionOwned: "E_JOB_TRANSACTION_OWNED",
    errors.DeadlineExceeded: "E_JOB_DEADLINE_EXCEEDED",
    errors.LockPolicyConflict: "E_JOB_LOCK_POLICY_CONFLICT",
    errors.JobCancelled: "E_JOB_CANCELLED",
}


@pytest.mark.parametrize("cls", list(DOCUMENTED_CODES), ids=lambda c: c.__name__)
def test_each_error_class_carries_its_documented_code(cls):
    expected = DOCUMENTED_CODES[cls]
    assert issubclass(cls, JobError)
    assert cls.code == expected
    error = cls("say what to do instead")
    assert error.code == expected
    assert error.message == "say what to do instead"
    assert str(error) == f"{expected}: say what to do instead"
    assert isinstance(error, Exception)


def test_every_public_error_class_has_a_distinct_documented_code():
    # PayloadTooLarge refines InputInvalid (same §3 code) so an HTTP API can answer 413.
    refinements = {errors.PayloadTooLarge}
    public = {getattr(errors, name) for name in errors.__all__} - {JobError, ExecutionStopped}
    assert public - refinements == set(DOCUMENTED_CODES)
    assert len(set(DOCUMENTED_CODES.values())) == len(DOCUMENTED_CODES)


def test_payload_too_large_is_input_invalid_with_its_code():
    error = errors.PayloadTooLarge("too big")
    assert isinstance(error, errors.InputInvalid)
    assert error.code == "E_JOB_INPUT_INVALID"


def test_job_cancelled_is_a_job_error_with_a_default_message():
    error = JobCancelled()
    assert isinstance(error, JobError)
    assert error.code == "E_JOB_CANCELLED"
    assert error.message


@pytest.mark.parametrize(
    "code",
    [
        "E_OPERATION_CANCELLED",
        "E_OPERATION_DEADLINE",
        "E_OPERATION_CLOSED",
        "E_OPERATION_RESOURCE_LIMIT",
    ],
)
def test_execution_stopped_is_a_job_error_with_each_documented_code(code):
    error = ExecutionStopped(code, "stop")
    assert isinstance(error, JobError)
    assert error.code == code
    assert str(error) == f"{code}: stop"
    assert code in ExecutionStopped.CODES


def test_execution_stopped_refuses_an_undocumented_code():
    with pytest.raises(ValueError):
        ExecutionStopped("E_JOB_LEASE_LOST", "not an execution code")
    assert ExecutionStopped.CODES == {
        "E_OPERATION_CANCELLED",
        "E_OPERATION_DEADLINE",
        "E_OPERATION_CLOSED",
        "E_OPERATION_RESOURCE_LIMIT",
    }


def test_a_code_given_at_raise_time_overrides_only_that_instance():
    error = JobError("refused", code="E_JOB_SOMETHING")
    assert error.code == "E_JOB_SOMETHING"
    assert JobError.code == "E_JOB"
    assert JobError("plain").code == "E_JOB"
