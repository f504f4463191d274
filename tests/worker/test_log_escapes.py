"""The worker logs a job's words escaped: a hostile exception message cannot steer the terminal.

An executor raises with ``ESC ]0;pwned BEL ESC [2J`` and a newline that would forge a log line.
The log line of its failure, from the ``Worker`` and ``JobManager`` in this process and from a
real ``runjobs`` process's stderr, holds no raw control: the error is one escaped field, the
traceback keeps only its own newlines (the message in it is one line, its newline escaped), so
no line of the log is the forged one.
"""

from __future__ import annotations

import logging

import pytest

from django_durable_jobs import submit
from django_durable_jobs.formatting.terminal import UNSAFE
from django_durable_jobs.manager import JobManager
from django_durable_jobs.models import Job
from django_durable_jobs.rules.vocabulary import AttemptOutcomeChoice
from django_durable_jobs.worker import Worker, WorkerOptions
from django_durable_jobs.worker.reports import AttemptReport, log
from tests.support import submission

pytestmark = pytest.mark.django_db(transaction=True)

LOGGER = "django_durable_jobs.worker"
HOSTILE = "boom \x1b]0;pwned\x07\x1b[2J\n2026-01-01 INFO forged: job complete"
ERROR_SHOWN = "error=RuntimeError: boom \\x1b]0;pwned\\x07\\x1b[2J\\n2026-01-01 INFO forged"


def unsafe_in(text: str) -> set[str]:
    return {c for c in text if ord(c) in UNSAFE} - {"\n", "\t"}


def failure_line(caplog: pytest.LogCaptureFixture) -> str:
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    return warning.getMessage()


def test_the_worker_logs_a_hostile_failure_escaped(caplog):
    job = submit("tests.fail", {"message": HOSTILE})
    with caplog.at_level(logging.INFO, logger=LOGGER):
        worker = Worker(WorkerOptions(burst=True, poll=0.05, lease_seconds=5, concurrency=1))
        assert worker.run() == 0
    assert Job.objects.get(pk=job.pk).error == f"RuntimeError: {HOSTILE}"  # stored exact
    message = failure_line(caplog)
    assert unsafe_in(message) == set()
    first, *traceback = message.splitlines()
    assert first.endswith(ERROR_SHOWN + ": job complete")  # the forged line stays in its field
    assert traceback[0] == "Traceback (most recent call last):"
    # The message is one line of the traceback too: the forged line cannot start a line.
    assert traceback[-1] == ERROR_SHOWN.removeprefix("error=") + ": job complete"
    assert not [line for line in message.splitlines() if line.startswith("2026-01-01")]


def test_the_job_manager_logs_a_hostile_failure_escaped(caplog):
    manager = JobManager(lease_seconds=5)

    def explode(ctx):
        raise RuntimeError(HOSTILE)

    with caplog.at_level(logging.INFO, logger=LOGGER):
        job_id = manager.start_job("tests.manager", explode, submission(key="esc"))
        assert manager.wait(job_id, 15).status == "failed"
    message = failure_line(caplog)
    assert unsafe_in(message) == set()
    assert ERROR_SHOWN in message.splitlines()[0]


def test_an_operation_name_from_outside_the_app_is_escaped_in_the_log_line(caplog):
    report = AttemptReport("id", "op\x1b[2J\u202e", 1, 1, AttemptOutcomeChoice.COMPLETE, 0.1)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        log(report)
    [record] = caplog.records
    assert "job id op\\x1b[2J\\u202e attempt=1" in record.getMessage()


def test_runjobs_writes_its_log_escaped(workers):
    job = submit("tests.fail", {"message": HOSTILE})
    code, worker = workers.run("--burst", "--concurrency", "1")
    assert code == 0, worker.logs()
    assert Job.objects.get(pk=job.pk).status == "failed"
    stderr = worker.stderr_path.read_bytes().decode("utf-8")  # strict: no lone surrogate either
    assert unsafe_in(stderr) == set(), worker.logs()
    assert unsafe_in(worker.stdout()) == set()
    line = f"WARNING django_durable_jobs.worker: job {job.pk} tests.fail attempt=1 epoch=1"
    [failed] = [entry for entry in stderr.splitlines() if entry.startswith(line, 24)]
    assert failed.endswith(ERROR_SHOWN + ": job complete")
    # The traceback that follows keeps its own newlines; its message's are escaped, so no line
    # of the log is the forged one.
    assert ERROR_SHOWN.removeprefix("error=") + ": job complete\n" in stderr
    assert not [entry for entry in stderr.splitlines() if entry.startswith("2026-01-01 INFO")]
