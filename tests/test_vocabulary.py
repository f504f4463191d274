"""The vocabulary's pure rules (no database): ownership, proposals, claims, retries, requests.

Proves each rule of the assessment in its documented order on unsaved ``Job`` instances (terminal,
unclaimed, legacy-unknown, expired, current), with a Hypothesis property over arbitrary rows; that
``diagnose`` reports defective pending proposals and non-JSON results without hiding the row; and
that ``Submission.of`` and ``proposal_sha256`` produce canonical, stable text and hashes.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.rules.errors import InputInvalid
from django_durable_jobs.rules.values import Submission
from django_durable_jobs.rules.vocabulary import (
    OWNERSHIP_STATES,
    TERMINAL_STATUSES,
    AttemptOutcomeChoice,
    Ownership,
    RequestAnswer,
    WorkerState,
    assess_ownership,
    cancel_answer,
    claim_refusal,
    diagnose,
    is_authentic_pending,
    is_takeable,
    proposal_defect,
    proposal_sha256,
    retry_answer,
    retry_refusal,
    worker_state,
)
from tests.support import T0

PROPOSAL = '{"n":1}'
NOW = T0
LATER = T0 + timedelta(seconds=30)
EARLIER = T0 - timedelta(seconds=30)


def pending(**changes) -> Job:
    """Return an authentic pending row, as ``defer`` writes it, with ``changes`` applied."""
    fields = {
        "operation": "reports.rebuild",
        "scope": "s1",
        "idempotency_key": "k1",
        "status": JobStatus.PENDING,
        "proposal": PROPOSAL,
        "proposal_hash": proposal_sha256(PROPOSAL),
        "proposal_checked": True,  # the store checked it as it wrote the row
        "created_at": T0,
        "run_after": T0,
        "owner_id": None,
        "lease_expires_at": None,
        "fencing_epoch": 0,
        "attempts": 0,
    }
    fields.update(changes)
    return Job(**fields)


def running(**changes) -> Job:
    """Return a running row held by ``owner-1`` at epoch 1 until ``LATER``."""
    base = {
        "status": JobStatus.RUNNING,
        "owner_id": "owner-1",
        "lease_expires_at": LATER,
        "fencing_epoch": 1,
        "attempts": 1,
    }
    base.update(changes)
    return pending(**base)


# -- rule 1: terminal --------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["complete", "failed", "cancelled", "orphaned"])
def test_every_terminal_status_is_terminal_whatever_the_lease_says(status):
    assert assess_ownership(pending(status=status), NOW) == "terminal"
    live = running(status=status)
    assert assess_ownership(live, NOW) == "terminal"
    broken = running(status=status, owner_id=None, proposal="{", lease_expires_at=EARLIER)
    assert assess_ownership(broken, NOW) == "terminal"
    assert live.is_terminal is True


def test_the_terminal_statuses_are_exactly_the_documented_four():
    assert TERMINAL_STATUSES == {"complete", "failed", "cancelled", "orphaned"}
    assert set(JobStatus.values) == TERMINAL_STATUSES | {
        "pending",
        "waiting",
        "sleeping",
        "running",
    }


# -- rule 2: unclaimed ---------------------------------------------------------------------------


def test_an_authentic_pending_row_is_unclaimed():
    job = pending()
    assert is_authentic_pending(job) is True
    assert proposal_defect(job) is None
    assert assess_ownership(job, NOW) == "unclaimed"
    assert job.is_terminal is False


def test_unclaimed_does_not_depend_on_the_time():
    job = pending()
    for when in (EARLIER, NOW, LATER, NOW + timedelta(days=3650)):
        assert assess_ownership(job, when) == "unclaimed"


# -- rule 3: legacy-unknown ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "defect"),
    [
        ({"proposal": '{"n":'}, "does not match"),  # cut short after its hash was taken
        ({"proposal": "not json at all"}, "does not match"),
        ({"proposal_hash": "0" * 64}, "does not match"),
        ({"proposal_hash": ""}, "does not match"),
        ({"proposal": '{"n":2}'}, "does not match"),  # text changed after its hash was taken
        ({"proposal": None, "proposal_hash": ""}, "missing"),
        # Written outside the app: whatever the text and its hash, the app never checked it.
        ({"proposal_checked": None}, "not written by this app"),
        ({"proposal_checked": False}, "not written by this app"),
        (
            {
                "proposal": '{"n":',
                "proposal_hash": proposal_sha256('{"n":'),
                "proposal_checked": None,
            },
            "not written by this app",
        ),
    ],
    ids=[
        "truncated-json",
        "not-json",
        "zero-hash",
        "empty-hash",
        "edited-text",
        "missing",
        "unchecked",
        "checked-false",
        "imported-broken-json",
    ],
)
def test_a_pending_row_with_a_defective_proposal_is_legacy_unknown(changes, defect):
    job = pending(**changes)
    assert defect in proposal_defect(job)
    assert is_authentic_pending(job) is False
    assert assess_ownership(job, NOW) == "legacy-unknown"
    assert job.diagnostic_error.startswith("Defective pending row")
    assert defect in job.diagnostic_error


@pytest.mark.parametrize(
    "changes",
    [{"attempts": 1}, {"attempts": 3}, {"attempts": 2, "fencing_epoch": 2}],
    ids=["attempts-1", "attempts-3", "ran-at-epoch-2"],
)
def test_a_pending_row_that_ran_before_is_legacy_unknown(changes):
    job = pending(**changes)
    assert proposal_defect(job) is None
    assert is_authentic_pending(job) is False
    assert assess_ownership(job, NOW) == "legacy-unknown"


@pytest.mark.parametrize("epoch", [1, 7])
def test_a_released_pending_row_is_unclaimed_at_the_epoch_of_its_release(epoch):
    # A stopping worker hands back claims it never started: no attempt ran (attempts 0), and
    # the epoch stays where those claims put it, since epochs never go back.
    job = pending(fencing_epoch=epoch)
    assert is_authentic_pending(job) is True
    assert assess_ownership(job, NOW) == "unclaimed"


def test_a_pending_row_carrying_an_owner_or_a_lease_is_legacy_unknown():
    # Interpretation: this app never writes a pending row with an owner or a lease, so such a row's
    # ownership cannot be established; it is not "current" or "expired".
    assert assess_ownership(pending(owner_id="owner-1"), NOW) == "legacy-unknown"
    assert assess_ownership(pending(lease_expires_at=LATER), NOW) == "legacy-unknown"
    both = pending(owner_id="owner-1", lease_expires_at=LATER)
    assert assess_ownership(both, NOW) == "legacy-unknown"


@pytest.mark.parametrize("owner", [None, ""], ids=["null-owner", "empty-owner"])
def test_a_running_row_without_an_owner_is_legacy_unknown(owner):
    assert assess_ownership(running(owner_id=owner), NOW) == "legacy-unknown"
    assert assess_ownership(running(owner_id=owner, lease_expires_at=EARLIER), NOW) == (
        "legacy-unknown"
    )


def test_a_running_row_without_a_lease_is_legacy_unknown():
    assert assess_ownership(running(lease_expires_at=None), NOW) == "legacy-unknown"


def test_a_pending_proposal_that_json_text_would_refuse_is_defective():
    # The store refuses NaN/Infinity as "not valid JSON" on input (validation.json_text), and
    # only the store sets proposal_checked: an imported row with such text (its hash matching)
    # never passes as authentic.
    for text in ('{"n":NaN}', "[" * 65 + "]" * 65, "[" * 100_000 + "]" * 100_000):
        job = pending(proposal=text, proposal_hash=proposal_sha256(text), proposal_checked=None)
        assert "not written by this app" in proposal_defect(job)
        assert assess_ownership(job, NOW) == "legacy-unknown"


def test_a_checked_proposal_changed_outside_the_app_is_diagnosed_and_fails_its_attempt():
    # Someone rewrote the text and its hash and kept the flag: the flag vouches for the JSON, so
    # both assessments (SQL and Python) agree the row is unclaimed; the diagnostic says what
    # happened, and the worker's attempt fails on the text it cannot read.
    text = "[" * 65 + "]" * 65
    job = pending(proposal=text, proposal_hash=proposal_sha256(text))
    assert proposal_defect(job) is None
    assert assess_ownership(job, NOW) == "unclaimed"
    assert "changed outside the app" in job.diagnostic_error


# -- rules 4 and 5: expired and current ----------------------------------------------------------


def test_a_lease_is_expired_at_exactly_its_expiry_instant():
    job = running(lease_expires_at=NOW)
    assert assess_ownership(job, NOW) == "expired"
    assert assess_ownership(job, NOW - timedelta(microseconds=1)) == "current"


def test_a_lease_is_expired_after_its_expiry():
    job = running(lease_expires_at=EARLIER)
    assert assess_ownership(job, NOW) == "expired"
    assert assess_ownership(job, NOW + timedelta(days=1)) == "expired"


def test_a_live_lease_is_current_whoever_holds_it():
    assert assess_ownership(running(), NOW) == "current"
    assert assess_ownership(running(owner_id="someone-else", fencing_epoch=9), NOW) == "current"


def test_a_running_row_with_a_defective_proposal_keeps_its_lease_assessment():
    # Rule 3 names defective *pending* rows; a running row's ownership is its lease.
    assert assess_ownership(running(proposal="{"), NOW) == "current"
    assert assess_ownership(running(proposal="{", lease_expires_at=EARLIER), NOW) == "expired"


def test_the_ownership_property_uses_the_assessment_until_the_store_sets_it():
    job = running(lease_expires_at=LATER + timedelta(days=36500))
    assert job.ownership == "current"
    job.ownership = "expired"
    assert job.ownership == "expired"
    assert running(lease_expires_at=EARLIER).ownership == "expired"


# -- property: arbitrary rows --------------------------------------------------------------------

OWNERS = st.sampled_from([None, "", "owner-1"])
LEASES = st.sampled_from([None, EARLIER, NOW, NOW + timedelta(microseconds=1), LATER])
PROPOSALS = st.sampled_from(["valid", "bad-json", "hash-mismatch", "missing"])
CHECKED = st.sampled_from([True, None, False])


def _row(status, owner, lease, epoch, attempts, proposal_kind, checked=True) -> Job:
    proposal, digest = PROPOSAL, proposal_sha256(PROPOSAL)
    if proposal_kind == "bad-json":
        proposal, digest = "{oops", proposal_sha256("{oops")
    elif proposal_kind == "hash-mismatch":
        digest = "f" * 64
    elif proposal_kind == "missing":
        proposal, digest = None, ""
    return pending(
        status=status,
        owner_id=owner,
        lease_expires_at=lease,
        fencing_epoch=epoch,
        attempts=attempts,
        proposal=proposal,
        proposal_hash=digest,
        proposal_checked=checked,
    )


@given(
    status=st.sampled_from(JobStatus.values),
    owner=OWNERS,
    lease=LEASES,
    epoch=st.sampled_from([0, 1, 2**63 - 1]),
    attempts=st.sampled_from([0, 1, 2**31 - 1]),
    proposal_kind=PROPOSALS,
    checked=CHECKED,
)
def test_the_assessment_follows_the_documented_rule_order(
    status, owner, lease, epoch, attempts, proposal_kind, checked
):
    job = _row(status, owner, lease, epoch, attempts, proposal_kind, checked)
    state = assess_ownership(job, NOW)
    assert state in OWNERSHIP_STATES
    assert OWNERSHIP_STATES == ("terminal", "unclaimed", "legacy-unknown", "expired", "current")

    authentic = (
        status == "pending"
        and not owner
        and lease is None
        and attempts == 0  # any epoch: a released claim keeps its epoch
        # The flag vouches for the JSON (the store set it after checking), the hash for the
        # text being unchanged since: text that is not JSON but matches its hash passes only
        # with the flag, which the app never sets on such text.
        and proposal_kind in ("valid", "bad-json")
        and checked is True
    )
    # A workflow's waiting job or a sleeping one: held by nobody, whatever its attempts.
    parked = (
        status in ("waiting", "sleeping")
        and not owner
        and lease is None
        and proposal_kind in ("valid", "bad-json")
        and checked is True
    )
    if status in TERMINAL_STATUSES:
        expected = "terminal"
    elif authentic or parked:
        expected = "unclaimed"
    elif not owner or lease is None or status != "running":
        expected = "legacy-unknown"
    elif lease <= NOW:
        expected = "expired"
    else:
        expected = "current"
    assert state == expected
    assert is_authentic_pending(job) is authentic
    if status in TERMINAL_STATUSES:
        assert state == "terminal"
    if state in ("expired", "current"):
        assert status == "running" and owner and lease is not None


# -- diagnose ------------------------------------------------------------------------------------


def test_a_healthy_row_has_no_diagnostic_error():
    assert diagnose(pending()) is None
    assert pending().diagnostic_error is None
    done = running(status=JobStatus.COMPLETE, result='{"ok":true}')
    assert done.diagnostic_error is None
    assert running(result=None).diagnostic_error is None


@pytest.mark.parametrize("status", ["running", "complete", "failed"])
def test_a_result_that_is_not_json_is_diagnosed_without_hiding_the_row(status):
    job = running(status=status, result="{half")
    assert diagnose(job) == "The stored result is not valid JSON."
    assert job.diagnostic_error == "The stored result is not valid JSON."
    assert assess_ownership(job, NOW) in ("terminal", "current")


def test_a_result_holding_nan_is_diagnosed_as_not_json():
    job = running(status=JobStatus.COMPLETE, result='{"score":NaN}')
    assert job.diagnostic_error == "The stored result is not valid JSON."


def test_a_defective_pending_proposal_is_reported_before_a_bad_result():
    job = pending(proposal="{", result="{")
    assert job.diagnostic_error == (
        "Defective pending row: the proposal does not match its stored SHA-256; it will not be "
        "claimed."
    )


# -- Submission.of and proposal_sha256 -----------------------------------------------------------


def test_submission_of_writes_canonical_json_with_sorted_keys_and_no_spaces():
    sub = Submission.of("s1", "k1", {"b": 1, "a": [1, 2.5, None], "c": {"z": True, "y": "€"}})
    assert sub.proposal == '{"a":[1,2.5,null],"b":1,"c":{"y":"€","z":true}}'
    assert (sub.scope, sub.idempotency_key) == ("s1", "k1")


def test_submission_of_gives_the_same_bytes_whatever_the_key_order():
    first = Submission.of(None, None, {"x": 1, "y": [3, 2], "nested": {"b": 0, "a": 0}})
    second = Submission.of(None, None, {"nested": {"a": 0, "b": 0}, "y": [3, 2], "x": 1})
    assert first == second
    assert first.proposal.encode("utf-8") == second.proposal.encode("utf-8")
    assert proposal_sha256(first.proposal) == proposal_sha256(second.proposal)


@pytest.mark.parametrize(
    "payload",
    [float("nan"), {"x": float("inf")}, [float("-inf")], {"when": object()}, {1, 2}],
    ids=["nan", "inf", "minus-inf", "object", "set"],
)
def test_submission_of_refuses_what_is_not_json(payload):
    with pytest.raises(InputInvalid) as excinfo:
        Submission.of("s1", "k1", payload)
    assert excinfo.value.code == "E_JOB_INPUT_INVALID"


def test_proposal_sha256_is_the_lowercase_hex_digest_of_the_utf8_bytes():
    assert proposal_sha256("abc") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )
    assert proposal_sha256("") == (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
    assert proposal_sha256("€") == hashlib.sha256(b"\xe2\x82\xac").hexdigest()
    assert proposal_sha256("€") != hashlib.sha256("€".encode("utf-16")).hexdigest()


# -- the claim, retry and request rules ----------------------------------------------------------


def test_only_unclaimed_and_expired_rows_can_be_claimed_by_id():
    assert claim_refusal(pending(), Ownership.UNCLAIMED) is None
    assert claim_refusal(running(lease_expires_at=EARLIER), Ownership.EXPIRED) is None
    live = running()
    assert "another owner holds a live lease" in claim_refusal(live, Ownership.CURRENT)
    done = running(status=JobStatus.FAILED)
    assert "it is failed; use retry" in claim_refusal(done, Ownership.TERMINAL)
    broken = pending(proposal="{")
    why = claim_refusal(broken, assess_ownership(broken, NOW))
    assert (
        why
        == f"Job {broken.pk} cannot be claimed: its proposal is defective (the proposal does not match its stored SHA-256)."
    )


def test_only_intact_rows_are_taken_by_a_claim():
    assert is_takeable(pending()) and is_takeable(running())
    assert not is_takeable(pending(attempts=1))  # a pending row that ran before
    assert not is_takeable(running(proposal_hash="0" * 64))


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_failed_and_cancelled_rows_can_be_retried(status):
    assert retry_refusal(running(status=status), NOW) is None
    assert retry_answer(running(status=status), NOW) == RequestAnswer.REQUESTED


def test_an_expired_lease_can_be_retried_and_a_live_one_has_not_ended():
    expired = running(lease_expires_at=EARLIER)
    assert retry_refusal(expired, NOW) is None
    assert retry_answer(expired, NOW) == RequestAnswer.REQUESTED
    assert retry_answer(running(), NOW) == RequestAnswer.NOT_ENDED
    assert retry_answer(pending(), NOW) == RequestAnswer.NOT_ENDED
    assert "has not ended" in retry_refusal(running(), NOW)


def test_a_complete_legacy_or_defective_row_is_never_retried():
    complete = running(status=JobStatus.COMPLETE)
    assert "complete and is never reopened" in retry_refusal(complete, NOW)
    orphaned = running(status=JobStatus.ORPHANED, owner_id=None)
    assert "no trustworthy ownership" in retry_refusal(orphaned, NOW)
    broken = running(status=JobStatus.FAILED, proposal=None)
    assert (
        retry_refusal(broken, NOW) == f"Job {broken.pk} cannot be retried: the proposal is missing."
    )


def test_a_second_retry_request_is_already_requested():
    asked = running(status=JobStatus.FAILED, retry_requested_at=EARLIER)
    assert retry_answer(asked, NOW) == RequestAnswer.ALREADY_REQUESTED
    assert retry_answer(None, NOW) == RequestAnswer.NOT_FOUND


def test_what_a_cancellation_request_does_depends_only_on_the_row():
    assert cancel_answer(pending()) == RequestAnswer.CANCELLED_NOW
    assert cancel_answer(running()) == RequestAnswer.REQUESTED
    assert cancel_answer(running(cancellation_requested_at=EARLIER)) == (
        RequestAnswer.ALREADY_REQUESTED
    )
    for status in TERMINAL_STATUSES:
        assert cancel_answer(running(status=status)) == RequestAnswer.ALREADY_ENDED
    assert cancel_answer(None) == RequestAnswer.NOT_FOUND


def test_accepted_answers_are_exactly_the_requests_that_took():
    accepted = {answer for answer in RequestAnswer if answer.accepted}
    assert accepted == {
        RequestAnswer.CANCELLED_NOW,
        RequestAnswer.REQUESTED,
        RequestAnswer.ALREADY_REQUESTED,
    }


def test_the_rules_read_plain_objects_without_a_model_or_a_database():
    row = SimpleNamespace(
        pk="plain",
        status="running",
        owner_id="owner-1",
        lease_expires_at=EARLIER,
        attempts=1,
        proposal=PROPOSAL,
        proposal_hash=proposal_sha256(PROPOSAL),
        result=None,
        cancellation_requested_at=None,
        retry_requested_at=None,
    )
    assert assess_ownership(row, NOW) == Ownership.EXPIRED
    assert retry_answer(row, NOW) == RequestAnswer.REQUESTED
    assert cancel_answer(row) == RequestAnswer.REQUESTED
    assert diagnose(row) is None


def test_a_worker_is_alive_until_its_heartbeat_is_older_than_its_lease():
    beat = T0
    assert worker_state(None, beat, 30.0, beat + timedelta(seconds=30)) == WorkerState.ALIVE
    assert worker_state(None, beat, 30.0, beat + timedelta(seconds=31)) == WorkerState.STALE
    assert worker_state(beat, beat, 30.0, beat + timedelta(days=1)) == WorkerState.STOPPED


def test_every_state_word_is_spelled_once_as_an_enum_value():
    assert OWNERSHIP_STATES == tuple(Ownership)
    assert set(JobStatus.values) >= {str(s) for s in TERMINAL_STATUSES}
    assert set(AttemptOutcomeChoice.values) == {
        "complete",
        "failed",
        "cancelled",
        "interrupted",
        "released",
        "slept",
    }
