"""Per-scope quotas at the store: pending cap, submission rate, priority ceiling, running limit.

Every refusal is proven to write nothing; every limit is shown both reached and not reached.
"""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_durable_jobs import submit, submit_many
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.rules.errors import CapacityReached, IdempotencyConflict, InputInvalid
from django_durable_jobs.rules.quotas import Rate, quota_for
from django_durable_jobs.store import DurableJobStore
from tests.support import LEASE, assert_refused, submission

pytestmark = pytest.mark.django_db(transaction=True)

CAPACITY = "E_JOB_CAPACITY_REACHED"
INVALID = "E_JOB_INPUT_INVALID"
CONFLICT = "E_JOB_IDEMPOTENCY_CONFLICT"


def quotas(common=None, **scopes):
    return override_settings(DURABLE_JOBS={"QUOTAS": common or {}, "SCOPE_QUOTAS": scopes})


@pytest.fixture
def op() -> str:
    return "tests.noop"  # registered by tests/testapp/jobs.py


def pending(scope: str) -> int:
    return Job.objects.filter(scope=scope, status=JobStatus.PENDING).count()


# -- the settings --------------------------------------------------------------------------------


def test_every_scope_gets_the_documented_defaults():
    quota = quota_for("anyone")
    assert (quota.max_pending, quota.submit_rate, quota.token_submit_rate) == (100_000, None, None)
    assert (quota.max_priority, quota.max_running) == (100, None)


def test_a_scope_s_own_limits_replace_the_common_ones():
    with quotas({"MAX_PENDING": 50, "SUBMIT_RATE": "10/m"}, t1={"MAX_PENDING": 5}):
        assert quota_for("t1").max_pending == 5
        assert quota_for("t1").submit_rate == Rate(10, 60.0)
        assert quota_for("t2").max_pending == 50


@pytest.mark.parametrize(
    "text, rate",
    [("600/m", Rate(600, 60.0)), ("10/5s", Rate(10, 5.0)), ("1/d", Rate(1, 86400.0))],
)
def test_rates_read_as_count_per_window(text, rate):
    assert Rate.parse(text, "x") == rate
    assert Rate.parse((rate.count, rate.seconds), "x") == rate


@pytest.mark.parametrize(
    "bad",
    [
        {"MAX_PENDING": 0},
        {"MAX_PENDING": "many"},
        {"SUBMIT_RATE": "fast"},
        {"SUBMIT_RATE": "0/s"},
        {"MAX_PRIORITY": 101},
        {"MAX_RUNNING": True},
        {"MAX_WAITING": 3},
    ],
)
def test_a_bad_quota_setting_is_a_system_check_error(bad):
    with quotas(t1=bad), pytest.raises(SystemCheckError, match="durable_jobs.E013"):
        call_command("check")


# -- the pending cap -------------------------------------------------------------------------------


def test_the_pending_cap_refuses_the_job_past_it_and_writes_nothing(store, op):
    with quotas(t1={"MAX_PENDING": 3}):
        for n in range(3):
            store.defer(op, submission({"n": n}, scope="t1"))
        error = assert_refused(
            CapacityReached, CAPACITY, lambda: store.defer(op, submission({"n": 9}, scope="t1"))
        )
        assert "MAX_PENDING" in error.message and "3" in error.message
        store.defer(op, submission({"n": 9}, scope="t2"))  # another scope is not affected
    assert pending("t1") == 3


def test_a_repeat_of_an_earlier_submission_is_answered_at_a_full_cap(store, op):
    with quotas(t1={"MAX_PENDING": 1}):
        first = store.defer(op, submission({"n": 1}, key="k", scope="t1"))
        again = store.defer(op, submission({"n": 1}, key="k", scope="t1"))
        assert again.pk == first.pk
        assert pending("t1") == 1


def test_claimed_jobs_make_room_under_the_cap(store, op):
    with quotas(t1={"MAX_PENDING": 2}):
        store.defer(op, submission({"n": 1}, scope="t1"))
        store.defer(op, submission({"n": 2}, scope="t1"))
        with pytest.raises(CapacityReached):
            store.defer(op, submission({"n": 3}, scope="t1"))
        assert len(store.claim_next(limit=1)) == 1
        store.defer(op, submission({"n": 3}, scope="t1"))
    assert pending("t1") == 2


