"""``runjobs --processes N`` supervises its children (``worker/supervisor.py``).

* The restart rule without processes: the pause doubles per place up to its cap and starts over
  after a healthy life; N deaths within the window are a crash loop; bad options are refused.
* Real processes and real signals: a child killed with SIGKILL and one whose job calls
  ``os._exit(7)`` are reaped, logged with pid and cause, and replaced by a new pid that goes on
  working (the dead one's job is resumed once its lease expired); a crash loop ends the parent
  with exit 1 and says so; SIGTERM still stops everything with exit 0 and restarts nothing, also
  while a restart is pending; ``--max-jobs`` children are replaced, ``--burst`` ones are not.

Restart pauses are shortened with ``--restart-delay``; tests wait on log lines and rows.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from django_durable_jobs import submit
from django_durable_jobs.models import Job, JobStatus, WorkerProcess
from django_durable_jobs.worker.shutdown import PARENT_STOP
from django_durable_jobs.worker.supervisor import (
    MAX_RESTART_DELAY,
    RestartRule,
    Restarts,
    child_command,
    ending,
    exit_status,
)
from tests.support import db_state, wait_for
from tests.worker_support import EXIT_TIMEOUT, job

QUICK = ("--processes", "2", "--concurrency", "1", "--prefetch", "0", "--restart-delay", "0.1")
STARTED = re.compile(r"worker process (\d) started: pid (\d+)(?: \(replacing pid (\d+)\))?")


# -- the rule, without processes -------------------------------------------------------------------


def test_the_pause_doubles_per_place_up_to_the_cap():
    restarts = Restarts(RestartRule(restart_delay=1.0, crash_loop_deaths=1000))
    pauses = [restarts.died(1, lived=0.5, now=float(t)) for t in range(9)]
    assert pauses == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    assert MAX_RESTART_DELAY == 60.0
    assert restarts.died(2, lived=0.5, now=9.0) == 1.0  # another place has its own pause


def test_a_child_that_outlived_the_window_starts_the_pause_over():
    restarts = Restarts(RestartRule(restart_delay=0.5, crash_loop_seconds=60.0))
    assert [restarts.died(1, lived=1.0, now=t) for t in (0.0, 100.0)] == [0.5, 1.0]
    assert restarts.died(1, lived=60.0, now=300.0) == 0.5  # healthy for the whole window
    assert restarts.died(1, lived=59.9, now=400.0) == 1.0


def test_deaths_within_the_window_make_a_crash_loop():
    restarts = Restarts(RestartRule(crash_loop_deaths=3, crash_loop_seconds=10.0))
    assert restarts.died(1, lived=0.1, now=0.0) is not None
    assert restarts.died(2, lived=0.1, now=5.0) is not None
    assert restarts.died(1, lived=0.1, now=9.9) is None  # three deaths over both places
    assert restarts.recent() == 3

    spaced = Restarts(RestartRule(crash_loop_deaths=3, crash_loop_seconds=10.0))
    for now in (0.0, 6.0, 12.0, 18.0, 24.0):  # never three within 10 s
        assert spaced.died(1, lived=5.0, now=now) is not None
    assert spaced.recent() == 2


def test_a_limit_of_one_death_never_restarts():
    assert Restarts(RestartRule(crash_loop_deaths=1)).died(1, lived=100.0, now=0.0) is None


def test_how_a_child_ended_reads_as_a_shell_says_it():
    assert (ending(7), exit_status(7)) == ("exit code 7", 7)
    assert (ending(-signal.SIGKILL), exit_status(-signal.SIGKILL)) == ("signal SIGKILL", 137)
    assert ending(-PARENT_STOP) == "signal SIGUSR1"


def test_a_stopped_worker_process_outlives_a_late_repeat_of_its_parents_request():
    # What runjobs does once its worker stopped (run from the command line, before it exits):
    # a repeated PARENT_STOP/PARENT_CANCEL, default action "terminate", must not end it.
    script = (
        "import os, django\n"
        "django.setup()\n"
        "from django_durable_jobs.worker import ignore_parent_requests\n"
        "from django_durable_jobs.worker.shutdown import PARENT_CANCEL, PARENT_STOP\n"
        "from django_durable_jobs.worker.signals import relay_signals\n"
        "ignore_parent_requests()\n"
        "restore = relay_signals({PARENT_STOP: print, PARENT_CANCEL: print})  # the worker's\n"
        "restore()  # undone: what was there before comes back\n"
        "for signum in (PARENT_STOP, PARENT_CANCEL, PARENT_STOP):\n"
        "    os.kill(os.getpid(), signum)\n"
        "print('still here')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "still here\n"), done.stderr


# A Supervisor run in a fresh interpreter (the test process may run threads of earlier tests,
# which make the supervisor spawn instead): Django set up, burst, children spawned by the command
# line ``python -c pass`` exit 0 at once. The log goes to stdout, a child's traceback to stderr.
SUPERVISED = """
import django, logging, sys
django.setup()
logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
from django_durable_jobs.worker.supervisor import RestartRule, Supervisor
def supervise(forked, children):
    rule = RestartRule(restart_delay=0.0)
    command = [sys.executable, "-c", "pass"]
    print("exit", Supervisor(command, children, rule, burst=True, forked=forked).run())
