"""The chaos checker catches every violation it claims to prove: hand-made runs, one fault each.

A small run that keeps every property (a domain job reclaimed once, a plain job, three ticks)
passes; each test then breaks one property the way a real bug would (a second domain row, a
completion by the wrong attempt, a missing interrupted attempt, a lost tick, a write accepted
after a takeover, ...) and asserts the checker names that property, with evidence. A checker
that cannot fail would make the chaos run prove nothing.
"""

from __future__ import annotations

import copy
import json
import uuid

import pytest

from tests.chaos.checker import DOMAIN, PLAIN, TICK, RunData, check, read_reports

pytestmark = pytest.mark.proof

A, B = str(uuid.uuid4()), str(uuid.uuid4())
T1, T2, T3 = (str(uuid.uuid4()) for _ in range(3))
W1, W2, W3 = "owner-1", "owner-2", "owner-3"


def audit(seq, job, old, new, at):
    """Return an audit row: ``old`` and ``new`` are (epoch, owner, status, result present)."""
    old = old or (None, None, None, None)
    return {
        "seq": seq,
        "job_id": job,
        "old_epoch": old[0],
        "old_owner": old[1],
        "old_status": old[2],
        "old_result": old[3],
        "new_epoch": new[0],
        "new_owner": new[1],
        "new_status": new[2],
        "new_result": new[3],
        "db_at": at,
    }


def job(job_id, operation, epoch, owner, status="complete", key=None, result=None):
    if result is None:
        result = {"epoch": epoch, "owner": owner}
    return {
        "id": job_id,
        "operation": operation,
        "status": status,
        "fencing_epoch": epoch,
        "owner_id": owner,
        "result": json.dumps(result),
        "error": None,
        "idempotency_key": key or job_id,
        "attempts": epoch,
    }


def write(kind, job_id, epoch, owner, accepted, at):
    return {
        "kind": kind,
        "job_id": job_id,
        "epoch": epoch,
        "owner_id": owner,
        "accepted": accepted,
        "at": at,
    }


def good_run() -> RunData:
    """Return a run that keeps every property: A reclaimed from W1 by W2, B and ticks by W1."""
    pending = (0, None, "pending", False)
    rows = [
        audit(1, A, None, pending, 1.0),
        audit(2, B, None, pending, 1.0),
        audit(3, A, pending, (1, W1, "running", False), 10.0),
        audit(4, B, pending, (1, W1, "running", False), 11.0),
        audit(5, A, (1, W1, "running", False), (2, W2, "running", False), 20.0),
        audit(6, A, (2, W2, "running", False), (2, W2, "complete", True), 21.0),
        audit(7, B, (1, W1, "running", False), (1, W1, "complete", True), 16.0),
    ]
    ticks = []
    seq = 8
    for n, tick in enumerate((T1, T2, T3), start=1):
        rows.append(audit(seq, tick, None, (0, None, "pending", False), 30.0 + n))
        rows.append(audit(seq + 1, tick, pending, (1, W1, "running", False), 30.1 + n))
        rows.append(
            audit(seq + 2, tick, (1, W1, "running", False), (1, W1, "complete", True), 30.2 + n)
        )
        seq += 3
        ticks.append(job(tick, TICK, 1, W1, key=f"schedule:beat:2026-01-01T00:00:0{n}Z"))
    return RunData(
        submitted={A: DOMAIN, B: PLAIN},
        jobs=[
            job(A, DOMAIN, 2, W2, result={"epoch": 2, "owner": W2, "row": 1}),
            job(B, PLAIN, 1, W1),
            *ticks,
        ],
        attempts=[
            {"job_id": A, "epoch": 1, "owner_id": W1, "outcome": "interrupted"},
            {"job_id": A, "epoch": 2, "owner_id": W2, "outcome": "complete"},
            {"job_id": B, "epoch": 1, "owner_id": W1, "outcome": "complete"},
            *(
                {"job_id": t, "epoch": 1, "owner_id": W1, "outcome": "complete"}
                for t in (T1, T2, T3)
            ),
        ],
        chaos_rows=[{"job_id": A, "epoch": 2, "owner_id": W2}],
        audit=rows,
        history=[
            write("checkpoint", A, 1, W1, True, 12.0),
            write("renew", A, 1, W1, True, 19.5),
            write("outcome", B, 1, W1, True, 15.9),
            write("complete_atomically", A, 2, W2, True, 20.9),
            write("renew", A, 1, W1, False, 25.0),  # W1 woke up after the takeover: refused
            write("outcome", A, 1, W1, False, 25.1),
        ],
        schedule_name="beat",
        schedule_every=1,
        reports=[
            {"job_id": A, "epoch": 1, "outcome": "lease-lost"},
            {"job_id": A, "epoch": 2, "outcome": "complete"},
            {"job_id": B, "epoch": 1, "outcome": "complete"},
        ],
    )


