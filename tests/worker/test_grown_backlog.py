"""A real ``runjobs`` drains thousands of short jobs in grown batches and keeps every promise.

The buffer grows for operations seen to run short (``worker/pace.py``): after a claim that took
all it asked for, the worker claims again, up to 100 jobs held. These tests give it backlogs of
thousands of no-op jobs and check, from the rows it leaves, what the small prefetch protected:

* priority order within a scope, and fairness across scopes: each claim stamps its jobs'
  ``claimed_at``, so the rows tell which jobs each claim took, and in which order;
* every capacity limit: an operation's ``max_running``, ``max_running_per_key`` and a scope's
  ``MAX_RUNNING`` quota, sampled while the worker runs; a rate limit, by the starts per second
  the rows record.

Each test first checks that the buffer did grow (some claim took more than the threads and the
default prefetch), so it tests the grown batches, not the small ones.
"""

from __future__ import annotations

import json
import signal
from collections import Counter, defaultdict
from datetime import timedelta

import pytest

from django_durable_jobs import submit_many
from django_durable_jobs.models import Job, JobStatus
from tests.flow.support import most_in_window
from tests.support import wait_for
from tests.worker.limited import ops
from tests.worker_support import WorkerPool

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

THREADS = 4
SMALL = 2 * THREADS  # the most a claim takes while the buffer has not grown
QUOTA_SCOPE, QUOTA = "quota", 2
DRAIN_TIMEOUT = 120


@pytest.fixture
def workers(transactional_db, db_settings_env, tmp_path):
    """Start ``runjobs`` children that have the limited operations and the scope quota."""
    env = {
        **db_settings_env,
        "DJANGO_SETTINGS_MODULE": "tests.settings_limited",
        "DURABLE_JOBS_TEST_SETTINGS": json.dumps(
            {"SCOPE_QUOTAS": {QUOTA_SCOPE: {"MAX_RUNNING": QUOTA}}}
        ),
    }
    with ops.registered(), WorkerPool(env, tmp_path) as pool:
        yield pool


def _many(operation: str, count: int, **options) -> list:
    """Submit ``count`` distinct jobs of ``operation`` (at most 10,000 a call)."""
    tag = json.dumps(sorted(options.items()))
    payloads = [{"n": n, "of": tag} for n in range(count)]
    return [job.pk for job in submit_many(operation, payloads, **options)]


def _drain(workers: WorkerPool, ids: list, sample=None) -> None:
    """Run one worker until every job in ``ids`` is complete, calling ``sample()`` meanwhile."""
    # The default lease (30 s), not the 2 s other worker tests use to see leases expire: on a
    # loaded machine a flush of hundreds of outcomes can hold SQLite's write lock, and with it
    # the heartbeat's renewal, for longer than 2 s.
    worker = workers.start("--concurrency", str(THREADS), "--poll", "0.2", fast=False)
    left = Job.objects.filter(pk__in=ids).exclude(status=JobStatus.COMPLETE)

    def done() -> bool:
        if sample is not None:
            sample()
        return not left.exists()

    def left_over() -> str:
        rows = Counter(left.values_list("operation", "scope", "status"))
        return f"left: {dict(rows)}\n{worker.logs()[-3000:]}"

    wait_for(
        done,
        f"{len(ids)} jobs to complete",
        timeout=DRAIN_TIMEOUT,
        interval=0.01,
        diagnose=left_over,
    )
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.logs()
    assert Job.objects.filter(pk__in=ids, attempts=1).count() == len(ids)  # each ran once


def _claims(ids: list) -> list[list[Job]]:
    """Return the claims that took ``ids``, in order, each as its jobs (one ``claimed_at``)."""
    taken: dict = defaultdict(list)
    for row in Job.objects.filter(pk__in=ids).only("claimed_at", "scope", "priority"):
        taken[row.claimed_at].append(row)
    return [taken[at] for at in sorted(taken)]


def _grew(claims: list[list[Job]]) -> None:
    largest = max(len(claim) for claim in claims)
    assert largest > SMALL, f"no claim took more than {SMALL}: the buffer never grew"


def test_grown_batches_keep_priority_order_in_each_scope_and_take_scopes_in_turn(workers):
    """Two scopes of 1,200 jobs each, scope ``a``'s all of higher priority than ``b``'s.

    Claimed by priority alone, ``a`` would run first and ``b`` wait for it; taken in turns, each
    scope holds about half of what the first half of the drain claimed. Within a scope, no job
    is claimed after one of lower priority.
    """
    ids = [
        *_many("tests.noop", 600, scope="a", priority=3),
        *_many("tests.noop", 600, scope="a", priority=2),
        *_many("tests.noop", 600, scope="b", priority=1),
        *_many("tests.noop", 600, scope="b", priority=0),
    ]
    _drain(workers, ids)
    claims = _claims(ids)
    _grew(claims)

    for scope in ("a", "b"):
        order = [row.priority for claim in claims for row in claim if row.scope == scope]
        assert order == sorted(order, reverse=True), f"scope {scope} claimed out of priority order"

    half: Counter = Counter()
    for claim in claims:
        half.update(row.scope for row in claim)
        if half.total() >= len(ids) // 2:
            break
    assert min(half["a"], half["b"]) >= 0.35 * half.total(), half


def test_grown_batches_keep_every_capacity_limit(workers):
    """Beside 2,000 free no-op jobs: 120 capped at 3 running, 120 on 3 keys of one running
    each, 300 under a rate limit of 150 a second and 120 in a scope whose quota is 2 running.

    While the worker drains them, no sample of the rows finds more running than a limit
    allows, and no second holds more than 150 starts (claims) of the rated operation. The free
    jobs were claimed in grown batches.

    The running counts are sampled, not rebuilt from the rows' ``claimed_at`` and
    ``completed_at`` afterwards: those are the times of the transactions, whose commits (which
    the limits count by) come later, so spans rebuilt from them overlap where the running rows
    never did.
    """
    free = _many("tests.noop", 2000)
    capped = _many(ops.CAPPED, 120)
    keyed = [
        job.pk for job in submit_many(ops.KEYED, [{"n": n, "key": f"k{n % 3}"} for n in range(120)])
    ]
    rated = _many(ops.RATED, 300)
    quota = _many("tests.noop", 120, scope=QUOTA_SCOPE)
    running = Job.objects.filter(status=JobStatus.RUNNING)
    seen: Counter = Counter()

    def sample() -> None:
        now = Counter(running.values_list("operation", "scope", "proposal"))
        at_most = {
            "capped": sum(n for (op, _, _), n in now.items() if op == ops.CAPPED),
            "quota": sum(n for (_, scope, _), n in now.items() if scope == QUOTA_SCOPE),
        }
        keys = Counter(
            json.loads(payload)["key"] for (op, _, payload), n in now.items() if op == ops.KEYED
        )
        at_most["per key"] = max(keys.values(), default=0)
        for name, count in at_most.items():
            seen[name] = max(seen[name], count)

    _drain(workers, [*free, *capped, *keyed, *rated, *quota], sample)
    assert seen["capped"] <= ops.CAPPED_AT and seen["quota"] <= QUOTA, seen
    assert seen["per key"] <= 1, seen

    _grew(_claims(free))
    starts = list(Job.objects.filter(pk__in=rated).values_list("claimed_at", flat=True))
    assert most_in_window(starts, timedelta(seconds=1)) <= ops.RATE
