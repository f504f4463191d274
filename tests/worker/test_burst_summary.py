"""``runjobs --burst`` ends with one line saying what its attempts came to, and how long it took.

Proves: a real ``runjobs --burst`` process prints, as its last stdout line, how many attempts
ended and how (complete, failed, cancelled, lost), and the time it ran, with nothing a terminal
would act on; ``call_command`` prints the same line, and none at ``-v 0``; the line's wording
(singular and plural, the ends it names only when they happened) is a pure function.
"""

from __future__ import annotations

import re
from collections import Counter
from io import StringIO

import pytest
from django.core.management import call_command

from django_durable_jobs import submit
from django_durable_jobs.formatting.terminal import UNSAFE
from django_durable_jobs.models import Job
from django_durable_jobs.rules.vocabulary import AttemptOutcomeChoice
from django_durable_jobs.worker.reports import Unwritten, summary_line

SUMMARY = re.compile(
    r"^runjobs: finished in \d+\.\d s; 3 attempts ended: "
    r"2 complete, 1 failed, 0 cancelled, 0 lost \(another attempt took over\)\.$"
)


def _three_jobs() -> None:
    for n in range(2):
        submit("tests.noop", {"n": n})
    submit("tests.fail", {"message": "no"})


def test_a_real_burst_run_ends_with_its_summary_line(workers):
    _three_jobs()
    code, worker = workers.run("--burst", "--concurrency", "2")
    assert code == 0, worker.logs()
    last = worker.stdout().rstrip("\n").splitlines()[-1]
    assert SUMMARY.match(last), worker.logs()
    assert not {ord(c) for c in last} & UNSAFE


@pytest.mark.django_db(transaction=True)
def test_call_command_prints_the_summary_unless_quiet():
    _three_jobs()
    out = StringIO()
    call_command("runjobs", "--burst", "--poll", "0.05", stdout=out)
    assert SUMMARY.match(out.getvalue().splitlines()[-1]), out.getvalue()
    assert sorted(Job.objects.values_list("status", flat=True)) == [
        "complete",
        "complete",
        "failed",
    ]
    quiet = StringIO()
    call_command("runjobs", "--burst", "--poll", "0.05", "-v", "0", stdout=quiet)
    assert quiet.getvalue() == ""  # nothing to run, and nothing said


def test_the_summary_is_singular_for_one_and_names_rare_ends_only_when_they_happened():
    one = summary_line(Counter({AttemptOutcomeChoice.COMPLETE: 1}), 0.04)
    assert one == (
        "runjobs: finished in 0.0 s; 1 attempt ended: 1 complete, 0 failed, 0 cancelled, "
        "0 lost (another attempt took over)."
    )
    none = summary_line(Counter(), 2.0)
    assert none.startswith("runjobs: finished in 2.0 s; 0 attempts ended: 0 complete")
    rare = Counter(
        {
            AttemptOutcomeChoice.CANCELLED: 2,
            Unwritten.LEASE_LOST: 1,
            Unwritten.UNRECORDED: 1,
            AttemptOutcomeChoice.RELEASED: 3,
        }
    )
    assert summary_line(rare, 12.345, abandoned=1) == (
        "runjobs: finished in 12.3 s; 7 attempts ended: 0 complete, 0 failed, 2 cancelled, "
        "1 lost (another attempt took over), 1 unrecorded (the database refused the outcome), "
        "3 released unstarted; 1 job thread abandoned."
    )
    assert summary_line(Counter(), 1.0, abandoned=2).endswith("; 2 job threads abandoned.")
