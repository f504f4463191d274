"""The scheduler in real ``runjobs`` processes on the test database: no mocks, no fake clock.

The children read ``DURABLE_JOBS`` (schedules, quotas) from the environment through
``tests.settings_schedules``. Downtime is made by moving a row's ``last_tick_at`` and anchor
into the past, not by sleeping.
"""

from __future__ import annotations

import json
import signal
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import load_command_class
from django.utils import timezone

from django_durable_jobs.models import Job, JobStatus, Schedule, WorkerProcess
from django_durable_jobs.schedules import tick_key
from django_durable_jobs.store import DurableJobStore, Submission
from tests.schedule_rows import make_schedule
from tests.support import wait_for
from tests.worker_support import WorkerPool

pytestmark = pytest.mark.processes


@pytest.fixture
def pool_with(transactional_db, db_settings_env, tmp_path):
    """Return ``start(durable_jobs) -> WorkerPool`` whose children see that ``DURABLE_JOBS``."""
    pools: list[WorkerPool] = []

    def start(durable_jobs: dict) -> WorkerPool:
        env = {
            **db_settings_env,
            "DJANGO_SETTINGS_MODULE": "tests.settings_schedules",
            "DURABLE_JOBS_TEST_SETTINGS": json.dumps(durable_jobs),
        }
        pool = WorkerPool(env, tmp_path)
        pools.append(pool)
        return pool

    yield start
    for pool in pools:
        pool.__exit__(None, None, None)


def tick_times(name: str) -> list[datetime]:
    """Return the ticks of the schedule's jobs, parsed back from their idempotency keys."""
    prefix = f"schedule:{name}:"
    found = Job.objects.filter(idempotency_key__startswith=prefix).values_list(
        "idempotency_key", flat=True
    )
    return sorted(
        datetime.strptime(key[len(prefix) :], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        for key in found
    )


def stop(*workers) -> None:
    for worker in workers:
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait() == 0, worker.logs()


# -- exactly once ----------------------------------------------------------------------------------


def test_three_workers_enqueue_exactly_one_job_per_tick_and_miss_none(pool_with):
    beat = {"operation": "tests.tick", "every": 1, "catch_up": "all", "overlap": "allow"}
    pool = pool_with({"SCHEDULES": {"beat": beat}})
    workers = [pool.start("--concurrency", "2") for _ in range(3)]
    row = wait_for(
        lambda: Schedule.objects.filter(name="beat").first(),
        "the schedule's row",
        diagnose=lambda: "\n".join(w.logs() for w in workers),
    )
    end = row.anchor + timedelta(seconds=10)

    def ten_seconds_of_ticks():
        last = Schedule.objects.get(name="beat").last_tick_at
        return last is not None and last >= end

    wait_for(
        ten_seconds_of_ticks,
        "ten seconds of ticks",
        diagnose=lambda: "\n".join(w.logs() for w in workers),
    )
    stop(*workers)
    keys = list(
        Job.objects.filter(operation="tests.tick").values_list("idempotency_key", flat=True)
    )
    assert len(keys) == len(set(keys))  # one job per key
    ticks = tick_times("beat")
    assert len(ticks) == len(keys)
    assert ticks[0] == row.anchor + timedelta(seconds=1)  # the first tick after the row's creation
    assert ticks[-1] == Schedule.objects.get(name="beat").last_tick_at
    assert ticks == [ticks[0] + timedelta(seconds=k) for k in range(len(ticks))]  # none missing
    assert len(ticks) >= 10
    # Every process ran the scheduler: each reconciled and declared the schedule.
    for worker in workers:
        assert "schedules reconciled" in worker.stderr()
    declared = [json.loads(w.schedules) for w in WorkerProcess.objects.all()]
    assert all(set(d) == {"beat"} for d in declared) and len(declared) == 3


# -- catch-up after downtime -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "policy, expected_back",
    [("latest", [0]), ("all", [2, 1, 0]), ("none", [])],
    ids=["latest", "all-capped", "none"],
)
def test_catch_up_after_the_workers_were_down(pool_with, policy, expected_back):
    hourly = {
        "operation": "tests.tick",
        "every": 60,
        "catch_up": policy,
        "catch_up_limit": 3,
        "overlap": "allow",
    }
    pool = pool_with({"SCHEDULES": {"hourly": hourly}})
    code, first = pool.run("--burst")
    assert code == 0, first.logs()
    assert Job.objects.count() == 0  # the row is new: no tick fell due yet
    # The workers were down for five ticks; the next tick is 30 s away.
    anchor = timezone.now().replace(microsecond=0) - timedelta(seconds=30)
    Schedule.objects.filter(name="hourly").update(
        anchor=anchor, last_tick_at=anchor - timedelta(minutes=5)
    )
    code, second = pool.run("--burst")
    assert code == 0, second.logs()
    assert tick_times("hourly") == [anchor - timedelta(minutes=m) for m in expected_back]
    assert Schedule.objects.get(name="hourly").last_tick_at == anchor
    assert set(Job.objects.values_list("status", flat=True)) <= {JobStatus.COMPLETE}


