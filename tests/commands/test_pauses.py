"""``manage.py jobs pause|resume|pauses``: hold a queue or an operation back from a shell.

Proves: pause records who (the OS login, or --by) and why, and says so; a second pause says
it changed nothing; ``pauses`` lists what is in force (``--all`` the ended ones too, ``--json``
as data); resume ends the pause and keeps its row; a bad name, a missing --reason or a resume of
nothing paused is one ``CommandError`` and changes nothing.
"""

from __future__ import annotations

import getpass
import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_durable_jobs.models import JobPause
from tests.flow.pause_support import pause_state

pytestmark = pytest.mark.django_db(transaction=True)


def jobs(*args: str) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out)
    return out.getvalue()


def test_pause_list_and_resume_a_queue():
    said = jobs("pause", "--queue", "mail", "--reason", "provider down")
    row = JobPause.objects.get()
    assert said.startswith(f"Paused queue mail in every scope (pause {row.pk}).")
    assert (row.paused_by, row.reason, row.active) == (
        f"cli:{getpass.getuser()}",
        "provider down",
        True,
    )
    again = jobs("pause", "--queue", "mail", "--reason", "twice", "--by", "bob")
    assert "was already paused" in again and "nothing changed" in again
    listed = jobs("pauses").splitlines()
    assert listed[0].split() == ["ID", "TARGET", "NAME", "SCOPE", "PAUSED", "BY", "STATE", "REASON"]
    assert "in force" in listed[1] and "provider down" in listed[1]

    said = jobs("resume", "--queue", "mail", "--by", "alice")
    assert said.startswith(f"Resumed queue mail in every scope (pause {row.pk})")
    row.refresh_from_db()
    assert (row.active, row.resumed_by) == (None, "alice")
    assert jobs("pauses") == "Nothing is paused.\n"
    data = json.loads(jobs("pauses", "--all", "--json"))
    assert [(p["id"], p["state"]) for p in data] == [(row.pk, "resumed")]


def test_pause_an_operation_in_one_scope_as_json_and_resume_it_by_id():
    data = json.loads(
        jobs("pause", "--operation", "tests.noop", "--scope", "acme", "--reason", "x", "--json")
    )
    assert data["changed"] and data["pause"]["scope"] == "acme"
    data = json.loads(jobs("resume", "--id", str(data["pause"]["id"]), "--json"))
    assert data["changed"] and data["pause"]["state"] == "resumed"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("resume", "--queue", "mail"), "No pause in force holds queue 'mail'"),
        (("resume", "--id", "12345"), "No pause in force holds pause 12345"),
        (("pause", "--queue", "bad\x07name", "--reason", "r"), "control characters"),
        (("pause", "--operation", "has space", "--reason", "r"), "may contain only"),
    ],
)
def test_refusals_are_one_command_error_and_change_nothing(args, says):
    before = pause_state()
    with pytest.raises(CommandError, match=says):
        jobs(*args)
    assert pause_state() == before


def test_pause_needs_a_reason():
    with pytest.raises(CommandError, match="--reason"):
        jobs("pause", "--queue", "mail")
    assert not JobPause.objects.exists()
