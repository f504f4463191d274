"""Bounded store calls: budgets, lock waits and the lock-wait setting of the caller's connection.

* An execution that is out of time, closed or cancelled is refused before any SQL runs
  (``DeadlineExceeded`` / ``ExecutionStopped``), and nothing changes.
* With another process holding the job's row lock, a call with a 0.2 s budget gives up with
  ``DeadlineExceeded`` well under a second, changes nothing, and leaves the connection's lock-wait
  setting (PostgreSQL ``lock_timeout``, MariaDB ``innodb_lock_wait_timeout`` and
  ``max_statement_time``, SQLite ``busy_timeout``) as it was; with a larger budget it waits and
  succeeds.
* A callback that changes that setting inside the bounded transaction → ``LockPolicyConflict``,
  everything rolled back, the setting restored.
* A bounded call that succeeds leaves the setting as it was, and caps waits at its budget meanwhile.

The test's connection runs with an unusual lock-wait setting (not the server default), so that
"restored" cannot be confused with "reset to the default".
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import DatabaseError, connection
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.rules.errors import (
    DeadlineExceeded,
    ExecutionStopped,
    LockPolicyConflict,
)
from django_durable_jobs.rules.execution import Execution, Identity, bind_write_fence
from django_durable_jobs.store import AttemptOutcome, DurableJobStore, Lease, PageQuery
from tests.race_child import Child
from tests.support import FakeClock, db_state, submission
from tests.testapp.models import DomainRow, RetryHistory

pytestmark = pytest.mark.django_db(transaction=True)

OP = "deadlines.op"
SCOPE = "default"
DEADLINE = "E_JOB_DEADLINE_EXCEEDED"


# -- the lock-wait setting of the test's own connection ---------------------------------------------


def lock_setting() -> Any:
    """Return this connection's lock-wait setting, read the way an operator would."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SHOW lock_timeout")
            return cursor.fetchone()[0]
        if connection.vendor == "mysql":
            cursor.execute(
                "SELECT @@SESSION.innodb_lock_wait_timeout, @@SESSION.max_statement_time"
            )
            wait, statement = cursor.fetchone()
            return (int(wait), float(statement))
        cursor.execute("PRAGMA busy_timeout")
        return cursor.fetchone()[0]


def _set_lock_setting(value: Any) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT set_config('lock_timeout', %s, false)", [value])
        elif connection.vendor == "mysql":
            cursor.execute(
                "SET SESSION innodb_lock_wait_timeout = %s, max_statement_time = %s", list(value)
            )
        else:
            cursor.execute(f"PRAGMA busy_timeout = {int(value)}")


UNUSUAL = {"postgresql": "4321ms", "mysql": (33, 45.0), "sqlite": 4321}
# What a misbehaving callback runs inside the bounded transaction.
CHANGE_LOCK_SETTING = {
    "postgresql": "SET LOCAL lock_timeout = '5s'",
    "mysql": "SET SESSION innodb_lock_wait_timeout = 77",
    "sqlite": "PRAGMA busy_timeout = 7777",
}


@pytest.fixture
def unusual_lock_setting() -> Iterator[Any]:
    """Give the test's connection a non-default lock-wait setting; put the original back after."""
    original = lock_setting()
    _set_lock_setting(UNUSUAL[connection.vendor])
    value = lock_setting()
    assert value != original
    yield value
    _set_lock_setting(original)


def _cap_seconds(value: Any) -> list[float]:
    """Return the lock-wait caps (in seconds) a lock setting stands for."""
    if connection.vendor == "postgresql":
        units = {"ms": 0.001, "s": 1.0, "min": 60.0}
        for unit in ("ms", "min", "s"):
            if value.endswith(unit):
                return [float(value[: -len(unit)]) * units[unit]]
        return [float(value) / 1000]
    if connection.vendor == "mysql":
        return [float(v) for v in value]
    return [value / 1000]


# -- the bounded calls under test ----------------------------------------------------------------


@dataclass
class Case:
    """One bounded store call, set up on its own job."""

    identity: Identity
    call: Callable[[Execution], Any]
    effect: Callable[[], bool]  # True once the call has done its work
    lease: Lease | None = None
    proposal_hash: str = ""
    callbacks: list[str] = field(default_factory=list)  # callbacks the store invoked
    hooks: list[Callable[[], None]] = field(default_factory=list)  # run inside the callback

    def run_callback(self, name: str) -> None:
        self.callbacks.append(name)
        for hook in self.hooks:
            hook()


