"""Every bad option of ``runjobs`` and ``jobs`` ends in a ``CommandError`` that names it.

Each case runs through ``call_command`` with the option as a shell would type it (so argparse
parses it as it would a command line), must be refused before anything starts, and must leave
the database as it was: no job or attempt changed, no worker row. A few run as real
``python -m django`` processes, to show the exit status and that no traceback is printed.
Every ``runjobs`` case adds ``--burst``, so one that slipped through would end, not hang.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_durable_jobs.models import WorkerProcess
from django_durable_jobs.store import DurableJobStore
from tests.support import REPO_ROOT, db_state, submission

pytestmark = pytest.mark.django_db(transaction=True)

HUGE = "99999999999999999999"  # beyond every integer column and C long


@pytest.fixture(autouse=True)
def a_job():
    """One pending job, so a refusal that wrote anything would show in ``db_state``."""
    return DurableJobStore(actor="t").defer("tests.noop", submission({"n": 1}, key="k"))


def refused(command: str, *args: str) -> str:
    """Run ``command ARGS``, require a CommandError and an untouched database; return its text."""
    before, workers = db_state(), WorkerProcess.objects.count()
    out = StringIO()
    with pytest.raises(CommandError) as caught:
        call_command(command, *args, stdout=out, stderr=StringIO())
    assert caught.value.returncode == 1
    assert db_state() == before
    assert WorkerProcess.objects.count() == workers
    return str(caught.value)


# -- runjobs ---------------------------------------------------------------------------------------

SECONDS = ["inf", "-inf", "nan", "1e999"]  # given as --option=VALUE: "-inf" is no option
RUNJOBS_CASES = [
    *[([f"--lease={v}"], "--lease-seconds", "finite number of seconds") for v in SECONDS],
    (["--lease", "0"], "--lease-seconds", "got 0.0"),
    (["--lease", "-1"], "--lease-seconds", "got -1.0"),
    (["--lease", "100000"], "--lease-seconds", "0.1 to 86,400"),
    *[([f"--lease-seconds={v}"], "--lease-seconds", "finite") for v in ["inf", "nan", "0", "-1"]],
    *[([f"--poll={v}"], "--poll", "finite number of seconds") for v in [*SECONDS, "0", "-1"]],
    (["--poll", "4000"], "--poll", "0.01 to 3,600"),
    *[([f"--watch={v}"], "--watch", "non-negative finite") for v in [*SECONDS, "-1", "-0.01"]],
    (["--watch", "61"], "--watch", "0 to 60"),
    *[([f"--grace={v}"], "--grace", "non-negative finite") for v in [*SECONDS, "-1", "-0.5"]],
    *[([f"--timeout-grace={v}"], "--timeout-grace", "non-negative") for v in [*SECONDS, "-1"]],
    (["--concurrency", HUGE], "--concurrency", "1 to 1,000"),
    (["--concurrency", "1001"], "--concurrency", "1 to 1,000"),
    (["--concurrency", "0"], "--concurrency", "got 0"),
    (["--concurrency", "-3"], "--concurrency", "got -3"),
    (["--prefetch", "-1"], "--prefetch", "0 to 10,000"),
    (["--prefetch", HUGE], "--prefetch", "0 to 10,000"),
    (["--async-slots", "-1"], "--async-slots", "0 to 10,000"),
    (["--async-slots", "10001"], "--async-slots", "0 to 10,000"),
    (["--processes", "0"], "--processes", "1 to 256"),
    (["--processes", "-2"], "--processes", "1 to 256"),
    (["--processes", HUGE], "--processes", "1 to 256"),
    (["--max-jobs", "0"], "--max-jobs", "1 to 1,000,000,000"),
    (["--max-jobs", "-1"], "--max-jobs", "got -1"),
    (["--max-jobs", HUGE], "--max-jobs", HUGE),
    (["--scope", ""], "--scope", "got ''"),
    (["--scope", "   "], "--scope", "1-200 characters"),
    (["--scope", "a\x1b[2Jb"], "--scope", "control characters"),
    (["--scope", "x" * 201], "--scope", "1-200 characters"),
    (["--queue", ""], "--queue", "got ''"),
    (["--queue", "fast", "--queue", "a\nb"], "--queue", "control characters"),
    (["--operation", ""], "--operation", "got ''"),
    (["--operation", "tests.noop\x07"], "--operation", "may contain only"),
    (["--operation", "no.such.op"], "--operation", "Unknown operation(s): no.such.op."),
    (["--database", "nosuch"], "--database", "'nosuch'"),
    (["--concurrency", "x"], "--concurrency", "invalid int value"),  # argparse's own refusal
    (["--lease", "soon"], "--lease", "invalid float value"),
]


@pytest.mark.parametrize(("args", "option", "says"), RUNJOBS_CASES)
def test_runjobs_refuses_a_bad_option_by_name(args, option, says):
    message = refused("runjobs", "--burst", *args)
    assert option in message
    assert says in message


def test_runjobs_lease_zero_is_refused_not_replaced_by_the_default():
    message = refused("runjobs", "--burst", "--lease", "0")
    assert message.startswith("--lease-seconds must be a positive finite number of seconds")


def test_runjobs_names_the_setting_when_the_default_lease_is_bad(settings):
    settings.DURABLE_JOBS = {"LEASE_SECONDS": float("inf")}
    assert refused("runjobs", "--burst").startswith("DURABLE_JOBS['LEASE_SECONDS'] must be")


def test_runjobs_checks_every_option_before_starting_child_processes():
    # With --processes the parent would start children that each fail on their own.
    message = refused("runjobs", "--burst", "--processes", "2", "--lease", "inf")
    assert "--lease-seconds" in message


def test_runjobs_accepts_the_bounds_themselves():
    out = StringIO()
    args = ["--burst", "--lease", "0.1", "--poll", "0.01", "--grace", "0", "--concurrency"]
    call_command("runjobs", *args, "1000", "--max-jobs", "1", "-v", "0", stdout=out)
    assert WorkerProcess.objects.get().state() == "stopped"


# -- jobs ------------------------------------------------------------------------------------------

JOBS_CASES = [
    (["list", "--limit", HUGE], "--limit", "1 to 10,000"),
    (["list", "--limit", "10001"], "--limit", "1 to 10,000"),
    (["list", "--limit", "0"], "--limit", "got 0"),
    (["list", "--limit", "-5"], "--limit", "got -5"),
    (["list", "--limit", "many"], "--limit", "invalid int value"),
    (["list", "--status", "bogus"], "--status", "invalid choice"),
    (["list", "--ownership", "mine"], "--ownership", "invalid choice"),
    (["list", "--operation", ""], "--operation", "got ''"),
    (["list", "--operation", "a\x1b]0;x\x07"], "--operation", "control characters"),
    (["list", "--scope", ""], "--scope", "got ''"),
    (["list", "--scope", "t\r"], "--scope", "control characters"),
    (["list", "--queue", ""], "--queue", "got ''"),
    (["list", "--queue", "q" * 201], "--queue", "1-200 characters"),
    (["list", "--database", "nosuch"], "--database", "'nosuch'"),
    (["show", "--database", "nosuch", str(uuid.uuid4())], "--database", "'nosuch'"),
    (["show", "not-a-uuid"], "'not-a-uuid'", "job ids are UUIDs"),
    (["show", "\x1b[2J"], "'\\x1b[2J'", "job ids are UUIDs"),
    (["bogus"], "invalid choice", "bogus"),
]


@pytest.mark.parametrize(("args", "option", "says"), JOBS_CASES)
def test_jobs_refuses_a_bad_option_by_name(args, option, says):
    message = refused("jobs", *args)
    assert option in message
    assert says in message


@pytest.mark.parametrize("name", ["cancel", "retry"])
def test_cancel_and_retry_report_each_bad_id_and_exit_1(name):
    message = refused("jobs", name, "not-a-uuid", "\x1b[2J")
    assert message.startswith("2 of 2 request(s) refused: ")
    assert "not-a-uuid: not a job id" in message
    assert "\\x1b[2J: not a job id" in message and "\x1b" not in message


def test_jobs_list_accepts_the_largest_limit():
    out = StringIO()
    call_command("jobs", "list", "--limit", "10000", "--json", stdout=out)
    assert out.getvalue().count('"id"') == 1


# -- real processes --------------------------------------------------------------------------------


def _django(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        env={**os.environ, **env},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("args", "first_line"),
    [
        (
            ["jobs", "list", "--limit", HUGE],
            f"CommandError: --limit must be a whole number from 1 to 10,000; got {HUGE}.",
        ),
        (
            ["runjobs", "--burst", "--lease", "inf"],
            "CommandError: --lease-seconds must be a positive finite number of seconds from 0.1 "
            "to 86,400; got inf.",
        ),
        (
            ["runjobs", "--burst", "--concurrency", HUGE],
            f"CommandError: --concurrency must be a whole number from 1 to 1,000; got {HUGE}.",
        ),
        (["runjobs", "--burst", "--scope", ""], "CommandError: --scope: A scope is 1-200"),
        (["runjobs", "--burst", "--queue", ""], "CommandError: --queue: A queue is 1-200"),
    ],
)
def test_a_real_process_exits_1_with_one_line_and_no_traceback(args, first_line, db_settings_env):
    before = db_state()
    done = _django(db_settings_env, *args)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(first_line)
    assert "Traceback" not in done.stderr
    assert db_state() == before
    assert not WorkerProcess.objects.exists()


def test_a_real_process_exits_2_on_a_value_argparse_cannot_parse(db_settings_env):
    done = _django(db_settings_env, "runjobs", "--burst", "--concurrency", "x")
    assert done.returncode == 2
    assert "argument --concurrency: invalid int value: 'x'" in done.stderr
    assert "Traceback" not in done.stderr
