"""The schedule page: what each schedule does next, what its last tick left, pause and resume.

Proves: the list shows each schedule's operation, cron expression or interval, time zone, state
(active, paused, removed from code), next tick (in the admin's time zone, with its distance from
now), last tick, a link to its last job and that job's status, and a "jobs" link to the job list
filtered to exactly that schedule's jobs; definitions are read-only (no add, change or delete);
*Pause* and *Resume* (actions and the page's buttons) go through the store and word each answer
in the singular or plural; ``change_schedule`` is needed for them, ``view_schedule`` to see the
pages, and every refusal leaves every row as it was; every query goes to
``DURABLE_JOBS['DATABASE']``.
"""

from __future__ import annotations

import re
import zoneinfo
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db import connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_durable_jobs.models import Job, Schedule
from django_durable_jobs.schedules import next_tick
from django_durable_jobs.store import DurableJobStore
from tests.admin.test_database_alias import OTHER, _second_alias, other_alias  # noqa: F401
from tests.schedule_rows import everything, make_schedule, tick_job
from tests.support import submission

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.admin.urls")]

LIST = "/admin/durable_jobs/schedule/"
JOBS = "/admin/durable_jobs/job/"
T1 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


def page_url(row: Schedule, view: str = "change") -> str:
    return f"{LIST}{row.pk}/{view}/"


def messages_of(response) -> list[tuple[str, str]]:
    return [(m.level_tag, str(m)) for m in response.context["messages"]]


def run_action(client, action: str, *rows: Schedule):
    response = client.post(
        LIST,
        {"action": action, "index": "0", "_selected_action": [str(r.pk) for r in rows]},
        follow=True,
    )
    assert response.status_code == 200
    return messages_of(response)


