"""Workflows under chaos: real ``runjobs`` processes SIGKILLed and restarted, one SIGSTOPped past
its lease and resumed, while fan-outs, fan-ins and chains of step-recording jobs run.

The harness and the checker are in ``tests/workflows/chaos_support.py`` (which says what each
property means); this test runs them on the test database and insists that the faults really
happened, so a run that injected nothing cannot pass.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from datetime import timedelta

import pytest

from tests.chaos import audit, checker
from tests.workflows import chaos_support

pytestmark = [pytest.mark.proof, pytest.mark.processes]

SEED = 20261204


@pytest.fixture
def borrowed(transactional_db, db_settings_env, tmp_path):
    """Yield the workers' env (the chaos settings, keeping a history in ``tmp_path``)."""
    audit.install()
    env = {
        **db_settings_env,
        "DJANGO_SETTINGS_MODULE": "tests.chaos.settings",
        "DURABLE_JOBS_TEST_SETTINGS": "{}",
        "DURABLE_JOBS_CHAOS_DIR": str(tmp_path / "run"),
    }
    yield env
    audit.remove()


# On a loaded machine the pause can miss its moment (the paused worker's attempts end, or
# nobody takes them over, before it resumes). Every run must keep every property; the run is
# made again, on emptied tables, until one also shows the paused worker's late writes refused.
RUNS_FOR_A_CAUGHT_PAUSE = 3


def test_workflows_survive_killed_and_paused_workers(borrowed, tmp_path):
    for attempt in range(RUNS_FOR_A_CAUGHT_PAUSE):
        run, counts, summary = one_chaos_run(borrowed, tmp_path / f"try{attempt}", SEED + attempt)
        caught = (
            counts["paused_late_step_refused"] > 0 and counts["paused_late_completion_refused"] > 0
        )
        if caught:
            break
        empty_the_tables()
    # The paused worker woke up to refusals: a step record and a completion, among others.
    assert counts["paused_late_step_refused"] > 0, summary
    assert counts["paused_late_completion_refused"] > 0, summary
    assert_the_checker_catches_each_violation(run)


def one_chaos_run(borrowed: dict, tmp_path, seed: int):
    """Run the workflows through the faults once; check every property; return the run."""
    folder = tmp_path / "run"
    folder.mkdir(parents=True)
    log = tmp_path / "steps.jsonl"
    env = {**borrowed, "DURABLE_JOBS_CHAOS_DIR": str(folder)}
    handles = chaos_support.submit_workflows(log)
    assert sum(len(h.jobs) for h in handles) == 2 * (chaos_support.FAN_OUT + 2) + 3 + 8

    chaos = chaos_support.WorkflowChaos(folder, env, log, seed=seed)
    try:
        drained = chaos.run(fault_seconds=15, kill_every=2, drain_timeout=90)
    finally:
        late = chaos.stop()
    notes = "\n".join(chaos.notes + chaos.fleet.exits)
    assert drained, notes
    assert late == [] and chaos.fleet.exits == [], notes

    from django.db import connections

    connections.close_all()
    run = chaos_support.load(folder, log, chaos.paused_pid)
    report = chaos_support.check(run)
    summary = "\n".join(checker_lines(report)) + "\n" + notes
    print(summary)  # shown with -s: what the run did
    assert report.ok, summary
    counts = report.counts
    assert counts["complete"] == counts["jobs"] == 2 * (chaos_support.FAN_OUT + 2) + 11, summary
    assert counts["releases"] == counts["children"], summary
    # The faults happened and hit the workflows mid-run.
    assert chaos.kills > 0 and chaos.fleet.done["pause"] == 1, summary
    assert counts["reclaims"] > 0 and counts["interrupted_attempts"] > 0, summary
    assert counts["steps_rerun_unrecorded"] > 0 and counts["steps_resumed"] > 0, summary
    return run, counts, summary


def empty_the_tables() -> None:
    """Remove a run's rows (test tables only), so the next run starts from nothing."""
    from django.db import connection

    from django_durable_jobs.models import Job, JobAttempt, JobDependency, JobStep, Workflow

    for model in (JobStep, JobAttempt, JobDependency):
        model.objects.all().delete()
    Job.objects.update(workflow=None)
    Job.objects.all().delete()
    Workflow.objects.all().delete()
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {audit.TABLE}")


def assert_the_checker_catches_each_violation(run: chaos_support.WorkflowRun) -> None:
    """Spoil a copy of the real run's evidence in one way at a time: the checker must say so."""
    uid = checker.uid
    jobs = {uid(j["id"]): j for j in run.jobs}
    merge = next(j for j in run.jobs if j["node"] == "merge")
    child = next(j for j in run.jobs if j["node"] == "c00")
    step = run.steps[0]
    late = next(r for r in run.history if r["pid"] == run.paused_pid and not r["accepted"])

    def spoiled(**changes) -> set[str]:
        report = chaos_support.check(replace(copy.deepcopy(run), **changes))
        return set(report.violation_counts)

    def with_job(job_id, **fields) -> list[dict]:
        return [{**j, **fields} if j["id"] == job_id else j for j in run.jobs]

    rerun = {"what": "step", "job": step["job_id"], "step": step["name"], "pid": 1, "t": 0}
    assert "step-once" in spoiled(log=[*run.log, {**rerun, "epoch": step["epoch"] + 1}])
    assert "step-once" in spoiled(log=[*run.log, {**rerun, "epoch": step["epoch"]}])
    after = checker.seconds(step["recorded_at"]) + 1
    assert "step-once" in spoiled(log=[*run.log, {**rerun, "epoch": step["epoch"] - 1, "t": after}])
    early = child["released_at"] - timedelta(milliseconds=1)
    assert "released-once" in spoiled(jobs=with_job(child["id"], released_at=early))
    again = next(
        a
        for a in run.audit
        if uid(a["job_id"]) == uid(child["id"]) and a["old_status"] == "waiting"
    )
    assert "released-once" in spoiled(audit=[*run.audit, {**again, "seq": 10**9}])
    result = json.loads(merge["result"])
    result["upstream"].pop(sorted(result["upstream"])[0])
    assert "fan-in" in spoiled(jobs=with_job(merge["id"], result=json.dumps(result)))
    assert "complete" in spoiled(jobs=with_job(child["id"], status="failed"))
    accepted = [{**r, "accepted": True} if r is late else r for r in run.history]
    assert {"stale-refused", "no-stale-write"} <= spoiled(history=accepted)
    assert uid(late["job_id"]) in jobs


def checker_lines(report) -> list[str]:
    lines = [f"counts: {report.counts}"]
    lines += [f"VIOLATION {v.property} {v.job_id}: {v.evidence}" for v in report.violations]
    return lines
