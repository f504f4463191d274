"""``submit()`` and the operation registry (SPEC §5–§6).

Proves: submit() persists pending work (a defer) with its queue, priority and run_after, and the
claim order honours them; unknown operations and bad options are refused with InputInvalid and
write nothing; identical submissions coalesce; ``@operation`` validates its arguments and refuses a
second function for a taken name; each installed app's ``jobs.py`` is discovered by
``django.setup()``; ``claim_next()`` reclaims expired leases only of ``on_expired="resume"``
operations unless told otherwise.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

import django_durable_jobs
from django_durable_jobs.models import Job
from django_durable_jobs.rules import registry
from django_durable_jobs.rules.errors import IdempotencyConflict, InputInvalid
from django_durable_jobs.store import DurableJobStore
from django_durable_jobs.submission import submit
from tests.support import FakeClock, assert_refused, live_clock, run_python, submission
from tests.testapp import jobs as testapp_jobs

pytestmark = pytest.mark.django_db(transaction=True)

TEST_OPERATIONS = {
    "tests.steps": ("resume", testapp_jobs.steps),
    "tests.hold": ("hold", testapp_jobs.hold),
    "tests.wait_cancel": ("hold", testapp_jobs.wait_cancel),
    "tests.sleep": ("hold", testapp_jobs.sleep),
    "tests.domain_write": ("hold", testapp_jobs.domain_write),
    "tests.fail": ("hold", testapp_jobs.fail),
    "tests.noop": ("hold", testapp_jobs.noop),
}


@pytest.fixture
def scratch():
    """Yield a list of operation names to register; unregister them afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        registry.unregister(name)


# -- submit -------------------------------------------------------------------------------------


def test_submit_persists_pending_work_with_queue_priority_and_run_after():
    later = timezone.now() + timedelta(hours=1)
    job = submit("tests.noop", {"b": 1, "a": "é"}, queue="bulk", priority=7, run_after=later)
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.queue, row.priority, row.run_after) == ("pending", "bulk", 7, later)
    assert row.proposal == '{"a":"é","b":1}'  # canonical JSON, exact text
    assert (row.scope, row.idempotency_key) == ("default", str(row.pk))
    assert (row.fencing_epoch, row.attempts, row.owner_id, row.lease_expires_at) == (
        0,
        0,
        None,
        None,
    )
    assert job.ownership == "unclaimed"


def test_submit_defaults_to_the_default_queue_priority_zero_and_due_now():
    before = timezone.now()
    row = Job.objects.get(pk=submit("tests.noop", None).pk)
    assert (row.queue, row.priority, row.proposal) == ("default", 0, "null")
    assert before <= row.run_after <= timezone.now()


def test_submit_is_also_exported_by_the_package():
    job = django_durable_jobs.submit("tests.noop", {"x": 1}, idempotency_key="pkg", scope="t1")
    row = Job.objects.get(pk=job.pk)
    assert (row.operation, row.scope, row.idempotency_key, row.status) == (
        "tests.noop",
        "t1",
        "pkg",
        "pending",
    )


def test_submit_refuses_an_unknown_operation_and_writes_nothing():
    error = assert_refused(
        InputInvalid, "E_JOB_INPUT_INVALID", lambda: submit("tests.no_such_op", {"x": 1})
    )
    assert "tests.no_such_op" in error.message and "tests.noop" in error.message


@pytest.mark.parametrize(
    "options",
    [
        {"priority": 101},
        {"priority": "high"},
        {"queue": ""},
        {"run_after": timezone.now().replace(tzinfo=None)},
        {"idempotency_key": ""},
        {"scope": "bad\x00scope"},
    ],
    ids=["priority-range", "priority-type", "queue", "naive-run_after", "key", "scope"],
)
def test_submit_refuses_bad_options_and_writes_nothing(options):
    assert_refused(
        InputInvalid, "E_JOB_INPUT_INVALID", lambda: submit("tests.noop", {"x": 1}, **options)
    )


def test_submit_refuses_a_payload_that_is_not_json():
    assert_refused(InputInvalid, "E_JOB_INPUT_INVALID", lambda: submit("tests.noop", {1j}))
    assert_refused(
        InputInvalid, "E_JOB_INPUT_INVALID", lambda: submit("tests.noop", {"x": float("nan")})
    )