def staff(client, django_user_model, *codenames: str):
    user = django_user_model.objects.create_user("ops", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client.force_login(user)
    return client


def offered_actions(client) -> set[str]:
    response = client.get(LIST)
    assert response.status_code == 200
    form = response.context["action_form"]
    return set() if form is None else {name for name, _ in form.fields["action"].choices if name}


@pytest.fixture
def rows():
    """Four schedules: a cron with a last job, an interval, a paused and a removed one."""
    nightly = make_schedule("nightly-sales", timezone="Europe/Paris")
    flush = make_schedule("metrics-flush", operation="metrics.flush", interval_seconds=30)
    paused = make_schedule("paused-one", paused_at=timezone.now(), paused_by="admin:someone")
    gone = make_schedule("gone-one", removed_at=timezone.now())
    tick_job(nightly, T1)
    for row in (nightly, flush, paused, gone):
        row.refresh_from_db()
    return {"nightly": nightly, "flush": flush, "paused": paused, "gone": gone}


def cells(html: str, row: Schedule) -> str:
    """Return the HTML of ``row``'s line in the list."""
    at = html.find(f'href="{page_url(row)}"')
    assert at >= 0, f"no line for {row.name}"
    return html[html.rfind("<tr", 0, at) : html.find("</tr>", at)]


# -- the list ---------------------------------------------------------------------------------------


def test_the_list_shows_each_schedule_its_state_and_its_ticks(root, rows):
    html = root.get(LIST).content.decode()
    nightly = cells(html, rows["nightly"])
    assert "nightly-sales" in nightly and "tests.noop" in nightly
    assert "cron 0 3 * * *" in nightly and "Europe/Paris" in nightly
    assert ">active<" in nightly
    # The next tick, computed by the schedules module, shown in the admin's time zone.
    upcoming = next_tick(rows["nightly"], timezone.now())
    shown = timezone.localtime(upcoming).strftime("%Y-%m-%d %H:%M:%S %Z")
    assert f"{shown} (in " in nightly
    # The last tick, its job (a link to its page) and that job's status.
    job = Job.objects.get(pk=rows["nightly"].last_job_id)
    assert timezone.localtime(T1).strftime("%Y-%m-%d %H:%M:%S") in nightly
    assert f'href="{JOBS}{job.pk}/change/"' in nightly
    assert ">pending<" in nightly

    flush = cells(html, rows["flush"])
    assert "every 30 s" in flush and "metrics.flush" in flush and " (in " in flush
    paused = cells(html, rows["paused"])
    assert ">paused<" in paused and "- (paused)" in paused
    gone = cells(html, rows["gone"])
    assert ">removed from code<" in gone and "- (removed from code)" in gone


def test_the_next_tick_is_in_the_admins_time_zone(root, rows):
    with override_settings(TIME_ZONE="America/New_York"):
        html = root.get(LIST).content.decode()
    upcoming = next_tick(rows["nightly"], timezone.now())
    new_york = upcoming.astimezone(zoneinfo.ZoneInfo("America/New_York"))
    assert new_york.strftime("%Y-%m-%d %H:%M:%S %Z") in cells(html, rows["nightly"])


def test_the_jobs_link_lists_exactly_that_schedules_jobs(root, rows):
    nightly = rows["nightly"]
    mine = [Job.objects.get(pk=nightly.last_job_id)]
    mine.append(tick_job(nightly, T1 + timedelta(days=1)))
    # Look-alikes: another schedule whose name starts the same, a key that is not a tick.
    other = make_schedule("nightly-sales:eu")
    tick_job(other, T1)
    make_schedule("nightly")
    tick_job(Schedule.objects.get(name="nightly"), T1)
    DurableJobStore(actor="x").defer("tests.noop", submission(key="schedule:nightly-sales:x"))

    html = root.get(LIST).content.decode()
    link = f'href="{JOBS}?schedule=nightly-sales"'
    assert link in cells(html, nightly)
    response = root.get(JOBS, {"schedule": "nightly-sales"})
    assert response.status_code == 200
    listed = {job.pk for job in response.context["cl"].result_list}
    assert listed == {job.pk for job in mine}
    # The filter is offered on the job list, named after the schedule.
    assert "?schedule=nightly-sales" in response.content.decode()


def test_the_filter_of_an_unknown_schedule_lists_nothing(root, rows):
    response = root.get(JOBS, {"schedule": "no-such-schedule"})
    assert response.status_code == 200
    assert list(response.context["cl"].result_list) == []


def test_the_page_shows_the_definition_read_only(root, rows):
    response = root.get(page_url(rows["nightly"]))
    assert response.status_code == 200
    html = response.content.decode()
    assert "nightly-sales" in html and "Europe/Paris" in html and "&quot;kind&quot;" in html
    assert "<form" in html and 'name="operation"' not in html  # no field to edit
    assert "Pause this schedule" in html and "Resume this schedule" not in html
    paused_html = root.get(page_url(rows["paused"])).content.decode()
    assert "Resume this schedule" in paused_html and "Pause this schedule" not in paused_html


def test_nobody_adds_changes_or_deletes_a_schedule(root, rows):
    before = everything()
    assert root.get(f"{LIST}add/").status_code == 403
    assert root.get(page_url(rows["nightly"], "delete")).status_code == 403
    response = root.post(page_url(rows["nightly"]), {"operation": "evil", "cron": "* * * * *"})
    assert response.status_code == 403
    assert "delete_selected" not in offered_actions(root)
    assert everything() == before


# -- pause and resume -------------------------------------------------------------------------------


def test_pause_action_pauses_through_the_store_and_says_so_per_row(root, rows):
    said = run_action(root, "pause_schedules", rows["nightly"])
    assert said == [("success", "1 schedule paused (nightly-sales).")]
    row = Schedule.objects.get(name="nightly-sales")
    assert row.paused_at is not None and row.paused_by == "admin:root"

    said = run_action(root, "pause_schedules", rows["nightly"], rows["flush"], rows["paused"])
    assert said == [
        (
            "success",
            "1 schedule paused (metrics-flush); "
            "2 schedules were already paused (nightly-sales, paused-one).",
        )
    ]


def test_pausing_paused_schedules_only_warns_and_changes_nothing(root, rows):
    before = everything()
    said = run_action(root, "pause_schedules", rows["paused"])
    assert said == [("warning", "0 schedules paused; 1 schedule was already paused (paused-one).")]
    assert everything() == before


def test_resume_action_resumes_and_says_so_per_row(root, rows):
    run_action(root, "pause_schedules", rows["flush"])
    said = run_action(root, "resume_schedules", rows["flush"], rows["paused"], rows["nightly"])
    assert said == [
        (
            "success",
            "2 schedules resumed (metrics-flush, paused-one); "
            "1 schedule was not paused (nightly-sales).",
        )
    ]
    assert not Schedule.objects.filter(paused_at__isnull=False).exists()


def test_the_buttons_pause_and_resume_one_schedule(root, rows):
    nightly = rows["nightly"]
    response = root.post(page_url(nightly, "pause"), follow=True)
    assert response.redirect_chain[-1][0] == page_url(nightly)
    assert messages_of(response) == [("success", "1 schedule paused (nightly-sales).")]
    assert "Resume this schedule" in response.content.decode()
    assert Schedule.objects.get(pk=nightly.pk).paused_at is not None

    response = root.post(page_url(nightly, "resume"), follow=True)
    assert messages_of(response) == [("success", "1 schedule resumed (nightly-sales).")]
    assert Schedule.objects.get(pk=nightly.pk).paused_at is None


def test_the_buttons_refuse_get_and_unknown_schedules(root, rows):
    before = everything()
    assert root.get(page_url(rows["nightly"], "pause")).status_code == 405
    assert root.post(f"{LIST}999999/pause/").status_code == 404
    assert everything() == before


# -- permissions ------------------------------------------------------------------------------------


def test_view_permission_sees_the_pages_but_cannot_pause(client, django_user_model, rows):
    ops = staff(client, django_user_model, "view_schedule", "view_job")
    assert ops.get(LIST).status_code == 200
    assert offered_actions(ops) == set()
    html = ops.get(page_url(rows["nightly"])).content.decode()
    assert "Pause this schedule" not in html
    before = everything()
    said = run_action(ops, "pause_schedules", rows["nightly"])
    assert not any("paused" in text for _, text in said)
    assert ops.post(page_url(rows["nightly"], "pause")).status_code == 403
    assert ops.post(page_url(rows["paused"], "resume")).status_code == 403
    assert everything() == before


def test_without_view_permission_there_is_no_page(client, django_user_model, rows):
    ops = staff(client, django_user_model, "view_job")
    before = everything()
    assert ops.get(LIST).status_code == 403
    assert ops.post(page_url(rows["nightly"], "pause")).status_code == 403
    assert everything() == before


def test_change_permission_pauses_and_resumes(client, django_user_model, rows):
    ops = staff(client, django_user_model, "change_schedule")
    assert offered_actions(ops) == {"pause_schedules", "resume_schedules"}
    said = run_action(ops, "pause_schedules", rows["nightly"])
    assert said == [("success", "1 schedule paused (nightly-sales).")]
    assert Schedule.objects.get(name="nightly-sales").paused_by == "admin:ops"
    response = ops.post(page_url(rows["nightly"], "resume"), follow=True)
    assert messages_of(response) == [("success", "1 schedule resumed (nightly-sales).")]


# -- the database -----------------------------------------------------------------------------------

SCHEDULE_TABLE = re.compile(r"durable_jobs_(schedule|job)\b")


@pytest.mark.django_db(transaction=True, databases=["default", OTHER])
def test_every_schedule_query_goes_to_the_jobs_database(root, rows, other_alias):  # noqa: F811
    nightly = rows["nightly"]
    with (
        CaptureQueriesContext(connections["default"]) as on_default,
        CaptureQueriesContext(other_alias) as on_other,
    ):
        assert root.get(LIST).status_code == 200
        assert root.get(page_url(nightly)).status_code == 200
        assert root.get(JOBS, {"schedule": nightly.name}).status_code == 200
        run_action(root, "pause_schedules", nightly)
        root.post(page_url(nightly, "resume"))
    strays = [q["sql"] for q in on_default.captured_queries if SCHEDULE_TABLE.search(q["sql"])]
    assert strays == []
    assert any("durable_jobs_schedule" in q["sql"] for q in on_other.captured_queries)


# -- broken rows, NUL bytes -------------------------------------------------------------------------


@pytest.fixture
def broken():
    """Two rows this server cannot read: an unknown time zone and a bad cron expression."""
    return {
        "zone": make_schedule("broken-zone", timezone="Mars/Olympus"),
        "cron": make_schedule("broken-cron", cron="61 * * * *"),
    }


def test_the_list_shows_a_broken_row_with_a_red_badge_and_the_reason(root, rows, broken):
    response = root.get(LIST)
    assert response.status_code == 200
    html = response.content.decode()
    for row, words in ((broken["zone"], "Mars/Olympus"), (broken["cron"], "61 * * * *")):
        line = cells(html, row)
        assert ">broken<" in line and "#c0392b" in line
        assert "durable-jobs-problem" in line and words in line and "declaration" in line
        # What is wrong fits the cell; the whole reason, with its fix, is its title.
        shown = re.search(r'class="durable-jobs-problem" title="([^"]*)"[^>]*>([^<]*)<', line)
        assert shown and "declaration" in shown[1] and "declaration" not in shown[2]
        assert words in shown[2] and len(shown[2]) < 100
        assert "- (broken)" in line  # no next tick
    assert ">active<" in cells(html, rows["nightly"])  # the others read as before


def test_the_page_of_a_broken_row_shows_the_reason_and_pauses(root, broken):
    row = broken["zone"]
    response = root.get(page_url(row))
    assert response.status_code == 200
    html = response.content.decode()
    assert ">broken<" in html and "Mars/Olympus" in html and "unknown on this host" in html
    assert "pip install -U tzdata" in html  # the fix, on the page itself
    response = root.post(page_url(row, "pause"), follow=True)
    assert messages_of(response) == [("success", "1 schedule paused (broken-zone).")]
    assert Schedule.objects.get(pk=row.pk).paused_at is not None
    said = run_action(root, "resume_schedules", broken["zone"], broken["cron"])
    assert said == [
        ("success", "1 schedule resumed (broken-zone); 1 schedule was not paused (broken-cron).")
    ]


@pytest.mark.parametrize(
    "query",
    [{"q": "\x00"}, {"q": "a\x00b"}, {"operation": "\x00"}, {"scope": "\x00"}, {"o": "\x00"}],
    ids=["q", "q-inside", "operation", "scope", "order"],
)
def test_a_nul_byte_in_the_list_s_query_is_refused_the_same_on_every_database(root, rows, query):
    before = everything()
    response = root.get(LIST, query)
    assert response.status_code == 400
    assert "NUL byte" in response.content.decode()  # a 400, not a 500 on PostgreSQL
    assert everything() == before


def test_a_nul_byte_in_a_schedule_s_address_finds_no_schedule(root, rows):
    before = everything()
    assert root.post(f"{LIST}a%00b/pause/").status_code == 404
    response = root.get(f"{LIST}a%00b/change/", follow=True)
    assert response.status_code == 200  # the admin's "does not exist" redirect
    assert everything() == before
