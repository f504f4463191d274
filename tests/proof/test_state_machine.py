"""The model-based test of the store (issue 21): three clients against a pure model.

A Hypothesis ``RuleBasedStateMachine`` drives the real ``DurableJobStore`` from three clients
(three owner ids, one ``FakeClock``, leases of 10 s) through every call that
changes a job: submissions, claims, owner writes under fresh, stale and foreign leases,
batched outcomes, releases, requests, atomic retries and outcomes, and scheduler passes. Before
each call ``tests.proof.model`` predicts its result or its exact refusal; a refused call must
change nothing in the database; after every step every job is compared with the model.

The bounded profile runs in ``make test``; ``DURABLE_JOBS_PROOF=long`` (``make proof``) runs
twenty times as many examples. ``DURABLE_JOBS_PROOF_SEED`` replays a run; the seed is printed
and named in every failure. The number of steps run is written to
``test-output/proof/state-machine-<db>.json``.
"""

from __future__ import annotations

import json
import os
import platform
import random
import time
import uuid

import django
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import seed as use_seed
from hypothesis.stateful import run_state_machine_as_test

from django_durable_jobs.models import Job
from django_durable_jobs.store import DurableJobStore, Submission
from tests.proof.machine_rules import STATS, StoreMachine, fresh_uuid
from tests.settings import TEST_DB, TEST_OUTPUT_DIR
from tests.support import FakeClock

pytestmark = [pytest.mark.proof, pytest.mark.django_db(transaction=True)]

LONG = os.environ.get("DURABLE_JOBS_PROOF") == "long"
# Examples of the bounded profile, sized for at most 40 s on each database in make test. Measured
# with the machine's load average at 6-9 (two cores, several suites at once): 60 examples ran in
# 15-26 s on SQLite, 30 in 18 s on PostgreSQL and 19 s on MariaDB (40 took 35 s on PostgreSQL);
# a step costs 15-25 ms there, mostly queries (the comparison after each step, db_state()
# around each refusal). The record's "examples" counts every machine Hypothesis built, more
# than max_examples.
BOUNDED = {"sqlite": 60, "postgresql": 30, "mariadb": 30}
EXAMPLES = BOUNDED.get(TEST_DB, 30) * (20 if LONG else 1)
STEPS = 80 if LONG else 40
SEED = int(os.environ.get("DURABLE_JOBS_PROOF_SEED") or random.randrange(2**32))


def test_store_agrees_with_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call of three clients does what the model predicts, and refusals change nothing."""
    monkeypatch.setattr(uuid, "uuid4", fresh_uuid)
    print(f"state machine: seed {SEED} (replay with DURABLE_JOBS_PROOF_SEED={SEED})")
    STATS.clear()
    started = time.monotonic()
    machine = use_seed(SEED)(StoreMachine)
    try:
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=EXAMPLES,
                stateful_step_count=STEPS,
                deadline=None,
                print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
    except BaseException as exc:
        exc.add_note(f"replay with DURABLE_JOBS_PROOF_SEED={SEED}")
        raise
    finally:
        _record(time.monotonic() - started)
    assert STATS["steps"] > 0 and STATS["examples"] > 0


def _record(seconds: float) -> None:
    """Write how many examples and steps ran, so the closing note can report them."""
    folder = TEST_OUTPUT_DIR / "proof"
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "db": TEST_DB,
        "django": django.get_version(),
        "python": platform.python_version(),
        "profile": "long" if LONG else "bounded",
        "examples": STATS["examples"],
        "steps": STATS["steps"],
        "refusals": STATS["refusals"],
        "seed": SEED,
        "seconds": round(seconds, 1),
        "refused_by_code": {k[8:]: v for k, v in STATS.items() if k.startswith("refused ")},
        "rules": {k: v for k, v in sorted(STATS.items()) if k.startswith("rule ")},
    }
    (folder / f"state-machine-{TEST_DB}.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"state machine on {TEST_DB}: {record['steps']} steps in {record['examples']} examples")


def test_a_released_retry_request_does_not_outlive_the_next_claim() -> None:
    """A claim that starts a new attempt leaves no retry request behind on the running job.

    Found by the state machine: ``release`` handed an expired, retry-requested first attempt
    back to pending with its retry request, and the one-statement claim of pending work kept it
    on the new attempt (the row-by-row path cleared it). The request then outlived the attempt
    that carried it out: when that attempt's lease expired, a job of an ``on_expired="hold"``
    operation was taken again by itself instead of being left for a person. ``release`` now
    clears the request of a job it makes pending.
    """
    clock = FakeClock()
    store = DurableJobStore(actor="worker-a", lease_seconds=10, clock=clock)
    lease = store.insert("tests.hold", submission=Submission(None, None, '{"n":1}'))
    clock.advance(11)
    assert store.request_retry(lease.job_id)  # the attempt expired: a person asks again
    assert store.release([lease]) == 1  # its worker, stopping, hands the claim back
    (claimed,) = store.claim_next(resume_expired=())
    assert claimed.job_id == lease.job_id
    clock.advance(11)
    assert store.claim_next(resume_expired=()) == [], "a held job was taken again by itself"
    assert Job.objects.get(pk=lease.job_id).retry_requested_at is None


def test_release_skips_a_lease_given_twice() -> None:
    """``release`` hands a claim back once however often its lease is listed.

    Found while modelling ``release``: ``record_outcomes`` answers a repeated lease with one
    outcome and one ``LeaseLost``, but ``release`` counted the repeated lease twice, matched one
    row, and refused everything with a lost lease ("Rows changed under their locks"), the job
    still held by the caller.
    """
    clock = FakeClock()
    store = DurableJobStore(actor="worker-a", lease_seconds=10, clock=clock)
    lease = store.insert("tests.hold", submission=Submission(None, None, '{"n":1}'))
    assert store.release([lease, lease]) == 1
    assert Job.objects.get(pk=lease.job_id).status == "pending"
