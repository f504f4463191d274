"""How an attempt's end becomes an outcome and a report, without a database.

Proves: each way an executor can end maps to one ``Outcome`` (return → complete with the result
as canonical JSON, a result that cannot be stored → failed, JobCancelled → cancelled, any other
exception → failed with its message); ``report_recorded`` turns what ``record_outcomes`` did
into the report's words; the written words are the attempt history's own; the log line keeps its
``outcome=…`` form; ``ExecutionReport`` still names the report type, and ``AttemptEnd`` is a
deprecated alias of the words ``AttemptOutcomeChoice`` and ``Unwritten`` now carry.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from types import SimpleNamespace

import pytest

from django_durable_jobs.rules.errors import InputInvalid, JobCancelled, LeaseLost
from django_durable_jobs.rules.values import Claimed, Lease, Outcome, Recorded
from django_durable_jobs.rules.vocabulary import AttemptOutcomeChoice
from django_durable_jobs.worker import ExecutionReport, attempt
from django_durable_jobs.worker.reports import AttemptReport, Unwritten, log, report_recorded
from tests.support import T0


class Row:
    operation = "tests.op"
    attempts = 2


LEASE = Lease(uuid.uuid4(), "owner-1", 3, T0)
CLAIM = Claimed(LEASE, Row())


def _ended(executor) -> Outcome | None:
    """Return the outcome ``executor`` ends with, as a job thread turns it into one."""
    outcome, _ = attempt._call(executor, SimpleNamespace(lease=LEASE, completed=False))
    return outcome


def _raising(error: Exception):
    def executor(ctx):
        raise error

    return executor


def test_each_way_an_executor_ends_maps_to_one_outcome():
    assert _ended(lambda ctx: {"b": 1, "a": [1]}) == Outcome.completed(LEASE, '{"a":[1],"b":1}')
    assert _ended(_raising(JobCancelled())) == Outcome.stopped(LEASE)
    assert _ended(_raising(ValueError("bad"))) == Outcome.failed(LEASE, "ValueError: bad")
    refused = _ended(lambda ctx: object())
    assert refused.status == AttemptOutcomeChoice.FAILED
    assert refused.error.startswith("The executor's result was refused: ")


def _awaited(coroutine_function) -> Outcome | None:
    """Return the outcome an ``async def`` executor ends with, as the event loop's task does."""
    ctx = SimpleNamespace(lease=LEASE, completed=False)
    outcome, _ = asyncio.run(attempt._await(coroutine_function, ctx))
    return outcome


def test_an_async_executor_ends_as_a_function_does_and_cancelled_error_as_job_cancelled():
    async def returns(ctx):
        await asyncio.sleep(0)
        return {"b": 1, "a": [1]}

    async def raises(error: BaseException):
        await asyncio.sleep(0)
        raise error

    async def cancelled(ctx):
        asyncio.current_task().cancel()
        await asyncio.sleep(1)  # CancelledError here, at the next await

    assert _awaited(returns) == Outcome.completed(LEASE, '{"a":[1],"b":1}')
    assert _awaited(cancelled) == Outcome.stopped(LEASE)
    assert _awaited(lambda ctx: raises(JobCancelled())) == Outcome.stopped(LEASE)
    assert _awaited(lambda ctx: raises(ValueError("bad"))) == Outcome.failed(
        LEASE, "ValueError: bad"
    )
    with pytest.raises(KeyboardInterrupt):  # not the job's failure: it goes on up
        _awaited(lambda ctx: raises(KeyboardInterrupt()))


def test_the_written_ends_are_the_attempt_historys_words():
    with pytest.warns(DeprecationWarning, match="AttemptEnd is deprecated"):
        from django_durable_jobs.worker.reports import AttemptEnd
    for end in (AttemptEnd.COMPLETE, AttemptEnd.FAILED, AttemptEnd.CANCELLED, AttemptEnd.RELEASED):
        assert AttemptOutcomeChoice(end.value) == end
    assert {AttemptEnd.LEASE_LOST.value, AttemptEnd.UNRECORDED.value} == {
        "lease-lost",
        "unrecorded",
    }


def test_report_recorded_says_what_was_written_or_why_not():
    written = Outcome.failed(LEASE, "boom")
    report = report_recorded(CLAIM, Recorded(written, "failed", error="boom"), 1.5)
    assert report == AttemptReport(
        LEASE.job_id, "tests.op", 2, 3, AttemptOutcomeChoice.FAILED, 1.5, "boom"
    )
    assert report.outcome is AttemptOutcomeChoice.FAILED

    lost = report_recorded(CLAIM, Recorded(written, None, LeaseLost("taken over")), 0.1)
    assert (lost.outcome, lost.error) == (Unwritten.LEASE_LOST, "taken over")

    refused = report_recorded(CLAIM, Recorded(written, None, InputInvalid("no")), 0.1)
    assert refused.outcome is Unwritten.UNRECORDED


def test_the_log_line_keeps_its_form(caplog):
    report = AttemptReport.of(CLAIM, Unwritten.LEASE_LOST, 0.25, "taken over")
    with caplog.at_level(logging.INFO, logger="django_durable_jobs.worker"):
        log(report)
    assert caplog.messages == [
        f"job {LEASE.job_id} tests.op attempt=2 epoch=3 outcome=lease-lost duration=0.250s "
        f"error=taken over"
    ]
    assert report.outcome == "lease-lost"  # reports compare equal to their words


def test_execution_report_is_the_old_name_of_attempt_report():
    assert ExecutionReport is AttemptReport


def test_attempt_end_is_a_deprecated_alias_of_the_one_outcome_type():
    """The former enum's words are AttemptOutcomeChoice's (written) and Unwritten's."""
    import django_durable_jobs.worker as worker

    with pytest.warns(DeprecationWarning, match="AttemptEnd is deprecated"):
        alias = worker.AttemptEnd
    assert alias.FAILED is AttemptOutcomeChoice.FAILED
    assert alias.RELEASED is AttemptOutcomeChoice.RELEASED
    assert alias.LEASE_LOST is Unwritten.LEASE_LOST
    assert alias("lease-lost") is Unwritten.LEASE_LOST
    assert alias("complete") is AttemptOutcomeChoice.COMPLETE
    assert "AttemptEnd" not in worker.__all__