def test_identical_submissions_coalesce_onto_the_first_job_unchanged():
    first = submit("tests.noop", {"x": 1}, idempotency_key="k", queue="q1", priority=3)
    again = submit("tests.noop", {"x": 1}, idempotency_key="k", queue="q2", priority=9)
    assert again.pk == first.pk
    row = Job.objects.get(pk=first.pk)
    assert (row.queue, row.priority) == ("q1", 3)  # the earlier row is returned unchanged
    assert Job.objects.count() == 1
    assert_refused(
        IdempotencyConflict,
        "E_JOB_IDEMPOTENCY_CONFLICT",
        lambda: submit("tests.noop", {"x": 2}, idempotency_key="k"),
    )
    # The same key under another operation or scope is another job.
    assert submit("tests.steps", {"x": 1}, idempotency_key="k").pk != first.pk
    assert submit("tests.noop", {"x": 1}, idempotency_key="k", scope="other").pk != first.pk
    assert Job.objects.count() == 3


def test_claim_next_honours_submitted_priority_queue_and_run_after():
    clock = live_clock()
    worker = DurableJobStore(actor="worker", clock=clock)
    low = submit("tests.noop", {"n": "low"}, priority=-5)
    mid = submit("tests.noop", {"n": "mid"})
    high = submit("tests.noop", {"n": "high"}, priority=50)
    bulk = submit("tests.noop", {"n": "bulk"}, queue="bulk", priority=100)
    later = submit(
        "tests.noop", {"n": "later"}, priority=100, run_after=clock() + timedelta(hours=1)
    )
    clock.advance(1)
    assert [lease.job_id for lease in worker.claim_next(queues=["default"], limit=10)] == [
        high.pk,
        mid.pk,
        low.pk,
    ]
    assert Job.objects.get(pk=later.pk).status == "pending"  # not due yet
    assert [lease.job_id for lease in worker.claim_next(limit=10)] == [bulk.pk]
    clock.advance(3600)
    assert [lease.job_id for lease in worker.claim_next(limit=10)] == [later.pk]


# -- @operation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "has space", "a/b", "é", 5, None, "x" * 201])
def test_operation_refuses_a_bad_name(name):
    with pytest.raises(InputInvalid) as caught:
        registry.operation(name)
    assert caught.value.code == "E_JOB_INPUT_INVALID"


@pytest.mark.parametrize(
    "options",
    [
        {"on_expired": "retry"},
        {"on_expired": None},
        {"max_running": 0},
        {"max_running": -1},
        {"max_running": 1.5},
        {"max_running": "2"},
        {"max_running": True},
        {"timeout": 0},
        {"timeout": -1},
        {"timeout": float("nan")},
        {"timeout": float("inf")},
        {"timeout": "5"},
        {"timeout": True},
    ],
    ids=lambda o: f"{next(iter(o))}={next(iter(o.values()))!r}",
)
def test_operation_refuses_bad_options_and_registers_nothing(options):
    with pytest.raises(InputInvalid) as caught:
        registry.operation("tests.scratch_bad", **options)(lambda ctx, payload: None)
    assert caught.value.code == "E_JOB_INPUT_INVALID"
    assert registry.get("tests.scratch_bad") is None


def test_operation_refuses_a_bad_retry_policy_and_registers_nothing():
    with pytest.raises(InputInvalid):
        registry.operation("tests.scratch_retry", retry="often")(lambda ctx, payload: None)
    assert registry.get("tests.scratch_retry") is None


def test_operation_registers_the_function_unchanged_with_its_options(scratch):
    scratch.append("tests.scratch_ok")

    def work(ctx, payload):
        return payload

    decorated = registry.operation(
        "tests.scratch_ok", on_expired="resume", max_running=2, timeout=1.5
    )(work)
    assert decorated is work
    spec = registry.get("tests.scratch_ok")
    assert (spec.name, spec.func, spec.on_expired, spec.max_running, spec.timeout) == (
        "tests.scratch_ok",
        work,
        "resume",
        2,
        1.5,
    )
    assert "tests.scratch_ok" in registry.all_operations()
    # Decorating the same function again (a module imported twice) is harmless.
    registry.operation("tests.scratch_ok", on_expired="resume", max_running=2, timeout=1.5)(work)
    assert registry.get("tests.scratch_ok").func is work


def test_a_second_function_for_a_registered_name_is_refused_and_the_first_kept(scratch):
    scratch.append("tests.scratch_dup")

    def first(ctx, payload):
        return 1

    def second(ctx, payload):
        return 2

    registry.operation("tests.scratch_dup")(first)
    with pytest.raises(InputInvalid) as caught:
        registry.operation("tests.scratch_dup", on_expired="resume")(second)
    assert caught.value.code == "E_JOB_INPUT_INVALID"
    assert "first" in caught.value.message
    spec = registry.get("tests.scratch_dup")
    assert (spec.func, spec.on_expired) == (first, "hold")
    with pytest.raises(InputInvalid):
        registry.operation("tests.steps")(second)  # a discovered operation is protected too
    assert registry.get("tests.steps").func is testapp_jobs.steps


