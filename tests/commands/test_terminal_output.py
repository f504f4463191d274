"""``manage.py jobs`` prints a job's words escaped: no terminal escape reaches the operator's shell.

A job failed with an error that retitles and clears the terminal (``ESC ]0;pwned BEL ESC [2J``),
by a worker whose name holds a C1 control and a right-to-left override, and a row written outside
the app with controls in its operation, scope and key. The text output shows each as a visible
escape and keeps a traceback's newlines; ``--json`` stays valid JSON with the exact values and no
raw control either.
"""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from django_durable_jobs.formatting.terminal import UNSAFE
from django_durable_jobs.models import Job
from django_durable_jobs.store import DurableJobStore
from tests.support import submission

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = "\x1b]0;pwned\x07\x1b[2J"
SHOWN = "\\x1b]0;pwned\\x07\\x1b[2J"
ACTOR = "w\x9b31m\u202eevil"  # the store refuses C0 controls in an actor, not these
ACTOR_SHOWN = "w\\x9b31m\\u202eevil"
RAW = {"\n", "\t"}  # the only controls text output may hold: its own lines, a traceback's tabs


def run(*args: str) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def unsafe_in(text: str, allowed: set[str] = RAW) -> set[str]:
    """Return the characters of ``text`` that ``printable`` would have escaped."""
    return {c for c in text if ord(c) in UNSAFE} - allowed


@pytest.fixture
def failed() -> Job:
    """A job whose one attempt raised an exception with the hostile message, with a traceback."""
    store = DurableJobStore(actor=ACTOR)
    job = store.defer("demo.hostile", submission({"note": f"input {HOSTILE}\u2028"}, key="h"))
    try:
        raise RuntimeError(f"upstream said {HOSTILE}\nsecond line\r")
    except RuntimeError as exc:
        store.fail(store.claim(job.pk), exc)
    return job


@pytest.fixture
def legacy() -> Job:
    """A row written outside the app, with controls where the app would refuse them."""
    job = DurableJobStore(actor="t").defer("demo.legacy", submission(key="l"))
    Job.objects.filter(pk=job.pk).update(
        operation=f"op{HOSTILE}", scope="tenant\x07", idempotency_key="k\u202e", claimed_by="w\r"
    )
    return job


def test_show_prints_the_error_escaped_and_keeps_the_traceback_lines(failed):
    text = run("show", str(failed.pk))
    assert unsafe_in(text) == set()
    assert f"upstream said {SHOWN}" in text
    assert "second line\\r" in text  # the stored error's own newline starts a new indented line
    lines = text.splitlines()
    traceback = lines.index("      Traceback (most recent call last):")
    assert lines[traceback + 1].startswith('        File "')
    # The message is one line of the traceback: its newline is written \n, so none is forged.
    assert f"      RuntimeError: upstream said {SHOWN}\\nsecond line\\r" in lines[traceback:]
    assert f"by {ACTOR_SHOWN}" in text
    assert '"note": "input \\u001b]0;pwned\\u0007\\u001b[2J\\u2028"' in text  # pretty JSON


def test_show_json_is_valid_json_with_the_exact_values_and_no_raw_control(failed):
    text = run("show", str(failed.pk), "--json")
    assert unsafe_in(text, {"\n"}) == set()  # JSON's own indentation
    data = json.loads(text)
    assert data["error"] == f"RuntimeError: upstream said {HOSTILE}\nsecond line\r"
    assert data["claimed_by"] == ACTOR
    assert json.loads(data["proposal"]) == {"note": f"input {HOSTILE}\u2028"}
    [attempt] = data["attempt_history"]
    assert attempt["traceback"].endswith(
        f"RuntimeError: upstream said {HOSTILE}\\nsecond line\\r\n"
    )


def test_list_prints_each_field_on_one_escaped_line(failed, legacy):
    text = run("list")
    assert unsafe_in(text, {"\n"}) == set()
    header, *rows = text.rstrip("\n").split("\n")
    assert len(rows) == 2
    [legacy_row] = [row for row in rows if row.startswith(str(legacy.pk))]
    assert f"op{SHOWN}" in legacy_row
    [failed_row] = [row for row in rows if row.startswith(str(failed.pk))]
    assert ACTOR_SHOWN in failed_row
    # Escaped before the columns are measured: the table stays aligned.
    assert failed_row.index("failed") == header.index("STATUS")


def test_list_json_keeps_the_exact_values(failed, legacy):
    text = run("list", "--json")
    assert unsafe_in(text, {"\n"}) == set()
    data = {row["id"]: row for row in json.loads(text)}
    assert data[str(legacy.pk)]["operation"] == f"op{HOSTILE}"
    assert data[str(legacy.pk)]["scope"] == "tenant\x07"
    assert data[str(failed.pk)]["claimed_by"] == ACTOR


def test_show_of_a_row_written_outside_the_app_escapes_every_field(legacy):
    text = run("show", str(legacy.pk))
    assert unsafe_in(text) == set()
    for shown in (f"op{SHOWN}", "tenant\\x07", "k\\u202e", "w\\r"):
        assert shown in text


def test_cancel_reports_stay_printable(legacy):
    text = run("cancel", str(legacy.pk))
    assert unsafe_in(text, {"\n"}) == set()
    assert text.startswith(f"{legacy.pk}: cancelled")