def _identity(store: DurableJobStore, key: str) -> Identity:
    return Identity(SCOPE, store.actor, OP, key)


def _claim_case(store: DurableJobStore) -> Case:
    job = store.defer(OP, submission({"case": "claim"}, key="claim"))
    return Case(
        _identity(store, "claim"),
        lambda ex: store.claim(job.pk, execution=ex),
        lambda: Job.objects.get(pk=job.pk).fencing_epoch == 1,
    )


def _request_cancel_case(store: DurableJobStore) -> Case:
    job = store.defer(OP, submission({"case": "cancel"}, key="cancel"))
    store.claim(job.pk)
    return Case(
        _identity(store, "cancel"),
        lambda ex: store.request_cancel(job.pk, execution=ex),
        lambda: Job.objects.get(pk=job.pk).cancellation_requested_at is not None,
    )


def _defer_case(store: DurableJobStore) -> Case:
    return Case(
        _identity(store, "fresh"),
        lambda ex: store.defer(OP, submission({"case": "defer"}, key="fresh"), execution=ex),
        lambda: Job.objects.filter(idempotency_key="fresh").exists(),
    )


def _retry_case(store: DurableJobStore) -> Case:
    job = store.defer(OP, submission({"case": "retry"}, key="retry"))
    store.fail(store.claim(job.pk), "boom")
    case = Case(
        _identity(store, "retry"),
        lambda ex: store.retry_atomically(job.pk, ex, retain),
        lambda: Job.objects.get(pk=job.pk).fencing_epoch == 2,
    )

    def retain(previous_row_json: str) -> str:
        previous = json.loads(previous_row_json)
        RetryHistory.objects.create(
            job_id=previous["id"], previous_status=previous["status"], previous_epoch=1
        )
        case.run_callback("retain_outcome")
        return "{}"

    return case


def _complete_case(store: DurableJobStore) -> Case:
    job = store.defer(OP, submission({"case": "complete"}, key="complete"))
    lease = store.claim(job.pk)
    case = Case(
        _identity(store, "complete"),
        lambda ex: store.complete_atomically(ex, mutation),
        lambda: Job.objects.get(pk=job.pk).status == JobStatus.COMPLETE,
        lease=lease,
        proposal_hash=job.proposal_hash,
    )

    def mutation(execution: Execution) -> str:
        DomainRow.objects.create(job_id=job.pk, value="written")
        case.run_callback("mutation")
        return '{"rows": 1}'

    return case


def _list_page_case(store: DurableJobStore) -> Case:
    store.defer(OP, submission({"case": "list"}, key="listed"))
    return Case(
        _identity(store, "listed"),
        lambda ex: store.list_page(PageQuery(OP), ex),
        lambda: False,  # read-only
    )


CASES = {
    "claim": _claim_case,
    "request_cancel": _request_cancel_case,
    "defer": _defer_case,
    "retry_atomically": _retry_case,
    "complete_atomically": _complete_case,
    "list_page": _list_page_case,
}
WRITES = [name for name in CASES if name != "list_page"]
LOCKING = ["claim", "request_cancel", "retry_atomically", "complete_atomically"]


def _execution(case: Case, **kwargs: Any) -> Execution:
    execution = Execution.start(case.identity, **kwargs)
    if case.lease is not None:
        execution = bind_write_fence(execution, case.lease, case.proposal_hash)
    return execution


def _spent(case: Case) -> Execution:
    return _execution(case, budget=0)


def _past_deadline(case: Case) -> Execution:
    return _execution(case, budget=60, deadline=time.monotonic() - 1)


def _closed(case: Case) -> Execution:
    execution = _execution(case, budget=60)
    execution.close()
    return execution


def _cancelled(case: Case) -> Execution:
    execution = _execution(case, budget=60)
    execution.cancel()
    return execution


STOPS = {
    "spent budget": (_spent, DeadlineExceeded, DEADLINE),
    "past deadline": (_past_deadline, DeadlineExceeded, DEADLINE),
    "closed": (_closed, ExecutionStopped, ExecutionStopped.CLOSED),
    "cancelled": (_cancelled, ExecutionStopped, ExecutionStopped.CANCELLED),
}


