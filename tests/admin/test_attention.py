"""The job list's ``?attention=`` filter selects exactly the jobs that wait for a person.

Proves, on a prepared mix of rows (expired leases of ``hold``, ``resume`` and unregistered
operations; failures with and without a retry left; old and fresh cancellation requests; owners
whose worker is alive, stale, stopped or unknown): each of the four choices lists the same jobs
as a count made independently in Python over every row, in a number of queries that does not
grow with the rows; an unknown choice is reported.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_durable_jobs.models import Job, WorkerProcess
from django_durable_jobs.rules import registry
from django_durable_jobs.rules.retry import RetryPolicy
from django_durable_jobs.rules.vocabulary import WorkerState, worker_state
from django_durable_jobs.store import DurableJobStore
from tests.support import FakeClock, submission

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.admin.urls")]

CHANGELIST = "/admin/durable_jobs/job/"
RESUMED = "attn.resume"
RETRIED = "attn.retried"


@pytest.fixture
def operations():
    """Register a ``resume`` operation and one whose retry policy allows three attempts."""
    registry.operation(RESUMED, on_expired="resume")(lambda ctx, payload: None)
    registry.operation(RETRIED, retry=RetryPolicy(max_attempts=3))(lambda ctx, payload: None)
    yield
    registry.unregister(RESUMED)
    registry.unregister(RETRIED)


def claimed(store: DurableJobStore, op: str, key: str):
    job = store.defer(op, submission({"k": key}, key=key))
    return store.claim(job.pk)


def worker_row(owner_id: str, actor: str, *, heartbeat_age: float, stopped: bool = False) -> None:
    now = timezone.now()
    WorkerProcess.objects.create(
        owner_id=owner_id,
        actor=actor,
        host="h",
        pid=1,
        started_at=now - timedelta(hours=1),
        heartbeat_at=now - timedelta(seconds=heartbeat_age),
        stopped_at=now if stopped else None,
        lease_seconds=30,
        concurrency=1,
        leases_held=1,
    )


@pytest.fixture
def mix(operations):
    """Return a mix of jobs covering each set and its near misses."""
    past = FakeClock(now=timezone.now() - timedelta(minutes=30))
    old = DurableJobStore(actor="old", lease_seconds=10, clock=past)
    for op in ("tests.hold", RESUMED, "attn.unregistered"):
        claimed(old, op, f"expired-{op}")
    live = DurableJobStore(actor="live", lease_seconds=3600)
    live.fail(claimed(live, "tests.hold", "failed-no-policy"), "boom")
    live.fail(claimed(live, RETRIED, "failed-retry-left"), "boom")
    asked = live.defer("tests.hold", submission(key="failed-asked"))
    live.fail(live.claim(asked.pk), "boom")
    live.request_retry(asked.pk)
    claimed(live, "tests.hold", "cancel-old")
    DurableJobStore(clock=past).request_cancel(Job.objects.get(idempotency_key="cancel-old").pk)
    live.request_cancel(claimed(live, "tests.hold", "cancel-fresh").job_id)
    for state, age, stopped in (("stale", 600, False), ("alive", 1, False), ("gone", 600, True)):
        store = DurableJobStore(actor=state, lease_seconds=3600)
        claimed(store, "tests.hold", f"owner-{state}")
        worker_row(store.owner_id, state, heartbeat_age=age, stopped=stopped)
    claimed(DurableJobStore(lease_seconds=3600), "tests.hold", "owner-unknown")
    live.defer("tests.hold", submission(key="pending"))


def independent(choice: str) -> set:
    """Return the ids of the jobs in ``choice``, judged in Python over every row."""
    now = timezone.now()
    workers = {w.owner_id: w for w in WorkerProcess.objects.all()}
    resumable = registry.resumable_operations()
    chosen = set()
    for job in Job.objects.all():
        running = job.status == "running"
        if choice == "hold-expired":
            hit = running and job.lease_expires_at <= now and job.operation not in resumable
        elif choice == "failed-final":
            hit = job.status == "failed" and job.retry_requested_at is None
        elif choice == "cancel-unacknowledged":
            asked = job.cancellation_requested_at
            hit = running and asked is not None and (now - asked).total_seconds() > 30
        else:
            worker = workers.get(job.owner_id)
            hit = running and worker is not None and worker.state(now) == WorkerState.STALE
        if hit:
            chosen.add(job.pk)
    return chosen


def keys(pks) -> set[str]:
    return set(Job.objects.filter(pk__in=pks).values_list("idempotency_key", flat=True))


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("hold-expired", {"expired-tests.hold", "expired-attn.unregistered"}),
        ("failed-final", {"failed-no-policy"}),
        ("cancel-unacknowledged", {"cancel-old"}),
        ("vanished-worker", {"owner-stale"}),
    ],
)
def test_each_attention_choice_lists_what_an_independent_count_finds(root, mix, choice, expected):
    response = root.get(CHANGELIST, {"attention": choice})
    assert response.status_code == 200
    shown = {job.pk for job in response.context["cl"].queryset}
    assert shown == independent(choice)
    assert keys(shown) == expected


def test_the_filter_offers_its_four_choices_by_their_parameters(root):
    html = root.get(CHANGELIST).content.decode()
    for choice in ("hold-expired", "failed-final", "cancel-unacknowledged", "vanished-worker"):
        assert f"?attention={choice}" in html


def test_an_unknown_attention_choice_is_reported_not_ignored(root, mix):
    response = root.get(CHANGELIST, {"attention": "everything"})
    assert response.status_code == 302
    assert response["Location"].endswith("?e=1")


def test_a_stale_worker_is_judged_by_its_own_lease_length(root, mix):
    """A worker started with a longer lease is not stale until that lease has passed."""
    stale = WorkerProcess.objects.get(actor="stale")
    WorkerProcess.objects.filter(pk=stale.pk).update(lease_seconds=900)
    assert worker_state(None, stale.heartbeat_at, 900, timezone.now()) == WorkerState.ALIVE
    response = root.get(CHANGELIST, {"attention": "vanished-worker"})
    assert set(response.context["cl"].queryset) == set()


def test_each_choice_runs_the_same_queries_however_many_jobs_match(root, operations):
    def queries() -> dict[str, int]:
        counted = {}
        for choice in ("hold-expired", "failed-final", "cancel-unacknowledged", "vanished-worker"):
            with CaptureQueriesContext(connection) as captured:
                assert root.get(CHANGELIST, {"attention": choice}).status_code == 200
            counted[choice] = len(captured)
        return counted

    store = DurableJobStore(actor="w", lease_seconds=3600)
    store.fail(claimed(store, "tests.hold", "f0"), "boom")
    root.get(CHANGELIST)  # the session and content types, read once
    few = queries()
    for n in range(1, 15):
        store.fail(claimed(store, "tests.hold", f"f{n}"), "boom")
    assert queries() == few
