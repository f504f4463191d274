"""A failed attempt keeps its exception's class path and its traceback, bounded, on every database.

``fail(lease, exc)`` and ``record_outcomes([Outcome.failed(..., error_class=, traceback=)])`` write
them on the attempt's history row in the transaction that ends the attempt; a failure given as
text, and every other outcome, keeps them empty. The bound keeps the head and the tail of a long
traceback; ``record_outcomes`` refuses what a history row could not hold, writing nothing.
"""

from __future__ import annotations

import traceback

import pytest

from django_durable_jobs.models import Job, JobAttempt
from django_durable_jobs.rules.errors import InputInvalid
from django_durable_jobs.rules.outcome import (
    TRACEBACK_MAX_CHARS,
    error_class_path,
    failure_details,
    traceback_text,
)
from django_durable_jobs.rules.values import Outcome
from django_durable_jobs.store import DurableJobStore
from tests.support import submission

OP = "tracebacks.op"


class Refused(Exception):
    """An exception defined in a class, so its class path has a dotted qualname."""

    class Inner(ValueError):
        pass


def raised(error: BaseException) -> BaseException:
    """Return ``error`` after raising it from a frame of this module, with its traceback."""

    def deep_in_the_work():
        raise error

    try:
        deep_in_the_work()
    except BaseException as exc:  # noqa: BLE001 - the test wants it back
        return exc
    raise AssertionError("unreachable")


def chained(length: int) -> BaseException:
    """Return the last of ``length`` exceptions, each raised from the one before."""
    error = None
    for step in range(length):
        try:
            raise RuntimeError(f"step {step}") from error
        except RuntimeError as exc:
            error = exc
    return error


def only_attempt(job_id) -> JobAttempt:
    return JobAttempt.objects.get(job_id=job_id)


# -- the helpers, pure -----------------------------------------------------------------------------


def test_the_class_path_is_module_and_qualname():
    assert error_class_path(ValueError("x")) == "builtins.ValueError"
    assert error_class_path(Refused.Inner()) == f"{__name__}.Refused.Inner"
    assert error_class_path(InputInvalid("x")) == "django_durable_jobs.errors.InputInvalid"


def test_the_traceback_is_python_s_own_text_with_its_causes():
    try:
        try:
            raise KeyError("missing")
        except KeyError as cause:
            raise RuntimeError("could not go on") from cause
    except RuntimeError as exc:
        text = traceback_text(exc)
    assert text.startswith("Traceback (most recent call last):")
    assert "KeyError: 'missing'" in text
    assert "The above exception was the direct cause" in text
    assert text.rstrip().endswith("RuntimeError: could not go on")


def test_an_exception_never_raised_still_has_its_last_line():
    assert traceback_text(ValueError("boom")) == "ValueError: boom\n"


def test_a_long_traceback_keeps_its_head_and_its_tail_and_says_how_much_was_cut():
    error = chained(300)
    full = "".join(traceback.format_exception(error))
    assert len(full) > TRACEBACK_MAX_CHARS
    text = traceback_text(error)
    assert len(text) <= TRACEBACK_MAX_CHARS
    assert text.startswith("Traceback (most recent call last):")
    assert text.endswith("RuntimeError: step 299\n")
    assert "RuntimeError: step 0\n" in text
    head, marker, tail = text.partition(" characters cut …\n")
    head, _, count = head.rpartition("\n… ")
    assert marker and int(count) == len(full) - len(head) - len(tail)
    assert full.startswith(head) and full.endswith(tail)


def test_characters_no_column_holds_are_replaced():
    text = traceback_text(ValueError("nul\x00 and lone \ud800 surrogate"))
    assert "\x00" not in text
    text.encode("utf-8")  # no lone surrogate left
    assert "surrogate" in text


def test_a_failure_given_as_text_has_no_details():
    assert failure_details("upstream said no") == {}
    details = failure_details(raised(ValueError("bad")))
    assert details["error_class"] == "builtins.ValueError"
    assert "deep_in_the_work" in details["traceback"]


def test_outcomes_compare_equal_whatever_their_tracebacks():
    lease = object()
    with_details = Outcome.failed(lease, "x", error_class="builtins.ValueError", traceback="tb")
    assert with_details == Outcome.failed(lease, "x")
    assert (with_details.error_class, with_details.traceback) == ("builtins.ValueError", "tb")
    assert "tb" not in repr(with_details)