def test_a_bulk_submission_over_the_cap_is_refused_whole(store, op):
    with quotas(t1={"MAX_PENDING": 3}):
        store.defer(op, submission({"n": 0}, scope="t1"))
        batch = [submission({"n": n}, scope="t1") for n in range(1, 4)]
        assert_refused(CapacityReached, CAPACITY, lambda: store.defer_many(op, batch))
        too_big = [submission({"n": n}, scope="t1") for n in range(10, 14)]
        assert_refused(InputInvalid, INVALID, lambda: store.defer_many(op, too_big))
        store.defer_many(op, batch[:2])
    assert pending("t1") == 3


def test_submit_and_submit_many_obey_the_cap(op):
    with quotas({"MAX_PENDING": 2}):
        submit(op, {"n": 1})
        submit(op, {"n": 2})
        assert_refused(CapacityReached, CAPACITY, lambda: submit(op, {"n": 3}))
        assert_refused(CapacityReached, CAPACITY, lambda: submit_many(op, [{"a": 1}]))
    assert pending("default") == 2


# -- the submission rate ---------------------------------------------------------------------------


def test_the_rate_limit_refuses_until_the_next_window(store, clock, op):
    with quotas(t1={"SUBMIT_RATE": "3/m"}):
        clock.advance(60 - clock().timestamp() % 60)  # the start of a window
        for n in range(3):
            store.defer(op, submission({"n": n}, scope="t1"))
        clock.advance(20)
        error = assert_refused(
            CapacityReached, CAPACITY, lambda: store.defer(op, submission({"n": 3}, scope="t1"))
        )
        assert error.retry_after == pytest.approx(40)
        store.defer(op, submission({"n": 3}, scope="t2"))  # each scope counts its own
        clock.advance(40)
        store.defer(op, submission({"n": 3}, scope="t1"))
    assert pending("t1") == 4


def test_refused_submissions_do_not_use_up_the_window(store, clock, op):
    with quotas(t1={"SUBMIT_RATE": "2/h"}):
        store.defer(op, submission({"n": 0}, scope="t1"))
        for n in range(5):
            with pytest.raises(CapacityReached):
                store.defer_many(op, [submission({"n": n, "m": m}, scope="t1") for m in (1, 2)])
        store.defer(op, submission({"n": 1}, scope="t1"))
        with pytest.raises(CapacityReached):
            store.defer(op, submission({"n": 2}, scope="t1"))
    assert pending("t1") == 2


def test_a_refusal_after_the_count_gives_the_window_back(store, clock, op):
    # An idempotency conflict is found only once the rate was counted: it must not use it up,
    # in defer, defer_many (one scope's refusal gives back another's count too) and insert.
    with quotas(t1={"SUBMIT_RATE": "2/h"}, t2={"SUBMIT_RATE": "2/h"}):
        store.defer(op, submission({"n": 0}, key="k", scope="t1"))
        conflict = submission({"n": 1}, key="k", scope="t1")
        for _ in range(3):
            assert_refused(IdempotencyConflict, CONFLICT, lambda: store.defer(op, conflict))
            assert_refused(
                IdempotencyConflict,
                CONFLICT,
                lambda: store.defer_many(op, [submission({"m": 1}, scope="t2"), conflict]),
            )
            assert_refused(
                IdempotencyConflict, CONFLICT, lambda: store.insert(op, submission=conflict)
            )
        store.defer(op, submission({"n": 2}, scope="t1"))  # the second of two
        store.defer_many(op, [submission({"m": m}, scope="t2") for m in (1, 2)])
        assert_refused(
            CapacityReached, CAPACITY, lambda: store.defer(op, submission({"n": 3}, scope="t1"))
        )
    assert (pending("t1"), pending("t2")) == (2, 2)


def test_inserts_count_against_the_rate_too(store, op):
    with quotas(t1={"SUBMIT_RATE": "1/h"}):
        assert store.insert(op, submission=submission({"n": 1}, scope="t1")) is not None
        assert_refused(
            CapacityReached,
            CAPACITY,
            lambda: store.insert(op, submission=submission({"n": 2}, scope="t1")),
        )


