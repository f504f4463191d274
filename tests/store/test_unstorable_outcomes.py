"""One outcome that cannot be stored ends its own attempt and costs no other outcome of its flush.

What a job returns is made storable or refused by one rule (``validation.json_text``), the same
for a result, a proposal given as text, a payload given as a value and a checkpoint: a lone
surrogate is refused whether it arrives raw (``"\\udc80"`` in a Python string, as ``os.listdir``
hands out undecodable file names) or as a JSON escape (``"\\ud800"`` in the text). In a batched
flush (``record_outcomes``, what the worker's completer calls) a result refused by that rule
fails its own attempt with a message saying why; every other outcome is recorded, each with its
history row.
"""

from __future__ import annotations

import os
import uuid

import pytest

from django_durable_jobs import submit
from django_durable_jobs.models import Job, JobAttempt
from django_durable_jobs.rules.errors import InputInvalid
from django_durable_jobs.rules.outcome import result_text
from django_durable_jobs.rules.registry import operation, unregister
from django_durable_jobs.rules.values import Claimed, Lease, Outcome
from django_durable_jobs.rules.vocabulary import proposal_sha256
from django_durable_jobs.store import DurableJobStore, Submission
from django_durable_jobs.worker import Worker, WorkerOptions
from django_durable_jobs.worker.completer import Completer, Finished
from django_durable_jobs.worker.held import Held
from tests.support import assert_refused, submission

pytestmark = pytest.mark.django_db(transaction=True)

OP = "tests.noop"
INVALID = "E_JOB_INPUT_INVALID"
# A file name os.listdir() returns for bytes that are not UTF-8 (PEP 383's surrogateescape).
UNDECODABLE = os.fsdecode(b"caf\xe9.txt")


def claimed(store: DurableJobStore, count: int) -> list[Lease]:
    jobs = [store.defer(OP, submission({"n": n}, key=f"k{n}")) for n in range(count)]
    return [store.claim(job.pk) for job in jobs]


def attempts_of(lease: Lease) -> list[tuple[str, str | None]]:
    rows = JobAttempt.objects.filter(job_id=lease.job_id).order_by("epoch")
    return list(rows.values_list("outcome", "error"))


# -- a batched flush --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("result_json", "why"),
    [
        ('"\\ud800"', "lone surrogate"),  # an escaped lone surrogate: the reported attack
        ('["ok", "\\udfff"]', "lone surrogate"),
        (f'"{UNDECODABLE}"', "lone surrogate"),  # raw, as os.listdir hands it out
        ("{not json", "not valid JSON"),
        ("NaN", "not valid JSON"),
        ("[" * 65 + "]" * 65, "too deeply nested"),
    ],
    ids=["escaped-high", "escaped-low-in-list", "raw", "not-json", "nan", "too-deep"],
)
def test_an_unstorable_result_fails_its_own_attempt_and_the_flush_records_the_rest(
    store, result_json, why
):
    good_before, bad, good_after, failing = claimed(store, 4)
    outcomes = [
        Outcome.completed(good_before, '{"rows":1}'),
        Outcome.completed(bad, result_json),
        Outcome.completed(good_after, "2"),
        Outcome.failed(failing, "RuntimeError: upstream said no"),
    ]
    recorded = store.record_outcomes(outcomes)

    assert [r.status for r in recorded] == ["complete", "failed", "complete", "failed"]
    assert [r.outcome for r in recorded] == outcomes  # each answer is for the outcome given
    assert Job.objects.get(pk=good_before.job_id).result == '{"rows":1}'
    assert Job.objects.get(pk=good_after.job_id).result == "2"
    row = Job.objects.get(pk=bad.job_id)
    assert (row.status, row.result, row.owner_id) == ("failed", None, store.owner_id)
    assert row.error.startswith("The executor's result was refused: ")
    assert why in row.error and recorded[1].error == row.error
    for lease, outcome in [(good_before, "complete"), (bad, "failed"), (good_after, "complete")]:
        assert [o for o, _ in attempts_of(lease)] == [outcome]
    assert attempts_of(failing) == [("failed", "RuntimeError: upstream said no")]


@pytest.mark.parametrize(
    ("message", "stored"),
    [
        ("   ", "The attempt failed without a message saying why."),
        ("broken \udc80 bytes", "broken ? bytes"),
        ("nul \x00 byte", "nul \ufffd byte"),
        ("x" * 1_048_577, "x" * 9_999 + "…"),
    ],
    ids=["blank", "surrogate", "nul", "over-the-cap"],
)
def test_an_unstorable_failure_message_is_made_storable_for_its_attempt_alone(
    store, message, stored
):
    good, bad = claimed(store, 2)
    recorded = store.record_outcomes(
        [Outcome.completed(good, "null"), Outcome.failed(bad, message, error_class="x.Y")]
    )
    assert [r.status for r in recorded] == ["complete", "failed"]
    row = Job.objects.get(pk=bad.job_id)
    assert row.error == stored and recorded[1].error == stored
    attempt = JobAttempt.objects.get(job_id=bad.job_id)
    assert (attempt.error, attempt.error_class) == (stored, "x.Y")
    assert Job.objects.get(pk=good.job_id).status == "complete"