@pytest.fixture
def store() -> DurableJobStore:
    return DurableJobStore(scope=SCOPE, actor="bounded", clock=FakeClock())


@contextmanager
def row_locked_elsewhere(env: dict[str, str], job_id: Any) -> Iterator[Callable[[], None]]:
    """Hold the job's row lock in another process until released (at the latest, block end).

    Yields ``release()``, which ends the holder's transaction early (it rolls back).
    """
    holder = Child("hold", {"job_id": str(job_id)}, env)
    released = threading.Event()

    def release() -> None:
        if not released.is_set():
            released.set()
            holder.send("release")

    try:
        assert holder.read() == {"locked": True}
        yield release
        release()
        assert holder.read() == {"released": True}
        holder.finish()
    finally:
        holder.kill()


# -- an execution that may not go on runs no SQL -------------------------------------------------


@pytest.mark.parametrize("stop", list(STOPS))
@pytest.mark.parametrize("method", list(CASES))
def test_stopped_execution_is_refused_before_any_sql(store, method, stop):
    case = CASES[method](store)
    make, error, code = STOPS[stop]
    execution = make(case)
    before = db_state()

    with CaptureQueriesContext(connection) as queries, pytest.raises(error) as caught:
        case.call(execution)

    assert type(caught.value) is error
    assert caught.value.code == code
    assert [q["sql"] for q in queries.captured_queries] == []
    assert case.callbacks == []
    assert db_state() == before
    assert not case.effect()


@pytest.mark.parametrize(
    "stop, deadline_exceeded", [(s, STOPS[s][1] is DeadlineExceeded) for s in STOPS]
)
def test_finalize_with_a_stopped_execution_runs_no_sql_and_stays_pending(
    store, stop, deadline_exceeded
):
    case = _complete_case(store)
    make, _, code = STOPS[stop]
    execution = make(case)
    before = db_state()

    def bookkeeping(execution: Execution) -> str:
        case.callbacks.append("bookkeeping")
        return "{}"

    with CaptureQueriesContext(connection) as queries:
        outcome = store.finalize_atomically(
            execution, AttemptOutcome("failed", "gave up"), bookkeeping
        )

    assert outcome.state == "pending-finalization"
    assert outcome.reason.startswith(code)
    assert outcome.deadline_exceeded is deadline_exceeded
    assert [q["sql"] for q in queries.captured_queries] == []
    assert case.callbacks == []
    assert db_state() == before


# -- a row lock held by another process ----------------------------------------------------------


@pytest.mark.processes
@pytest.mark.parametrize("method", LOCKING)
def test_call_waiting_on_a_row_locked_elsewhere_gives_up_at_its_budget(
    store, db_settings_env, unusual_lock_setting, method
):
    case = CASES[method](store)
    job_id = Job.objects.get().pk
    before = db_state()

    with row_locked_elsewhere(db_settings_env, job_id):
        execution = _execution(case, budget=0.2)
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded) as caught:
            case.call(execution)
        elapsed = time.monotonic() - started
        setting_while_held = lock_setting()

    assert caught.value.code == DEADLINE
    assert 0.1 <= elapsed < 1.0, elapsed  # it waited for the lock, then stopped at its budget
    assert setting_while_held == unusual_lock_setting
    assert lock_setting() == unusual_lock_setting
    assert db_state() == before
    assert not case.effect()
    # Once the lock is gone the same call goes through.
    case.call(_execution(case, budget=10))
    assert case.effect()
    assert lock_setting() == unusual_lock_setting


@pytest.mark.processes
def test_call_with_budget_to_spare_waits_for_the_lock_and_succeeds(
    store, db_settings_env, unusual_lock_setting
):
    case = _request_cancel_case(store)
    job_id = Job.objects.get().pk

    with row_locked_elsewhere(db_settings_env, job_id) as release:
        timer = threading.Timer(0.5, release)
        started = time.monotonic()
        timer.start()
        try:
            assert case.call(_execution(case, budget=10)) is True
        finally:
            timer.join()
        elapsed = time.monotonic() - started

    assert 0.4 <= elapsed < 5.0, elapsed
    assert case.effect()
    assert lock_setting() == unusual_lock_setting


