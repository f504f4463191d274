"""``manage.py jobs stats``: the snapshot as text and as JSON; ``jobs list --order``."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from django_durable_jobs.stats import snapshot
from django_durable_jobs.store import DurableJobStore
from tests.support import FakeClock, db_state, in_one_window, submission

pytestmark = pytest.mark.django_db(transaction=True)  # the store commits its own writes
OP = "tests.noop"


def jobs(*args: str) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def work():
    """A job due in an hour (queue "later"), one that failed for good, one held by a worker
    that vanished (its lease expired an hour ago), in scopes red and blue."""
    now = timezone.now()
    past = FakeClock(now=now - timedelta(hours=1))
    gone = DurableJobStore(scope="red", actor="gone", lease_seconds=10, clock=past)
    gone.register_worker(concurrency=1)
    gone.claim(gone.defer(OP, submission({"i": 1})).pk)
    red = DurableJobStore(scope="red", actor="cli-test")
    red.defer(OP, submission({"i": 2}), queue="later", run_after=now + timedelta(hours=1))
    red.fail(red.claim(red.defer(OP, submission({"i": 3})).pk), "boom")
    blue = DurableJobStore(scope="blue", actor="cli-test")
    blue.defer("tests.blue_only", submission({"i": 4}), run_after=now + timedelta(hours=1))


def _same(data: dict) -> dict:
    """Return ``data`` without what moves with the clock: the time taken, the buckets' starts."""
    data = dict(data, taken_at=None)
    for key in ("history_per_minute", "history_per_hour"):
        data[key] = [dict(b, start=None) for b in data[key]]
    return data


@pytest.mark.parametrize("scope", [None, "red"])
def test_json_is_the_snapshot(work, scope):
    args = ["stats", "--json"] + (["--scope", scope] if scope else [])
    in_one_window(60, margin=5)  # both reads in one minute: the same per-minute buckets
    printed = json.loads(jobs(*args))
    assert _same(printed) == _same(snapshot(scope=scope).as_dict())
    assert printed["scope"] == scope


def test_text_shows_queues_workers_and_what_needs_attention(work):
    text = jobs("stats", "--scope", "red")
    assert text.startswith("Jobs of scope red at ")
    lines = text.splitlines()
    assert any(line.split()[:4] == ["later", "1", "0", "0"] for line in lines), text
    assert "Workers: 0 alive, 1 stale, 0 stopped; 1 vanished holding leases" in text
    assert "tests.blue_only" not in text
    attention = text[text.index("Needs attention") :]
    assert "Failed jobs with no retry left" in attention
    assert "?attention=failed-final&scope__exact=red" in attention
    assert "?attention=hold-expired&scope__exact=red" in attention
    assert "?attention=vanished-worker&scope__exact=red" in attention
    assert "cancel-unacknowledged" not in attention  # none: only kinds with jobs are listed


def test_an_empty_database_says_so(db):
    text = jobs("stats")
    assert (
        "No pending, running, waiting or sleeping jobs." in text
        and "Nothing needs attention." in text
    )


@pytest.mark.parametrize("scope", ["", "a\x00b", "x" * 201])
def test_a_bad_scope_is_refused_before_any_query(db, scope):
    before = db_state()
    with pytest.raises(CommandError, match="--scope must be"):
        jobs("stats", "--scope", scope)
    assert db_state() == before


def test_list_order_newest_by_default_oldest_on_request(db):
    clock = FakeClock(now=timezone.now() - timedelta(minutes=5))
    store = DurableJobStore(actor="cli-test", clock=clock)
    made = []
    for i in range(3):
        made.append(str(store.defer(OP, submission({"i": i})).pk))
        clock.advance(1)

    def listed(*extra: str) -> list[str]:
        return [row["id"] for row in json.loads(jobs("list", "--json", *extra))]

    assert listed() == made[::-1] == listed("--order", "newest")
    assert listed("--order", "oldest") == made  # the REST API's GET /jobs order
    with pytest.raises(CommandError, match="--order must be one of newest, oldest"):
        call_command("jobs", "list", order="sideways", stdout=StringIO())


def test_text_shows_waiting_and_sleeping_jobs_per_queue(db):
    from tests.test_stats import parked_work

    parked_work(FakeClock(now=timezone.now() - timedelta(minutes=1)))
    text = jobs("stats")
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("queue"))
    assert header.split() == ["queue", "pending", "due", "running", "waiting", "sleeping", "lag"]
    flow = next(line for line in lines if line.startswith("flow "))
    nap = next(line for line in lines if line.startswith("nap "))
    assert flow.split()[:6] == ["flow", "1", "1", "0", "2", "0"]
    assert nap.split()[:6] == ["nap", "0", "1", "0", "0", "2"]  # one sleep is over: due
    assert any(line.split()[2:4] == ["waiting", "unclaimed"] for line in lines)
    assert any(line.split()[2:4] == ["sleeping", "unclaimed"] for line in lines)
    data = json.loads(jobs("stats", "--json"))
    assert {q["queue"]: q["waiting"] for q in data["queues"]} == {"flow": 2, "nap": 0}