# -- overlap ---------------------------------------------------------------------------------------


def test_overlap_skip_skips_ticks_while_the_last_job_runs_then_goes_on(pool_with, tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    (markers / "hold").write_text("")
    slow = {
        "operation": "tests.slow_tick",
        "every": 1,
        "overlap": "skip",
        "payload": {"markers": str(markers)},
    }
    pool = pool_with({"SCHEDULES": {"slow": slow}})
    worker = pool.start("--concurrency", "4")
    wait_for(lambda: any(markers.glob("started-*")), "the first tick's job to start")
    worker.wait_for_log("skipped, the previous job still runs")
    worker.wait_for_log("skipped, the previous job still runs")
    assert Job.objects.filter(operation="tests.slow_tick").count() == 1
    (markers / "hold").unlink()
    wait_for(
        lambda: Job.objects.filter(operation="tests.slow_tick").count() >= 2,
        "a tick enqueued after the job ended",
        diagnose=worker.logs,
    )
    stop(worker)
    first = Job.objects.filter(operation="tests.slow_tick").order_by("created_at").first()
    assert first.status == JobStatus.COMPLETE


def test_overlap_allow_enqueues_while_the_last_job_runs(pool_with, tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    (markers / "hold").write_text("")
    slow = {
        "operation": "tests.slow_tick",
        "every": 1,
        "overlap": "allow",
        "payload": {"markers": str(markers)},
    }
    pool = pool_with({"SCHEDULES": {"slow": slow}})
    worker = pool.start("--concurrency", "4")
    wait_for(lambda: len(list(markers.glob("started-*"))) >= 3, "three ticks' jobs running at once")
    (markers / "hold").unlink()
    stop(worker)
    assert "skipped" not in worker.stderr()


# -- pause, quotas ---------------------------------------------------------------------------------


def test_a_paused_schedule_enqueues_nothing_until_resumed(pool_with):
    beat = {"operation": "tests.tick", "every": 1, "catch_up": "none", "overlap": "allow"}
    pool = pool_with({"SCHEDULES": {"beat": beat}})
    worker = pool.start()
    wait_for(lambda: Job.objects.count() >= 1, "a first tick", diagnose=worker.logs)
    operator = DurableJobStore(actor="operator")
    operator.pause_schedule("beat")  # waits for a tick being enqueued: it locks the row too
    during = Job.objects.count()
    time.sleep(3)  # three passes: an absence can only be shown by waiting
    assert Job.objects.count() == during
    operator.resume_schedule("beat")
    wait_for(lambda: Job.objects.count() > during, "a tick after resuming", diagnose=worker.logs)
    stop(worker)
    ticks = tick_times("beat")
    assert len(ticks) == len(set(ticks))


def test_a_tick_refused_by_a_quota_is_enqueued_once_there_is_room(pool_with):
    beat = {
        "operation": "tests.tick",
        "every": 1,
        "scope": "tenant-q",
        "catch_up": "all",
        "overlap": "allow",
    }
    settings = {"SCHEDULES": {"beat": beat}, "SCOPE_QUOTAS": {"tenant-q": {"MAX_PENDING": 1}}}
    store = DurableJobStore(actor="test")
    # A pending job of an operation the worker does not claim fills the scope's one slot.
    blocker = store.defer("tests.noop", Submission.of("tenant-q", None, {}))
    pool = pool_with(settings)
    worker = pool.start("--operation", "tests.tick")
    row = wait_for(
        lambda: Schedule.objects.filter(name="beat").first(), "the row", diagnose=worker.logs
    )
    worker.wait_for_log("refused, tried again next pass")
    assert Schedule.objects.get().last_tick_at is None
    assert tick_times("beat") == []
    assert store.request_cancel(blocker.pk)  # pending: cancelled at once, room again
    first = row.anchor + timedelta(seconds=1)
    wait_for(
        lambda: (
            tick_key("beat", first) in set(Job.objects.values_list("idempotency_key", flat=True))
        ),
        "the refused tick, enqueued",
        diagnose=worker.logs,
    )
    stop(worker)
    ticks = tick_times("beat")
    assert ticks == [first + timedelta(seconds=k) for k in range(len(ticks))]


# -- broken rows -----------------------------------------------------------------------------------

BEAT = {"operation": "tests.tick", "every": 1, "catch_up": "none", "overlap": "allow"}


def another_host_declares(*names: str) -> WorkerProcess:
    """Return the row of a live worker on another host (newer tzdata, say) declaring ``names``."""
    now = timezone.now()
    return WorkerProcess.objects.create(
        owner_id="another-host",
        actor="worker@another-host:1",
        host="another-host",
        pid=1,
        started_at=now - timedelta(minutes=5),
        heartbeat_at=now,
        lease_seconds=3600,
        concurrency=1,
        schedules=json.dumps({name: "f" * 64 for name in names}),
    )


@pytest.mark.parametrize(
    "broken, words",
    [({"timezone": "Mars/Olympus"}, "'Mars/Olympus'"), ({"cron": "61 * * * *"}, "'61 * * * *'")],
    ids=["timezone", "cron"],
)
def test_a_broken_row_is_logged_once_and_the_other_schedules_keep_ticking(pool_with, broken, words):
    # A row this host cannot read, declared by a live worker elsewhere: not ours to repair.
    another_host_declares("m-broken")
    long_ago = timezone.now() - timedelta(hours=1)
    make_schedule(
        "m-broken",
        operation="tests.tick",
        **{"cron": "* * * * *", "created_at": long_ago, **broken},
    )
    pool = pool_with({"SCHEDULES": {"a-beat": BEAT, "z-beat": BEAT}})
    worker = pool.start()
    line = worker.wait_for_log("schedule m-broken is broken and skipped")
    assert "ERROR" in line and words in line and "declaration" in line, line
    # Both others tick, the one sorting after the broken row too, for several more passes.
    seen = len(tick_times("z-beat"))
    wait_for(
        lambda: len(tick_times("z-beat")) >= seen + 3 and len(tick_times("a-beat")) >= 3,
        "three more ticks of each other schedule",
        diagnose=worker.logs,
    )
    stop(worker)
    err = worker.stderr()
    assert err.count("schedule m-broken is broken and skipped") == 1, err
    assert "Traceback" not in err and "scheduler pass failed" not in err, err
    assert tick_times("m-broken") == []
    row = Schedule.objects.get(name="m-broken")
    assert (row.last_tick_at, row.removed_at) == (None, None)  # kept, not ticked, not removed


def test_a_worker_repairs_a_broken_row_it_declares_validly_and_ticks_it(pool_with):
    every_second = {"operation": "tests.tick", "cron": "* * * * * *", "catch_up": "none"}
    pool = pool_with({"SCHEDULES": {"fixed": {**every_second, "overlap": "allow"}}})
    code, first = pool.run("--burst")
    assert code == 0, first.logs()
    declared_hash = Schedule.objects.get(name="fixed").definition_hash
    Schedule.objects.filter(name="fixed").update(timezone="Mars/Olympus")  # hash unchanged
    worker = pool.start()
    worker.wait_for_log("repaired fixed")
    wait_for(
        lambda: len(tick_times("fixed")) >= 2, "ticks of the repaired row", diagnose=worker.logs
    )
    stop(worker)
    row = Schedule.objects.get(name="fixed")
    assert (row.timezone, row.definition_hash) == ("UTC", declared_hash)
    assert "is broken" not in worker.stderr()


# -- refusals at start, --no-schedules -------------------------------------------------------------


@pytest.mark.parametrize(
    "definition, words",
    [
        ({"operation": "tests.tick", "cron": "61 * * * *"}, "61 * * * *"),
        ({"operation": "tests.tick", "cron": "0 3 * * *", "timezone": "Mars/Olympus"}, "Mars"),
    ],
    ids=["cron", "timezone"],
)
@pytest.mark.parametrize("checks", [(), ("--skip-checks",)], ids=["checked", "skip-checks"])
def test_a_bad_schedule_refuses_the_start_and_writes_nothing(pool_with, definition, words, checks):
    # The system check (durable_jobs.E014) refuses first; without it, runjobs itself does.
    pool = pool_with({"SCHEDULES": {"nightly-sales": definition}})
    code, worker = pool.run(*checks)
    assert code != 0
    err = worker.stderr()
    assert "nightly-sales" in err and words in err, worker.logs()
    assert (Schedule.objects.count(), WorkerProcess.objects.count(), Job.objects.count()) == (
        0,
        0,
        0,
    )


def test_no_schedules_runs_no_scheduler(pool_with):
    pool = pool_with({"SCHEDULES": {"beat": {"operation": "tests.tick", "every": 1}}})
    code, worker = pool.run("--burst", "--no-schedules")
    assert code == 0, worker.logs()
    assert Schedule.objects.count() == 0
    assert "schedules reconciled" not in worker.stderr()
    assert WorkerProcess.objects.get().schedules == ""


def test_runjobs_help_documents_no_schedules():
    command = load_command_class("django_durable_jobs", "runjobs")
    text = command.create_parser("manage.py", "runjobs").format_help()
    assert "--no-schedules" in text
    assert "schedule" in command.help