def violations(run: RunData) -> dict[str, list[str]]:
    report = check(run)
    found: dict[str, list[str]] = {}
    for v in report.violations:
        found.setdefault(v.property, []).append(v.evidence)
    assert set(found) == set(report.violation_counts)
    return found


def test_a_run_that_keeps_every_property_passes_with_counts_computed():
    report = check(good_run())
    assert report.ok, report.violations
    counts = report.counts
    assert (counts["jobs"], counts["ticks"], counts["complete"]) == (2, 3, 5)
    assert (counts["reclaims"], counts["interrupted_attempts"]) == (1, 1)
    assert (counts["stale_writes_refused"], counts["writes_accepted"]) == (2, 4)
    assert (counts["duplicates"], counts["lost"]) == (0, 0)


def test_a_job_that_did_not_complete_is_lost():
    run = good_run()
    run.jobs[1]["status"] = "failed"
    run.attempts[2]["outcome"] = "failed"
    run.audit[6]["new_status"] = "failed"
    found = violations(run)
    assert "complete" in found and "plain ended failed" in found["complete"][0]
    assert check(run).counts["lost"] == 1


def test_a_submitted_job_that_vanished_is_lost():
    run = good_run()
    del run.jobs[1]
    assert "is gone" in violations(run)["complete"][0]


def test_a_second_domain_row_is_a_duplicate():
    run = good_run()
    run.chaos_rows.append({"job_id": A, "epoch": 1, "owner_id": W1})  # the stale attempt's
    found = violations(run)
    assert list(found) == ["one-domain-row"] and "2 ChaosRows" in found["one-domain-row"][0]
    assert check(run).counts["duplicates"] == 1


def test_a_domain_row_from_another_attempt_than_the_completing_one():
    run = good_run()
    run.chaos_rows[0].update(epoch=1, owner_id=W1)
    assert "the job was completed at epoch 2" in violations(run)["one-domain-row"][0]


def test_a_domain_row_without_its_domain_job():
    run = good_run()
    run.chaos_rows.append({"job_id": B, "epoch": 1, "owner_id": W1})
    assert "for a chaos.plain job" in violations(run)["one-domain-row"][0]


def test_two_completed_attempts_of_one_job():
    run = good_run()
    run.attempts[0]["outcome"] = "complete"
    found = violations(run)
    assert "2 complete attempts" in found["completed-by-holder"][0]
    assert check(run).counts["duplicates"] == 1


def test_a_result_written_by_another_attempt_than_the_holder():
    run = good_run()
    run.jobs[0]["result"] = json.dumps({"epoch": 1, "owner": W1})
    assert "does not name the holder" in violations(run)["completed-by-holder"][0]


def test_a_completion_the_database_saw_from_a_superseded_epoch():
    run = good_run()
    # A completes at epoch 2 while the database had already moved the job to epoch 3.
    run.audit.insert(5, audit(5.5, A, (2, W2, "running", False), (3, W3, "running", False), 20.5))
    found = violations(run)
    assert "the job reached epoch 3" in found["completed-by-holder"][0]
    assert "changed status running->complete after epoch 3" in found["no-stale-write"][0]


def test_a_completion_applied_twice():
    run = good_run()
    run.audit.append(audit(99, B, (1, W1, "running", False), (1, W1, "complete", True), 17.0))
    assert "2 changes to complete" in violations(run)["completed-by-holder"][0]


def test_an_interrupted_attempt_that_was_not_recorded():
    run = good_run()
    del run.attempts[0]
    assert "missing [1]" in violations(run)["attempts-recorded"][0]


