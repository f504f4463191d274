"""Six processes race on a rate limit and on a concurrency key: the limit holds, every job runs.

Each racer (``tests.flow.flow_child``) loops ``claim_batch`` until nothing of its operation is
pending, completing what it took. Checked afterwards from what the database stored:

* rate limit ``10/s``: no window ``(t - 1 s, t]`` holds more than 10 stored ``claimed_at``;
* ``max_running_per_key=2``: no key ever had more than 2 running rows, counted by the racers
  right after each claim and sampled by the parent throughout;
* every job was claimed once and ended ``complete``.

The checkers are proved able to fail: the same races with ``DURABLE_JOBS_TEST_SKIP_FLOW_CHECK=1``
(the racers admit everything) must show an excess.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta

import pytest
from django.db.models import Count

from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.store import DurableJobStore
from tests.flow.flow_child import KEYED, PER_KEY, RATED, FlowChildren, register
from tests.flow.support import most_in_window
from tests.race_child import CHILD_TIMEOUT
from tests.support import submission

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

RACERS = 6
SKIP = {"DURABLE_JOBS_TEST_SKIP_FLOW_CHECK": "1"}


@pytest.fixture(autouse=True)
def operations():
    from django_durable_jobs.rules import registry

    register()
    yield
    registry.unregister(RATED)
    registry.unregister(KEYED)


def _race(env: dict[str, str], operation: str, limit: int, hold: list[float]) -> tuple:
    """Run the racers; return their outcomes and the most running rows of one key sampled."""
    args = [
        {"operation": operation, "limit": limit, "hold": hold, "actor": f"racer-{i}"}
        for i in range(RACERS)
    ]
    most = 0
    with FlowChildren(env, args) as children:
        for child in children.children:
            assert child.read() == {"ready": True}
        start_at = time.time() + 0.3
        for child in children.children:
            child.send(f"go {start_at!r}")
        deadline = time.monotonic() + CHILD_TIMEOUT
        while any(child.proc.poll() is None for child in children.children):
            assert time.monotonic() < deadline, "the racers did not finish"
            running = Job.objects.filter(operation=operation, status=JobStatus.RUNNING)
            per_key = running.values("concurrency_key").annotate(n=Count("id"))
            most = max([most, *(row["n"] for row in per_key)])
            time.sleep(0.002)  # a sampling interval, not a wait for anything
        outcomes = [child.read() for child in children.children]
        for child in children.children:
            child.finish()
    for outcome in outcomes:
        assert "unexpected" not in outcome, outcome
    return outcomes, most


def _all_ran_once(outcomes: list[dict], ids: set[str]) -> None:
    claims = Counter(job_id for outcome in outcomes for job_id in outcome["claimed"])
    assert set(claims) == ids
    assert set(claims.values()) == {1}
    statuses = Job.objects.filter(pk__in=ids).values_list("status", flat=True)
    assert set(statuses) == {JobStatus.COMPLETE}


def _rated_backlog(total: int) -> set[str]:
    store = DurableJobStore(actor="parent")
    return {str(store.defer(RATED, submission({"i": i}, key=f"r-{i}")).pk) for i in range(total)}


def _keyed_backlog(per_key: int, keys: int) -> set[str]:
    store = DurableJobStore(actor="parent")
    ids = set()
    for k in range(keys):
        for i in range(per_key):
            job = store.defer(KEYED, submission({"customer": f"c{k}", "i": i}, key=f"k{k}-{i}"))
            Job.objects.filter(pk=job.pk).update(concurrency_key=f"c{k}")  # as submit fills it
            ids.add(str(job.pk))
    return ids


def _most_starts_per_second(ids: set[str]) -> int:
    starts = list(Job.objects.filter(pk__in=ids).values_list("claimed_at", flat=True))
    return most_in_window(starts, timedelta(seconds=1))


def test_six_processes_never_exceed_a_rate_limit(db_settings_env):
    ids = _rated_backlog(40)
    outcomes, _ = _race(db_settings_env, RATED, 3, [0.0, 0.01])
    _all_ran_once(outcomes, ids)
    assert _most_starts_per_second(ids) <= 10  # the declared 10/s


def test_six_processes_never_exceed_a_concurrency_key(db_settings_env):
    ids = _keyed_backlog(per_key=8, keys=3)
    outcomes, sampled = _race(db_settings_env, KEYED, 2, [0.02, 0.06])
    _all_ran_once(outcomes, ids)
    seen = max(outcome["most_per_key"] for outcome in outcomes)
    assert max(seen, sampled) <= PER_KEY
    assert seen == PER_KEY  # the race did fill a key: the check was exercised


def test_the_rate_checker_detects_an_excess_when_the_check_is_skipped(db_settings_env):
    ids = _rated_backlog(40)
    outcomes, _ = _race({**db_settings_env, **SKIP}, RATED, 3, [0.0, 0.01])
    _all_ran_once(outcomes, ids)
    assert _most_starts_per_second(ids) > 10


def test_the_key_checker_detects_an_excess_when_the_check_is_skipped(db_settings_env):
    ids = _keyed_backlog(per_key=8, keys=3)
    outcomes, sampled = _race({**db_settings_env, **SKIP}, KEYED, 2, [0.02, 0.06])
    _all_ran_once(outcomes, ids)
    seen = max(outcome["most_per_key"] for outcome in outcomes)
    assert max(seen, sampled) > PER_KEY
