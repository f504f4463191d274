"""A failed attempt keeps its traceback, and its process logs it at WARNING, for tasks and operations.

The real ``runjobs`` (a subprocess) and ``JobManager`` (threads in this process) both store the
exception's class path and traceback on the failed attempt's history row and log the failure at
WARNING with the traceback; other endings log at INFO, without one.
"""

from __future__ import annotations

import logging
import uuid
from types import SimpleNamespace

import pytest

from django_durable_jobs import submit
from django_durable_jobs.manager import JobManager
from django_durable_jobs.models import JobAttempt
from django_durable_jobs.rules import validation
from django_durable_jobs.rules.outcome import traceback_text
from django_durable_jobs.rules.values import Claimed, Lease, Outcome, Recorded
from django_durable_jobs.rules.vocabulary import AttemptOutcomeChoice
from django_durable_jobs.worker import attempt
from django_durable_jobs.worker.reports import AttemptReport, log, report_recorded
from tests.support import submission, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

LOGGER = "django_durable_jobs.worker"
RAISING_LINE = 'raise RuntimeError(payload.get("message", "boom"))'  # tests/testapp/jobs.py


class _Row:
    operation = "tests.op"
    attempts = 1


LEASE = Lease(uuid.uuid4(), "owner-1", 1, None)
CLAIM = Claimed(LEASE, _Row())


def _raised() -> Exception:
    try:
        raise ValueError("bad input")
    except ValueError as exc:
        return exc


def _first_frame(traceback: str) -> str:
    return traceback.splitlines()[1]


# -- the rules, in this process --------------------------------------------------------------------


def test_an_executor_that_raised_gives_a_failure_with_class_and_traceback():
    outcome = Outcome.of_error(LEASE, _raised())
    assert (outcome.error, outcome.error_class) == ("ValueError: bad input", "builtins.ValueError")
    assert outcome.traceback.startswith("Traceback (most recent call last):")
    assert "in _raised" in outcome.traceback
    refused = Outcome.of_result(LEASE, object())  # failed, but nothing raised
    assert (refused.status, refused.error_class, refused.traceback) == ("failed", "", None)


def test_a_traceback_starts_at_the_job_code_and_keeps_the_apps_frames_below_it():
    def job(ctx):
        return ctx.payload["missing"]  # a KeyError raised in the job's code

    def job_calling_the_app(ctx):
        return validation.whole(
            "not a number", "count", 0, 10
        )  # raised inside the app, below the job

    for executor, name in ((job, "job"), (job_calling_the_app, "job_calling_the_app")):
        ctx = SimpleNamespace(lease=LEASE, payload={}, completed=False)
        outcome, error = attempt._call(executor, ctx)
        assert outcome.status == AttemptOutcomeChoice.FAILED
        text = traceback_text(error)
        assert _first_frame(text) == f'  File "{__file__}", line {_line_of(executor)}, in {name}'
        assert "worker/attempt.py" not in text
    assert "django_durable_jobs/rules/validation.py" in text  # the app's frames below the job stay


def test_an_error_raised_before_any_job_code_keeps_its_last_frame():
    executor = attempt.registered_executor("tests.no_such_operation")
    ctx = SimpleNamespace(lease=LEASE, payload={}, completed=False)
    outcome, error = attempt._call(executor, ctx)
    assert outcome.status == AttemptOutcomeChoice.FAILED and isinstance(error, LookupError)
    assert "worker/attempt.py" in traceback_text(error)  # one frame, where it was raised


def _line_of(executor) -> int:
    return executor.__code__.co_firstlineno + 1


def test_a_failure_is_logged_at_warning_with_its_traceback(caplog):
    outcome = Outcome.of_error(LEASE, _raised())
    report = report_recorded(CLAIM, Recorded(outcome, "failed", error=outcome.error), 0.5)
    assert report.traceback == outcome.traceback
    with caplog.at_level(logging.INFO, logger=LOGGER):
        log(report)
        log(AttemptReport.of(CLAIM, AttemptOutcomeChoice.COMPLETE, 0.25))
    failed, complete = caplog.records
    assert failed.levelno == logging.WARNING
    first, *rest = failed.getMessage().splitlines()
    assert first.endswith("outcome=failed duration=0.500s error=ValueError: bad input")
    assert "\n".join(rest) == outcome.traceback.rstrip()
    assert complete.levelno == logging.INFO and "\n" not in complete.getMessage()


def test_a_failure_without_a_traceback_is_still_a_warning(caplog):
    report = report_recorded(CLAIM, Recorded(Outcome.failed(LEASE, "no"), "failed", error="no"), 0)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        log(report)
    [record] = caplog.records
    assert record.levelno == logging.WARNING and record.getMessage().endswith("error=no")


# -- JobManager ------------------------------------------------------------------------------------


def test_job_manager_stores_and_logs_the_traceback(caplog):
    manager = JobManager(lease_seconds=5)

    def explode(ctx):
        raise KeyError("no such account")

    with caplog.at_level(logging.INFO, logger=LOGGER):
        job_id = manager.start_job("tests.manager", explode, submission(key="tb"))
        assert manager.wait(job_id, 15).status == "failed"
    attempt = JobAttempt.objects.get(job_id=job_id)
    assert attempt.error_class == "builtins.KeyError"
    assert "in explode" in attempt.traceback
    assert _first_frame(attempt.traceback).startswith(f'  File "{__file__}"')
    assert attempt.traceback.rstrip().endswith("KeyError: 'no such account'")
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert attempt.traceback.rstrip() in warning.getMessage()
    assert manager.report(job_id).traceback == attempt.traceback


# -- runjobs ---------------------------------------------------------------------------------------


def test_runjobs_stores_the_traceback_and_logs_it_at_warning(workers):
    job_id = submit("tests.fail", {"message": "upstream said no"}).pk
    code, worker = workers.run("--burst", "--concurrency", "1")
    assert code == 0, worker.logs()
    attempt = wait_for(
        lambda: JobAttempt.objects.filter(job_id=job_id).first(), "the failed attempt's row"
    )
    assert (attempt.outcome, attempt.error) == ("failed", "RuntimeError: upstream said no")
    assert attempt.error_class == "builtins.RuntimeError"
    assert attempt.traceback.startswith("Traceback (most recent call last):")
    assert RAISING_LINE in attempt.traceback and "jobs.py" in attempt.traceback
    assert _first_frame(attempt.traceback).endswith(", in fail")  # the job's code, not the worker's
    assert attempt.traceback.rstrip().endswith("RuntimeError: upstream said no")
    log = worker.stderr()
    line = f"WARNING django_durable_jobs.worker: job {job_id} tests.fail attempt=1 epoch=1"
    assert line in log, worker.logs()
    after = log[log.index(line) :]
    assert attempt.traceback.rstrip() in after