def test_an_attempt_row_for_an_epoch_never_claimed_or_by_another_owner():
    run = good_run()
    run.attempts.append({"job_id": B, "epoch": 7, "owner_id": W1, "outcome": "interrupted"})
    run.attempts[0]["owner_id"] = W3
    found = violations(run)["attempts-recorded"]
    assert any("never claimed [7]" in e for e in found)
    assert any("the database saw owner-1 claim it" in e for e in found)


def test_a_claim_the_attempt_history_does_not_match():
    run = good_run()
    run.jobs[1]["fencing_epoch"] = 2  # the row says two claims, the audit saw one
    assert "the audit saw claims at epochs [1]" in violations(run)["attempts-recorded"][0]


def test_a_missing_tick_and_a_tick_submitted_twice():
    run = good_run()
    run.jobs[3]["idempotency_key"] = "schedule:beat:2026-01-01T00:00:01Z"  # T2 repeats T1
    found = violations(run)["ticks-once"]
    assert any("2 jobs for tick" in e for e in found)
    assert any("0:00:02 after the tick before" in e for e in found)  # 00:02 is missing
    counts = check(run).counts
    assert (counts["duplicates"], counts["lost"]) == (1, 1)


def test_a_write_accepted_after_the_database_recorded_a_newer_epoch():
    run = good_run()
    run.history.append(write("outcome", A, 1, W1, True, 20.001))  # reclaimed at 20.0
    found = violations(run)["no-stale-write"]
    assert "after the database recorded a newer epoch (audit 5" in found[0]
    just_before = good_run()
    just_before.history.append(write("outcome", A, 1, W1, True, 19.999))
    assert check(just_before).ok


def test_a_write_accepted_from_an_owner_that_never_held_the_epoch():
    run = good_run()
    run.history.append(write("checkpoint", A, 2, W3, True, 20.5))
    assert "which the database saw claimed by owner-2" in violations(run)["no-stale-write"][0]


def test_from_the_audit_alone_a_stale_owner_changing_the_row():
    run = good_run()
    # After W2 took epoch 2 (audit 5), a write keeping W1's epoch 1 completes the row.
    stale = audit(5.5, A, (1, W1, "running", False), (1, W1, "complete", True), 20.2)
    run.audit.insert(5, stale)
    found = violations(run)["no-stale-write"]
    assert any("changed status running->complete after epoch 2 existed" in e for e in found)


def test_from_the_audit_alone_an_epoch_that_went_back():
    run = good_run()
    back = audit(5.5, A, (2, W2, "running", False), (1, W1, "running", False), 20.2)
    run.audit.insert(5, back)
    assert "the epoch went back to 1 after 2" in violations(run)["no-stale-write"][0]


def test_the_report_keeps_exact_counts_and_is_plain_data():
    run = good_run()
    extra = copy.deepcopy(run.chaos_rows) * 3
    run.chaos_rows += extra
    report = check(run)
    assert report.violation_counts == {"one-domain-row": 1}
    assert report.counts["duplicates"] == 3
    assert json.loads(json.dumps(report.as_dict()))["ok"] is False


def test_a_worker_that_reports_lease_lost_for_the_attempt_that_completed_the_job():
    run = good_run()
    run.reports.append({"job_id": B, "epoch": 1, "outcome": "lease-lost"})
    assert "the epoch that completed it" in violations(run)["reports-true"][0]


def test_a_worker_that_reports_complete_for_an_attempt_that_did_not_complete():
    run = good_run()
    run.reports.append({"job_id": A, "epoch": 1, "outcome": "complete"})
    assert "the job is complete at epoch 2" in violations(run)["reports-true"][0]


def test_reports_are_read_from_the_workers_log_lines(tmp_path):
    line = (
        "2026-12-02 07:21:04,055 INFO django_durable_jobs.worker: job "
        f"{A} chaos.domain attempt=1 epoch=1 outcome=lease-lost duration=1.863s error=x\n"
    )
    (tmp_path / "worker0-1.log").write_text(line)
    assert read_reports(tmp_path) == [{"job_id": A, "epoch": 1, "outcome": "lease-lost"}]