# -- the priority ceiling --------------------------------------------------------------------------


def test_the_priority_ceiling_refuses_a_higher_priority(store, op):
    with quotas(t1={"MAX_PRIORITY": 10}):
        store.defer(op, submission({"n": 1}, scope="t1"), priority=10)
        error = assert_refused(
            InputInvalid,
            INVALID,
            lambda: store.defer(op, submission({"n": 2}, scope="t1"), priority=11),
        )
        assert "priority 10 at most" in error.message
        assert_refused(
            InputInvalid,
            INVALID,
            lambda: store.defer_many(op, [submission({"n": 3}, scope="t1")], priority=50),
        )
        store.defer(op, submission({"n": 2}, scope="t2"), priority=100)


# -- the running limit ---------------------------------------------------------------------------


def test_the_running_limit_holds_claims_of_one_scope(store, op):
    with quotas(t1={"MAX_RUNNING": 2}):
        for n in range(5):
            store.defer(op, submission({"n": n}, scope="t1"))
        store.defer(op, submission({"n": 0}, scope="t2"))
        taken = store.claim_next(limit=10) + store.claim_next(limit=10)
        running = Job.objects.filter(status=JobStatus.RUNNING)
        assert running.filter(scope="t1").count() == 2
        assert running.filter(scope="t2").count() == 1
        assert len(taken) == 3
        assert store.claim_next(limit=10) == []
        waiting = Job.objects.filter(scope="t1", status=JobStatus.PENDING).first()
        error = assert_refused(CapacityReached, CAPACITY, lambda: store.claim(waiting.pk))
        assert "MAX_RUNNING" in error.message
        assert_refused(
            CapacityReached,
            CAPACITY,
            lambda: store.insert(op, submission=submission({"n": 9}, scope="t1")),
        )
        store.complete(taken[0])
        assert len(store.claim_next(limit=10)) == 1


def test_without_a_running_limit_claims_take_no_gate(store, op):
    for n in range(3):
        store.defer(op, submission({"n": n}, scope="t1"))
    assert len(store.claim_next(limit=3)) == 3
    from django_durable_jobs.models import CapacityGate

    assert not CapacityGate.objects.exists()


# -- fair turns across scopes ----------------------------------------------------------------------


def flood_and_quiet(store: DurableJobStore, op: str, flood: int = 60) -> list:
    store.defer_many(op, [submission({"n": n}, scope="flood") for n in range(flood)], priority=100)
    return [store.defer(op, submission({"n": n}, scope="quiet")).pk for n in range(3)]