# -- fail() ----------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_fail_with_an_exception_keeps_its_class_and_traceback(store):
    job = store.defer(OP, submission(key="exc"))
    store.fail(store.claim(job.pk), raised(Refused.Inner("no such thing")))
    attempt = only_attempt(job.pk)
    assert (attempt.outcome, attempt.error) == ("failed", "Inner: no such thing")
    assert attempt.error_class == f"{__name__}.Refused.Inner"
    assert "deep_in_the_work" in attempt.traceback
    assert attempt.traceback.rstrip().endswith("Refused.Inner: no such thing")
    assert Job.objects.get(pk=job.pk).error == "Inner: no such thing"


@pytest.mark.django_db(transaction=True)
def test_fail_with_text_and_the_other_endings_keep_them_empty(store, clock):
    failed = store.defer(OP, submission(key="text"))
    store.fail(store.claim(failed.pk), "upstream said no")
    done = store.defer(OP, submission(key="done"))
    store.complete(store.claim(done.pk), {"ok": True})
    expired = store.defer(OP, submission(key="expired"))
    store.claim(expired.pk)
    clock.advance(store.lease_seconds + 1)
    store.fail(store.claim(expired.pk), "second try failed")  # the first ends interrupted
    rows = JobAttempt.objects.filter(job_id__in=[failed.pk, done.pk, expired.pk])
    assert {(a.outcome, a.error_class, a.traceback) for a in rows} == {
        ("failed", "", None),
        ("complete", "", None),
        ("interrupted", "", None),
    }


# -- record_outcomes -------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_record_outcomes_writes_each_failure_s_details_on_its_own_row(store):
    jobs = [store.defer(OP, submission({"n": n}, key=f"batch-{n}")) for n in range(3)]
    leases = [store.claim(job.pk) for job in jobs]
    tracebacks = [traceback_text(raised(KeyError(n))) for n in range(2)]
    recorded = store.record_outcomes(
        [
            Outcome.failed(
                leases[0], "KeyError: 0", error_class="builtins.KeyError", traceback=tracebacks[0]
            ),
            Outcome.completed(leases[1], '{"ok":true}'),
            Outcome.failed(
                leases[2], "KeyError: 1", error_class="builtins.KeyError", traceback=tracebacks[1]
            ),
        ]
    )
    assert [r.status for r in recorded] == ["failed", "complete", "failed"]
    details = [
        (a.outcome, a.error_class, a.traceback) for a in (only_attempt(job.pk) for job in jobs)
    ]
    assert details == [
        ("failed", "builtins.KeyError", tracebacks[0]),
        ("complete", "", None),
        ("failed", "builtins.KeyError", tracebacks[1]),
    ]


@pytest.mark.django_db(transaction=True)
def test_a_traceback_comes_back_exactly_as_written(store):
    job = store.defer(OP, submission(key="exact"))
    text = 'Traceback (most recent call last):\n  ünïcödé 🚀 "quotes" \\ back\\slash\n' * 50
    text += "x" * (TRACEBACK_MAX_CHARS - len(text))
    store.record_outcomes(
        [Outcome.failed(store.claim(job.pk), "E: x", error_class="a.E", traceback=text)]
    )
    assert only_attempt(job.pk).traceback == text


@pytest.mark.django_db(transaction=True)
def test_a_largest_traceback_from_fail_is_stored_whole(store):
    job = store.defer(OP, submission(key="largest"))
    error = chained(300)
    store.fail(store.claim(job.pk), error)
    assert only_attempt(job.pk).traceback == traceback_text(error)


@pytest.mark.parametrize(
    "details",
    [
        {"error_class": "x" * 256},
        {"error_class": None},
        {"traceback": "x" * (TRACEBACK_MAX_CHARS + 1)},
        {"traceback": b"bytes"},
        {"traceback": "nul\x00byte"},
        {"traceback": "lone \ud800 surrogate"},
    ],
    ids=["long-class", "class-none", "long-traceback", "bytes", "nul", "surrogate"],
)
@pytest.mark.django_db(transaction=True)
def test_details_a_row_could_not_hold_are_dropped_from_that_failure_alone(
    store: DurableJobStore, details
):
    # A flush must not lose its other outcomes: the failure is kept, without the details.
    good = store.defer(OP, submission(key="good"))
    bad = store.defer(OP, submission(key="bad"))
    leases = [store.claim(good.pk), store.claim(bad.pk)]
    outcomes = [Outcome.failed(leases[0], "fine"), Outcome.failed(leases[1], "E: x", **details)]
    recorded = store.record_outcomes(outcomes)
    assert [r.status for r in recorded] == ["failed", "failed"]
    assert [r.outcome for r in recorded] == outcomes
    assert Job.objects.get(pk=good.pk).error == "fine"
    assert Job.objects.get(pk=bad.pk).error == "E: x"
    attempt = only_attempt(bad.pk)
    assert (attempt.error, attempt.error_class, attempt.traceback) == ("E: x", "", None)