def test_an_escaped_surrogate_pair_is_one_character_and_is_stored(store):
    (lease,) = claimed(store, 1)
    [recorded] = store.record_outcomes([Outcome.completed(lease, '"\\ud83d\\ude00"')])
    assert recorded.status == "complete"
    assert Job.objects.get(pk=lease.job_id).result == '"\\ud83d\\ude00"'


# -- the worker -------------------------------------------------------------------------------------


def test_a_worker_records_every_other_job_of_a_flush_with_an_unstorable_result():
    """A job returning an os.listdir()-style name, and one echoing an escaped lone surrogate
    from an input stored before this rule, fail alone; the jobs around them complete."""

    @operation("tests.listdir")
    def listdir(ctx, payload):
        return {"files": ["ok.txt", UNDECODABLE]}

    @operation("tests.echo")
    def echo(ctx, payload):
        return payload

    # An input the API took before the rule: the escape is ASCII, so it was stored.
    legacy = DurableJobStore().defer("tests.echo", Submission(None, "old", '{"p":"x"}'))
    Job.objects.filter(pk=legacy.pk).update(
        proposal='{"p":"\\ud800"}', proposal_hash=proposal_sha256('{"p":"\\ud800"}')
    )
    try:
        named = submit("tests.listdir", {})
        good = [submit(OP, {"n": n}) for n in range(6)]
        worker = Worker(WorkerOptions(burst=True, poll=0.05, lease_seconds=5, concurrency=4))
        assert worker.run() == 0
    finally:
        unregister("tests.listdir")
        unregister("tests.echo")

    assert {Job.objects.get(pk=j.pk).status for j in good} == {"complete"}
    for bad in (named, legacy):
        row = Job.objects.get(pk=bad.pk)
        assert row.status == "failed", row.error
        assert "result was refused" in row.error and "lone surrogate" in row.error
        assert JobAttempt.objects.filter(job_id=bad.pk, outcome="failed").count() == 1
    assert worker.outcomes == {"complete": 6, "failed": 2}
    assert not Job.objects.filter(status="running").exists()


def test_a_flush_refused_whole_is_written_outcome_by_outcome(store):
    """The completer's last defence: a batch the store refuses whole (here one value whose
    lease is not a Lease) is written one outcome at a time, so it costs only that outcome."""
    leases = claimed(store, 3)
    held = [Held(Claimed(lease, store.get(lease.job_id))) for lease in leases]
    broken = Outcome("not a lease", "complete", "null")
    reports = {}
    completer = Completer(
        store,
        on_recorded=lambda h, report: reports.__setitem__(h.lease.job_id, report),
        retry_until=lambda: False,
    )
    completer.flush(
        [
            Finished(held[0], Outcome.completed(leases[0], "1"), 0.1),
            Finished(held[1], broken, 0.1),
            Finished(held[2], Outcome.completed(leases[2], "3"), 0.1),
        ]
    )
    assert {k: r.outcome for k, r in reports.items()} == {
        leases[0].job_id: "complete",
        leases[1].job_id: "unrecorded",
        leases[2].job_id: "complete",
    }
    assert [Job.objects.get(pk=lease.job_id).status for lease in leases] == [
        "complete",
        "running",
        "complete",
    ]


# -- the same rule on every path --------------------------------------------------------------------


@pytest.mark.parametrize(
    "proposal",
    ['"\\ud800"', '{"k":"\\udc00"}', '["a\\ud83d"]', '{"\\udfff":1}'],
    ids=["high", "low", "unpaired-high-at-end", "in-a-key"],
)
def test_a_proposal_with_an_escaped_lone_surrogate_is_refused_like_a_payload(store, proposal):
    text = assert_refused(
        InputInvalid, INVALID, lambda: store.defer(OP, Submission(None, "t", proposal))
    )
    value = assert_refused(
        InputInvalid, INVALID, lambda: submit(OP, {"k": "\ud800"}, idempotency_key="v")
    )
    assert "lone surrogate" in text.message and "lone surrogate" in value.message


def test_a_checkpoint_with_an_escaped_lone_surrogate_is_refused(store):
    (lease,) = claimed(store, 1)
    assert_refused(InputInvalid, INVALID, lambda: store.checkpoint(lease, '{"at":"\\ud800"}'))


def test_escapes_that_are_not_surrogates_pass(store):
    for n, text in enumerate(['"\\\\ud800"', '"\\ud83d\\ude00"', '"\\u00e9"', '"\\ud7ff"']):
        job = store.defer(OP, Submission(None, f"fine-{n}", text))
        assert job.proposal == text


def test_complete_refuses_an_unstorable_result_and_writes_nothing(store):
    (lease,) = claimed(store, 1)
    assert_refused(InputInvalid, INVALID, lambda: store.complete(lease, {"f": UNDECODABLE}))
    with pytest.raises(InputInvalid, match="lone surrogate"):
        result_text([UNDECODABLE])


def test_an_unknown_lease_value_is_still_refused_with_the_whole_call(store):
    (lease,) = claimed(store, 1)
    bad = Outcome(str(uuid.uuid4()), "complete", "null")
    assert_refused(
        InputInvalid,
        INVALID,
        lambda: store.record_outcomes([Outcome.completed(lease, "1"), bad]),
    )