def test_operation_refuses_to_decorate_something_not_callable():
    with pytest.raises(InputInvalid):
        registry.operation("tests.scratch_value")(42)
    assert registry.get("tests.scratch_value") is None


def test_unknown_operations_are_not_in_the_registry():
    assert registry.get("tests.no_such_op") is None
    assert "tests.no_such_op" not in registry.all_operations()


# -- autodiscovery and resumable operations -----------------------------------------------------


def test_testapp_operations_are_registered_with_their_options():
    for name, (on_expired, func) in TEST_OPERATIONS.items():
        spec = registry.get(name)
        assert spec is not None, name
        assert (spec.on_expired, spec.func) == (on_expired, func)


@pytest.mark.processes
def test_django_setup_discovers_every_installed_apps_jobs_module():
    """A fresh process imports no jobs module by hand: django.setup() must find them."""
    code = (
        "import sys, json\n"
        "from django_durable_jobs import registry\n"
        "ops = {n: s.on_expired for n, s in registry.all_operations().items()}\n"
        "print(json.dumps({'ops': ops, 'loaded': 'tests.testapp.jobs' in sys.modules}))\n"
    )
    done = run_python(code, {"DJANGO_SETTINGS_MODULE": "tests.settings"})
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["loaded"] is True
    assert {n: found["ops"].get(n) for n in TEST_OPERATIONS} == {
        n: on_expired for n, (on_expired, _) in TEST_OPERATIONS.items()
    }


def test_resumable_operations_are_those_registered_with_on_expired_resume(scratch):
    resumable = registry.resumable_operations()
    assert "tests.steps" in resumable
    assert not resumable & {n for n, (o, _) in TEST_OPERATIONS.items() if o == "hold"}
    assert all(registry.get(n).on_expired == "resume" for n in resumable)
    scratch.append("tests.scratch_resume")
    registry.operation("tests.scratch_resume", on_expired="resume")(lambda ctx, payload: None)
    assert "tests.scratch_resume" in registry.resumable_operations()
    registry.unregister("tests.scratch_resume")
    assert "tests.scratch_resume" not in registry.resumable_operations()


def _expired_pair(clock: FakeClock) -> tuple[DurableJobStore, Job, Job]:
    crashed = DurableJobStore(actor="crashed", lease_seconds=10, clock=clock)
    steps = crashed.defer("tests.steps", submission({"steps": 2}, key="s"))
    hold = crashed.defer("tests.hold", submission({"steps": 2}, key="h"))
    crashed.claim(steps.pk)
    crashed.claim(hold.pk)
    clock.advance(11)
    return crashed, steps, hold


def test_claim_next_reclaims_expired_leases_only_of_resume_operations_by_default():
    clock = live_clock()
    crashed, steps, hold = _expired_pair(clock)
    worker = DurableJobStore(actor="worker", lease_seconds=10, clock=clock)
    leases = worker.claim_next(limit=10)
    assert [(lease.job_id, lease.epoch) for lease in leases] == [(steps.pk, 2)]
    held = worker.get(hold.pk)
    assert (held.status, held.ownership, held.owner_id, held.fencing_epoch) == (
        "running",
        "expired",
        crashed.owner_id,
        1,
    )
    assert worker.get(steps.pk).owner_id == worker.owner_id


def test_claim_next_resume_expired_overrides_the_registry():
    clock = live_clock()
    _, steps, hold = _expired_pair(clock)
    worker = DurableJobStore(actor="worker", lease_seconds=10, clock=clock)
    assert worker.claim_next(limit=10, resume_expired=[]) == []
    leases = worker.claim_next(limit=10, resume_expired=["tests.hold"])
    assert [lease.job_id for lease in leases] == [hold.pk]
    assert worker.get(steps.pk).ownership == "expired"


@pytest.mark.django_db(transaction=True)
def test_submit_inside_the_callers_transaction_exists_only_if_the_caller_commits():
    from django.db import transaction

    from django_durable_jobs import submit

    class Rollback(Exception):
        pass

    with pytest.raises(Rollback):
        with transaction.atomic():
            rolled_back = submit("tests.noop", {"n": "rolled back"})
            assert Job.objects.filter(pk=rolled_back.pk).exists()  # visible inside
            raise Rollback
    assert not Job.objects.filter(pk=rolled_back.pk).exists()

    with transaction.atomic():
        kept = submit("tests.noop", {"n": "kept"})
    assert Job.objects.get(pk=kept.pk).status == "pending"