def child():
    raise RuntimeError("from the forked child")
{body}
"""


def _supervised(body: str) -> subprocess.CompletedProcess:
    script = SUPERVISED.format(body=body)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )


def _starts_of(log: str) -> list[bool]:
    """Return, for each child the log says started, whether it was forked."""
    return [line.endswith("(forked)") for line in log.splitlines() if " started: pid " in line]


def test_forked_children_run_the_function_and_exit_with_what_it_returns_or_raised():
    # Both forked children raise: each dies with exit 1, its traceback printed, and its
    # replacement (a new interpreter) exits 0.
    run = _supervised("supervise(child, 2)")
    assert run.returncode == 0 and "exit 0" in run.stdout, run.stdout + run.stderr
    assert _starts_of(run.stdout) == [True, True, False, False], run.stdout
    assert run.stdout.count("died: exit code 1 after") == 2, run.stdout
    assert run.stderr.count("RuntimeError: from the forked child") == 2, run.stderr
    # Forked children that return 0 are done; nothing else starts.
    run = _supervised("supervise(lambda: 0, 3)")
    assert run.returncode == 0 and "exit 0" in run.stdout, run.stdout + run.stderr
    assert _starts_of(run.stdout) == [True, True, True] and "died" not in run.stdout, run.stdout


def test_a_parent_running_another_thread_starts_new_interpreters_and_says_why():
    run = _supervised(
        "import threading\n"
        "stop = threading.Event()\n"
        "thread = threading.Thread(target=stop.wait)\n"
        "thread.start()\n"
        "supervise(lambda: 0, 2)\n"
        "stop.set()"
    )
    assert run.returncode == 0 and "exit 0" in run.stdout, run.stdout + run.stderr
    assert "not forked: this process runs 2 threads" in run.stdout, run.stdout
    assert _starts_of(run.stdout) == [False, False], run.stdout


def test_children_run_one_process_each_whatever_the_spelling():
    python = sys.executable
    argv = ["/usr/bin/python", "-m", "django", "runjobs", "--processes", "4", "--lease", "2"]
    assert child_command(argv) == [
        python,
        "-m",
        "django",
        "runjobs",
        "--lease",
        "2",
        "--processes=1",
    ]
    assert child_command(["py", "manage.py", "runjobs", "--processes=4"]) == [
        python,
        "manage.py",
        "runjobs",
        "--processes=1",
    ]
    # An abbreviation argparse accepted stays, and the last --processes wins.
    assert child_command(["py", "manage.py", "runjobs", "--proc", "4"])[-3:] == [
        "--proc",
        "4",
        "--processes=1",
    ]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("restart_delay", -1.0, "--restart-delay must be a non-negative finite number of seconds"),
        ("restart_delay", float("inf"), "--restart-delay must be a non-negative finite number"),
        ("restart_delay", 61.0, "from 0 to 60; got 61.0."),
        ("crash_loop_deaths", 0, "--crash-loop-deaths must be a whole number from 1 to 1,000"),
        ("crash_loop_seconds", 0.5, "--crash-loop-seconds must be a positive finite number"),
        ("crash_loop_seconds", float("nan"), "from 1 to 86,400; got nan."),
    ],
)
@pytest.mark.django_db
def test_a_bad_restart_option_is_refused_before_anything_starts(option, value, message):
    before = db_state()
    with pytest.raises(CommandError, match=re.escape(message)):
        call_command("runjobs", processes=2, **{option: value})
    assert db_state() == before


# -- real processes --------------------------------------------------------------------------------


def _alive_child_of(pid: int, parent: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return f"PPid:\t{parent}\n" in status and "State:\tZ" not in status


def _working_children(parent, count: int = 2) -> set[int]:
    """Wait until ``count`` live children of ``parent`` have a worker row; return their pids."""

    def registered() -> set[int] | None:
        assert parent.running(), f"the parent exited ({parent.proc.returncode})\n{parent.logs()}"
        rows = WorkerProcess.objects.filter(stopped_at__isnull=True)
        pids = {row.pid for row in rows if _alive_child_of(row.pid, parent.pid)}
        return pids if len(pids) == count else None

    return wait_for(registered, f"{count} working children", diagnose=parent.logs)


def _replacement(parent, dead: int) -> int:
    """Wait for the log line of the child that replaces pid ``dead``; return its pid."""
    line = parent.wait_for_log(f"(replacing pid {dead})")
    new = int(STARTED.search(line).group(2))
    assert new != dead and _alive_child_of(new, parent.pid), parent.logs()
    return new


def _ends(job_id, status: str, parent) -> Job:
    return wait_for(
        lambda: (row := job(job_id)).status == status and row,
        f"{job_id} {status}",
        diagnose=parent.logs,
    )


def _starts(parent) -> list[tuple[str, ...]]:
    return STARTED.findall(parent.stderr())


@pytest.fixture
def supervise(workers):
    """Start ``runjobs`` parents; kill the children they started too when the test ends.

    Each child runs in a process group of its own, which the pool's teardown (the parent's
    group) does not reach; a child whose parent was killed would run on.
    """
    parents = []

    def start(*args: str):
        parents.append(parent := workers.start(*args))
        return parent

    yield start
    for parent in parents:
        for _, pid, _ in _starts(parent):
            if _alive_child_of(int(pid), parent.pid):
                os.kill(int(pid), signal.SIGKILL)


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_a_killed_child_and_an_exiting_job_are_logged_reaped_and_replaced(supervise, tmp_path):
    parent = supervise(*QUICK, "--crash-loop-deaths", "10")
    children = _working_children(parent)

    victim = min(children)
    os.kill(victim, signal.SIGKILL)
    line = parent.wait_for_log(f"(pid {victim}) died: signal SIGKILL after")
    assert "WARNING" in line and "restarting it in 0.1s" in line
    assert not Path(f"/proc/{victim}").exists()  # reaped: no zombie left behind
    replacement = _replacement(parent, victim)
    assert replacement not in children

    # A job that ends its process: the process dies with exit code 7, holding the job's lease.
    exiting = submit("tests.exit_process", {"exit_on": [1], "markers": str(tmp_path)}).pk
    line = parent.wait_for_log("died: exit code 7 after")
    dead = int(re.search(r"\(pid (\d+)\) died", line).group(1))
    assert dead in children | {replacement}
    assert not Path(f"/proc/{dead}").exists()
    _replacement(parent, dead)
    _working_children(parent)

    # Its lease expires (2 s) and a live child resumes the job: attempt 2 completes it.
    resumed = _ends(exiting, JobStatus.COMPLETE, parent)
    assert (resumed.attempts, json.loads(resumed.result)) == (2, {"attempt": 2})
    ids = [submit("tests.noop", {"n": n}).pk for n in range(4)]
    for job_id in ids:
        _ends(job_id, JobStatus.COMPLETE, parent)
    assert len(_starts(parent)) == 4  # two first children, two replacements
    # The first two were forked from the parent (Django set up once); replacements are new
    # interpreters, started while the parent runs its signal thread.
    started = [line for line in parent.stderr().splitlines() if STARTED.search(line)]
    assert ["(forked)" in line for line in started] == [True, True, False, False], started

    parent.send(signal.SIGTERM)
    assert parent.wait() == 0, parent.logs()
    err = parent.stderr()
    assert "SIGTERM: passing it on to 2 worker process(es) as SIGUSR1" in err
    assert "every worker process has ended; exiting 0" in err
    assert len(_starts(parent)) == 4, parent.logs()  # nothing restarted after SIGTERM
    assert (
        not WorkerProcess.objects.filter(stopped_at__isnull=True)
        .exclude(
            pid__in=[victim, dead]  # the killed ones never signed off
        )
        .exists()
    )


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_a_crash_loop_stops_the_others_and_exits_one(supervise, tmp_path):
    # Every attempt of these ends its process: three deaths in a row.
    ids = [submit("tests.exit_process", {"n": n, "markers": str(tmp_path)}).pk for n in range(3)]
    parent = supervise(*QUICK, "--crash-loop-deaths", "3", "--crash-loop-seconds", "60")
    # Three deaths take two rounds of children starting (the third job waits for a replacement),
    # then a stop: 3-5 s alone, over 20 s beside three other suites on two cores (seen in CI).
    assert parent.wait(timeout=3 * EXIT_TIMEOUT) == 1, parent.logs()

    err = parent.stderr()
    line = next(line for line in err.splitlines() if "Crash loop" in line)
    assert "ERROR" in line and "died: exit code 7" in line
    assert "Crash loop: 3 worker process deaths within 60s" in line
    assert "(--crash-loop-deaths 3, --crash-loop-seconds 60)" in line
    assert "Stopping the other worker processes; exiting 1." in line
    assert err.count("died: exit code 7") >= 3
    assert "every worker process has ended; exiting 1" in err
    tail = err[err.index("Crash loop") :]
    assert "started: pid" not in tail  # nothing restarted once the loop was seen
    for _, pid, _ in _starts(parent):
        assert not Path(f"/proc/{pid}").exists()
    statuses = {job(i).status for i in ids}  # the leases they held simply expire
    assert statuses <= {JobStatus.RUNNING, JobStatus.PENDING}, statuses


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_sigterm_while_a_restart_is_pending_exits_zero_and_starts_nothing(supervise):
    parent = supervise(*QUICK[:-1], "30")  # --restart-delay 30
    victim = min(_working_children(parent))
    os.kill(victim, signal.SIGKILL)
    parent.wait_for_log(f"(pid {victim}) died: signal SIGKILL after")
    parent.wait_for_log("restarting it in 30s")

    parent.send(signal.SIGTERM)
    assert parent.wait() == 0, parent.logs()  # well before the 30 s restart
    err = parent.stderr()
    assert "SIGTERM: passing it on to 1 worker process(es) as SIGUSR1" in err
    # The child stops and exits 0: a repeat of the request (sent each tick, for children still
    # starting) that arrives once its worker has stopped is ignored, never its death by SIGUSR1.
    assert re.search(r"\(pid \d+\) stopped: exit code 0 after", err), err
    assert len(_starts(parent)) == 2 and "replacing pid" not in err


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_children_that_reached_max_jobs_are_replaced(supervise):
    parent = supervise(*QUICK, "--max-jobs", "1")
    ids = [submit("tests.noop", {"n": n}).pk for n in range(4)]  # two children, one job each
    for job_id in ids:
        _ends(job_id, JobStatus.COMPLETE, parent)
    line = parent.wait_for_log("ended on its own: exit code 0 after")
    assert "INFO" in line and "replacing it in 0.1s" in line
    assert "died" not in parent.stderr()  # not a death: no backoff, no crash loop
    _working_children(parent)

    parent.send(signal.SIGTERM)
    assert parent.wait() == 0, parent.logs()


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_burst_children_are_not_replaced_and_the_parent_ends_with_them(supervise):
    ids = [submit("tests.noop", {"n": n}).pk for n in range(3)]
    parent = supervise(*QUICK, "--burst")
    assert parent.wait() == 0, parent.logs()
    assert [job(i).status for i in ids] == [JobStatus.COMPLETE] * 3
    err = parent.stderr()
    assert err.count("finished (--burst): exit code 0") == 2
    assert len(_starts(parent)) == 2 and "every worker process has ended; exiting 0" in err