# -- the lock-wait setting -------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["complete_atomically", "retry_atomically"])
def test_callback_changing_the_lock_setting_is_refused_and_rolled_back(
    store, unusual_lock_setting, method
):
    case = CASES[method](store)
    change = CHANGE_LOCK_SETTING[connection.vendor]

    def meddle() -> None:
        with connection.cursor() as cursor:
            cursor.execute(change)

    case.hooks.append(meddle)  # after the callback's own domain write
    before = db_state()

    with pytest.raises(LockPolicyConflict) as caught:
        case.call(_execution(case, budget=10))

    assert caught.value.code == "E_JOB_LOCK_POLICY_CONFLICT"
    assert len(case.callbacks) == 1  # the callback ran, and its writes were rolled back
    assert DomainRow.objects.count() == 0
    assert RetryHistory.objects.count() == 0
    assert db_state() == before
    assert not case.effect()
    assert lock_setting() == unusual_lock_setting


def _wait_until_spent(execution: Execution) -> None:
    while execution.remaining() > 0:
        time.sleep(0.01)


@pytest.mark.parametrize("stop", ["cancelled", "out of time"])
@pytest.mark.parametrize("method", ["complete_atomically", "retry_atomically"])
def test_execution_stopping_during_the_callback_rolls_everything_back(
    store, unusual_lock_setting, method, stop
):
    case = CASES[method](store)
    if stop == "cancelled":
        execution = _execution(case, budget=10)
        case.hooks.append(execution.cancel)
        error, code = ExecutionStopped, ExecutionStopped.CANCELLED
    else:
        execution = _execution(case, budget=0.3)
        case.hooks.append(lambda: _wait_until_spent(execution))
        error, code = DeadlineExceeded, DEADLINE
    before = db_state()

    with pytest.raises(error) as caught:
        case.call(execution)

    assert type(caught.value) is error
    assert caught.value.code == code
    assert len(case.callbacks) == 1  # observed before COMMIT: the callback's writes are undone
    assert DomainRow.objects.count() == 0
    assert RetryHistory.objects.count() == 0
    assert db_state() == before
    assert not case.effect()
    assert lock_setting() == unusual_lock_setting


@pytest.mark.parametrize("method", WRITES)
def test_successful_bounded_call_leaves_the_lock_setting_as_it_was(
    store, unusual_lock_setting, method
):
    case = CASES[method](store)
    assert not case.effect()

    case.call(_execution(case, budget=10))

    assert case.effect()
    # The callback's own write (if the call has a callback) committed with the job's change.
    assert DomainRow.objects.count() + RetryHistory.objects.count() == len(case.callbacks)
    assert lock_setting() == unusual_lock_setting


@pytest.mark.parametrize("budget", [10.0, 3.0])
def test_bounded_transaction_caps_lock_waits_at_the_remaining_budget(
    store, unusual_lock_setting, budget
):
    case = _complete_case(store)
    inside: list[Any] = []
    case.hooks.append(lambda: inside.append(lock_setting()))

    case.call(_execution(case, budget=budget))

    assert case.effect()
    (during,) = inside
    assert during != unusual_lock_setting
    caps = _cap_seconds(during)
    if connection.vendor == "mysql":
        wait, statement = caps
        assert wait == budget  # whole seconds: the budget rounded up
        assert 0 < statement <= budget
    else:
        (cap,) = caps
        assert budget - 1 < cap <= budget
    assert lock_setting() == unusual_lock_setting


@pytest.mark.skipif(
    connection.vendor == "sqlite", reason="an embedded database has no connection to lose"
)
def test_a_connection_closed_inside_a_bounded_call_is_a_database_error(store, unusual_lock_setting):
    """A connection closed mid-call (Django closes one found broken) surfaces as the error it is.

    Restoring the lock-wait setting must leave a closed connection closed (a new one starts
    with the defaults), not ask it whether it is usable: MariaDB's driver raised AttributeError
    there, which a worker took for the job's own failure and ended the job failed.
    """
    case = _complete_case(store)
    before = db_state()
    case.hooks.append(connection.close)

    # Django's error, or the driver's where Django's cursor wrapper is not in the way.
    with pytest.raises((DatabaseError, connection.Database.DatabaseError)):
        case.call(_execution(case, budget=10))

    assert case.callbacks == ["mutation"]
    assert db_state() == before  # read on a new connection: nothing of the call was written
    assert not case.effect()