@pytest.mark.parametrize("limit", [1, 4])
@pytest.mark.parametrize("capped", [False, True], ids=["fast", "exact"])
def test_a_flooding_scope_cannot_starve_another(store, op, limit, capped):
    quiet = flood_and_quiet(store, op)
    settings = quotas(flood={"MAX_RUNNING": 1000}) if capped else quotas()
    order = []
    with settings:
        for _ in range(8):
            order.extend(claim.job_id for claim in store.claim_next(limit=limit))
    # Two scopes have work: each claim of pending work takes the other's turn.
    positions = [order.index(pk) for pk in quiet]
    claims_until = [position // limit for position in positions]
    assert max(claims_until) < 6, order


def test_within_a_scope_priority_order_holds(store, op):
    store.defer(op, submission({"n": 1}, scope="a"), priority=0)
    high = store.defer(op, submission({"n": 2}, scope="a"), priority=50)
    store.defer(op, submission({"n": 3}, scope="b"), priority=0)
    first = store.claim_next(limit=1)[0]
    assert first.job_id == high.pk


def test_turns_go_round_every_scope_with_work(store, op):
    for scope in ("a", "b", "c"):
        store.defer_many(op, [submission({"n": n}, scope=scope) for n in range(4)])
    served = []
    for _ in range(6):
        (claim,) = store.claim_next(limit=1)
        served.append(Job.objects.get(pk=claim.job_id).scope)
    assert served == ["a", "b", "c", "a", "b", "c"]


@pytest.mark.parametrize("capped", [False, True], ids=["fast", "exact"])
def test_a_claim_in_the_same_turn_serves_the_scope_the_last_one_started_at(store, op, capped):
    """The worker's grown buffer claims its extra short jobs so: a small claim then a large one
    per turn, both of one scope, and the next turn the other scope's."""
    for scope in ("a", "b"):
        store.defer_many(op, [submission({"n": n}, scope=scope) for n in range(20)])

    def scopes(**claim) -> list[str]:
        batch = store.claim_batch(limit=claim.pop("limit"), **claim)
        return sorted({Job.objects.get(pk=c.job.pk).scope for c in batch})

    with quotas(a={"MAX_RUNNING": 1000}) if capped else quotas():
        served = [
            scopes(limit=1),
            scopes(limit=5, same_turn=True),
            scopes(limit=1),
            scopes(limit=5, same_turn=True),
            scopes(limit=1),
        ]
    assert served == [["a"], ["a"], ["b"], ["b"], ["a"]]


def test_a_scoped_client_claims_only_its_own_scope(clock, op):
    mine = DurableJobStore(scope="a", actor="w", lease_seconds=LEASE, clock=clock)
    other = DurableJobStore(scope="b", actor="w", lease_seconds=LEASE, clock=clock)
    mine.defer(op, submission({"n": 1}))
    other.defer(op, submission({"n": 1}), priority=100)
    (claim,) = mine.claim_next(limit=5)
    assert Job.objects.get(pk=claim.job_id).scope == "a"


def test_a_scope_at_its_running_limit_passes_its_turn(store, op):
    with quotas(a={"MAX_RUNNING": 1}):
        store.defer_many(op, [submission({"n": n}, scope="a") for n in range(3)], priority=100)
        store.defer_many(op, [submission({"n": n}, scope="b") for n in range(3)])
        scopes = []
        for _ in range(4):
            scopes.extend(Job.objects.get(pk=c.job_id).scope for c in store.claim_next(limit=1))
    assert scopes == ["a", "b", "b", "b"]


def test_task_enqueues_obey_the_scope_s_quotas():
    import django

    if django.VERSION < (6, 0):
        pytest.skip("django.tasks needs Django 6")
    from tests.testapp import tasks

    with quotas({"MAX_PENDING": 1, "MAX_PRIORITY": 5}):
        tasks.add.enqueue(1, 2)
        assert_refused(CapacityReached, CAPACITY, lambda: tasks.add.enqueue(3, 4))
        too_high = tasks.add.using(priority=6)
        assert_refused(InputInvalid, INVALID, lambda: too_high.enqueue(5, 6))
    assert pending("default") == 1


def test_a_submission_counts_the_backlog_at_most_once_a_second(op, monkeypatch):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from django_durable_jobs.rules.quotas import PendingEstimates

    monkeypatch.setattr(PendingEstimates, "TTL", 3600.0)  # no second passes in this test
    with quotas({"MAX_PENDING": 100}):
        with CaptureQueriesContext(connection) as first:
            submit(op, {"n": 0})
        with CaptureQueriesContext(connection) as later:
            for n in range(1, 90):
                submit(op, {"n": n})
        with CaptureQueriesContext(connection) as near_the_cap:
            submit(op, {"n": 90})
    counts = [q["sql"] for q in first.captured_queries if "COUNT(" in q["sql"]]
    assert len(counts) == 1  # the first counts the backlog
    assert not [q for q in later.captured_queries if "COUNT(" in q["sql"]]
    assert [q for q in near_the_cap.captured_queries if "COUNT(" in q["sql"]]  # past 90%
    assert pending("default") == 91


def test_a_scope_whose_work_is_all_of_a_full_operation_passes_its_turn(store):
    store.defer_many("tests.noop", [submission({"n": n}, scope="a") for n in range(3)])
    store.defer_many("tests.fail", [submission({"n": n}, scope="b") for n in range(3)])
    taken = []
    for _ in range(4):  # max_running=1 per operation: after one noop, scope a has nothing to give
        taken.extend(
            (job.scope, job.operation)
            for job in (Job.objects.get(pk=c.job_id) for c in store.claim_next(max_running=1))
        )
    assert taken == [("a", "tests.noop"), ("b", "tests.fail")]
