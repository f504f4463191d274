"""``manage.py jobs schedules``: list (aligned columns or JSON), pause NAME, resume NAME.

Proves: the list is a table under a header, the same formatter as ``jobs list``, with each
schedule's cron expression or interval, time zone, state, next tick, last tick, last job and its
status; ``--json`` gives the same as data; a stored word that could steer the terminal is
escaped; pause and resume go through the store and say whether they changed anything; an
unknown schedule is one ``CommandError`` naming it, and changes nothing.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from django_durable_jobs.models import Schedule
from django_durable_jobs.schedules import next_tick
from tests.schedule_rows import everything, make_schedule, tick_job

pytestmark = pytest.mark.django_db(transaction=True)

HEADER = [
    "NAME",
    "OPERATION",
    "CRON OR INTERVAL",
    "TIME ZONE",
    "STATE",
    "NEXT TICK",
    "LAST TICK",
    "LAST JOB",
    "OUTCOME",
]
T1 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


def run(*args: str) -> str:
    out = StringIO()
    call_command("jobs", "schedules", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def rows():
    nightly = make_schedule("nightly-sales", timezone="Europe/Paris")
    flush = make_schedule("metrics-flush", operation="metrics.flush", interval_seconds=300)
    make_schedule("paused-one", paused_at=timezone.now())
    make_schedule("gone-one", removed_at=timezone.now())
    job = tick_job(nightly, T1)
    return {"nightly": nightly, "flush": flush, "job": job}


def test_the_list_is_an_aligned_table(rows):
    lines = run().rstrip("\n").splitlines()
    header = lines[0]
    assert header.split() == " ".join(HEADER).split()
    starts = [header.index(title) for title in HEADER]
    by_name = {line.split()[0]: line for line in lines[1:]}
    assert sorted(by_name) == ["gone-one", "metrics-flush", "nightly-sales", "paused-one"]
    nightly = by_name["nightly-sales"]
    for start, value in zip(
        starts,
        ["nightly-sales", "tests.noop", "cron 0 3 * * *", "Europe/Paris", "active"],
        strict=False,
    ):
        assert nightly[start:].startswith(value)
    assert nightly[starts[7] :].startswith(str(rows["job"].pk))
    assert nightly[starts[8] :].startswith("pending")
    assert nightly[starts[6] :].startswith("2026-11-30 03:00:00Z (")
    upcoming = next_tick(rows["nightly"], timezone.now())
    assert nightly[starts[5] :].startswith(upcoming.strftime("%Y-%m-%d %H:%M:%SZ (in "))
    assert by_name["metrics-flush"][starts[2] :].startswith("every 5 min")
    assert by_name["paused-one"][starts[4] :].startswith("paused")
    assert by_name["gone-one"][starts[4] :].startswith("removed from code")


def test_json_gives_the_same_schedules_as_data(rows):
    data = {row["name"]: row for row in json.loads(run("--json"))}
    nightly = data["nightly-sales"]
    assert nightly["cron"] == "0 3 * * *" and nightly["every_seconds"] is None
    assert nightly["timezone"] == "Europe/Paris" and nightly["state"] == "active"
    assert nightly["last_job_id"] == str(rows["job"].pk)
    assert nightly["last_job_status"] == "pending"
    assert nightly["last_tick_at"] == T1.isoformat()
    assert datetime.fromisoformat(nightly["next_tick"]) > timezone.now()
    assert nightly["payload"] == '{"kind": "full"}'
    assert data["metrics-flush"]["every_seconds"] == 300 and data["metrics-flush"]["cron"] is None
    assert data["paused-one"]["state"] == "paused" and data["paused-one"]["next_tick"] is None
    assert data["gone-one"]["state"] == "removed"


def test_no_schedule_says_so():
    assert run() == "No schedules: none is declared in code, or no worker started yet.\n"
    assert json.loads(run("--json")) == []


def test_stored_words_are_escaped(db):
    make_schedule("evil\x1b]0;owned\x07", operation="ops.\u202eevil")
    text = run()
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "evil\\x1b]0;owned\\x07" in text and "ops.\\u202eevil" in text


def test_pause_and_resume_go_through_the_store(rows):
    assert run("pause", "nightly-sales") == "Paused schedule nightly-sales.\n"
    row = Schedule.objects.get(name="nightly-sales")
    assert row.paused_at is not None and row.paused_by.startswith("cli:")
    assert run("pause", "nightly-sales") == "Schedule nightly-sales was already paused.\n"
    assert run("resume", "nightly-sales") == "Resumed schedule nightly-sales.\n"
    assert Schedule.objects.get(name="nightly-sales").paused_at is None
    assert run("resume", "nightly-sales") == "Schedule nightly-sales was not paused.\n"


def test_pause_json_says_what_changed(rows):
    report = json.loads(run("pause", "metrics-flush", "--json"))
    assert report == {
        "name": "metrics-flush",
        "paused": True,
        "changed": True,
        "message": "Paused schedule metrics-flush.",
    }
    assert json.loads(run("pause", "metrics-flush", "--json"))["changed"] is False


@pytest.mark.parametrize("verb", ["pause", "resume"])
def test_an_unknown_schedule_is_refused_and_nothing_changes(rows, verb):
    before = everything()
    with pytest.raises(CommandError) as caught:
        run(verb, "no-such\x1b[2J")
    message = str(caught.value)
    assert "no-such" in message and "\x1b" not in message
    assert "nightly-sales" in message  # the store names the schedules there are
    assert everything() == before


def test_a_bad_database_alias_is_refused(rows):
    before = everything()
    with pytest.raises(CommandError, match="--database"):
        run("pause", "nightly-sales", "--database", "nope")
    assert everything() == before


# -- broken rows, NUL bytes -------------------------------------------------------------------------


@pytest.fixture
def broken(rows):
    make_schedule("broken-zone", timezone="Mars/Olympus")
    make_schedule("broken-cron", cron="61 * * * *")


def test_a_broken_row_is_listed_with_its_reason(broken):
    table, _, tail = run().partition("\n\nBroken (not ticking until repaired):\n")
    lines = table.splitlines()
    starts = [lines[0].index(title) for title in HEADER]
    by_name = {line.split()[0]: line for line in lines[1:]}
    for name in ("broken-zone", "broken-cron"):
        assert by_name[name][starts[4] :].startswith("broken")
        assert by_name[name][starts[5] :].startswith("-")  # no next tick
    assert by_name["nightly-sales"][starts[4] :].startswith("active")
    reasons = tail.splitlines()
    assert [line.split(":")[0] for line in reasons] == ["  broken-cron", "  broken-zone"]
    assert "'61 * * * *' is not a cron expression" in reasons[0]
    assert "'Mars/Olympus' is unknown on this host" in reasons[1]


def test_json_gives_a_broken_row_s_problem(broken):
    data = {row["name"]: row for row in json.loads(run("--json"))}
    zone = data["broken-zone"]
    assert (zone["state"], zone["next_tick"]) == ("broken", None)
    assert zone["problem"].startswith("Schedule 'broken-zone': time zone 'Mars/Olympus'")
    assert data["nightly-sales"]["problem"] is None


def test_a_broken_row_is_paused_and_resumed(broken):
    assert run("pause", "broken-zone") == "Paused schedule broken-zone.\n"
    assert Schedule.objects.get(name="broken-zone").paused_at is not None
    assert run("resume", "broken-zone") == "Resumed schedule broken-zone.\n"


@pytest.mark.parametrize("verb", ["pause", "resume"])
@pytest.mark.parametrize("name", ["a\x00b", "\x00"], ids=["nul", "only-nul"])
def test_a_nul_byte_is_no_such_schedule_on_every_database(rows, verb, name):
    # A shell cannot pass a NUL byte in an argument; call_command can.
    make_schedule("a")  # what a NUL byte would cut the name to
    before = everything()
    with pytest.raises(CommandError) as caught:
        run(verb, name)
    message = str(caught.value)
    assert message.startswith(f"There is no schedule {name!r}; schedules: a, gone-one, ")
    assert "\x00" not in message
    assert everything() == before
