"""``manage.py jobs`` end to end: list, show, cancel, retry, ``--json`` and the error exits.

Rows are made through the store (a clock an hour in the past makes a lease that is expired now);
the command runs through ``call_command`` and, once, as a real ``python -m django`` process. Every
refusal is proven to exit non-zero and to leave the database unchanged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from django_durable_jobs.models import ApiToken, Job, JobAttempt
from django_durable_jobs.store import DurableJobStore
from tests.support import REPO_ROOT, FakeClock, db_state, submission

pytestmark = pytest.mark.django_db(transaction=True)

LIST_FIELDS = {
    "id",
    "operation",
    "status",
    "ownership",
    "attempts",
    "epoch",
    "progress",
    "claimed_by",
    "heartbeat_age_seconds",
    "scope",
    "queue",
}


@pytest.fixture
def jobs():
    """Make one job in each state triage cares about; return them by name."""
    now = timezone.now()
    past = FakeClock(now=now - timedelta(minutes=60))
    old = DurableJobStore(actor="old-worker", lease_seconds=10, clock=past)
    live = DurableJobStore(actor="live-worker", lease_seconds=3600)

    pending = old.defer("demo.pending", submission({"n": 1}, key="p"), queue="slow")
    past.now = now - timedelta(minutes=50)
    expired = old.defer("demo.expired", submission({"n": 2}, key="e", scope="tenant-a"))
    old.claim(expired.pk)  # its lease ran out ten seconds later, long ago
    past.now = now - timedelta(minutes=45)
    current = old.defer("demo.current", submission({"n": 3}, key="c"))
    live.progress(live.claim(current.pk), 40)
    past.now = now - timedelta(minutes=40)
    complete = old.defer("demo.complete", submission({"deep": {"a": [1, 2]}}, key="d"))
    old.claim(complete.pk)
    live.complete(live.claim(complete.pk), {"ok": True})  # takes over: interrupted + complete
    return {"pending": pending, "expired": expired, "current": current, "complete": complete}


def run(*args: str) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def run_refused(*args: str) -> tuple[str, str]:
    """Run a command that must exit 1; return its stdout and the CommandError message."""
    out = StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("jobs", *args, stdout=out, stderr=StringIO())
    assert caught.value.returncode == 1
    return out.getvalue(), str(caught.value)


def row(pk) -> Job:
    return Job.objects.get(pk=pk)


# -- list ----------------------------------------------------------------------------------------


def test_list_json_has_every_job_with_its_ownership_newest_first(jobs):
    data = json.loads(run("list", "--json"))
    assert [r["id"] for r in data] == [
        str(jobs[n].pk) for n in ("complete", "current", "expired", "pending")
    ]
    assert all(LIST_FIELDS <= set(r) for r in data)
    by_id = {r["id"]: r for r in data}
    expired = by_id[str(jobs["expired"].pk)]
    assert expired["ownership"] == "expired" and expired["status"] == "running"
    assert expired["claimed_by"] == "old-worker" and expired["epoch"] == 1
    assert expired["heartbeat_age_seconds"] >= 50 * 60 - 5
    assert expired["scope"] == "tenant-a"
    current = by_id[str(jobs["current"].pk)]
    assert (current["ownership"], current["progress"], current["attempts"]) == ("current", 40, 1)
    assert by_id[str(jobs["pending"].pk)]["ownership"] == "unclaimed"
    assert by_id[str(jobs["pending"].pk)]["heartbeat_age_seconds"] is None
    complete = by_id[str(jobs["complete"].pk)]
    assert (complete["ownership"], complete["epoch"], complete["attempts"]) == ("terminal", 2, 2)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--ownership", "expired"], ["expired"]),
        (["--ownership", "current"], ["current"]),
        (["--ownership", "unclaimed"], ["pending"]),
        (["--ownership", "terminal"], ["complete"]),
        (["--ownership", "legacy-unknown"], []),
        (["--status", "running"], ["current", "expired"]),
        (["--status", "complete"], ["complete"]),
        (["--operation", "demo.current"], ["current"]),
        (["--scope", "tenant-a"], ["expired"]),
        (["--queue", "slow"], ["pending"]),
        (["--status", "running", "--ownership", "current"], ["current"]),
        (["--limit", "2"], ["complete", "current"]),
    ],
)
def test_list_filters_like_the_admin(jobs, args, expected):
    data = json.loads(run("list", "--json", *args))
    assert [r["id"] for r in data] == [str(jobs[name].pk) for name in expected]


def test_list_table_shows_the_columns_and_relative_heartbeat(jobs):
    text = run("list")
    header, *lines = text.strip().splitlines()
    for title in ("ID", "OPERATION", "STATUS", "OWNERSHIP", "ATTEMPTS", "EPOCH", "PROGRESS"):
        assert title in header
    assert "CLAIMED BY" in header and "HEARTBEAT" in header
    assert len(lines) == 4
    expired_line = next(line for line in lines if str(jobs["expired"].pk) in line)
    assert "expired" in expired_line and "old-worker" in expired_line
    assert "50 min ago" in expired_line
    current_line = next(line for line in lines if str(jobs["current"].pk) in line)
    assert "40%" in current_line and "current" in current_line


def test_list_with_no_match_says_so_and_json_is_an_empty_list(jobs):
    assert run("list", "--operation", "nothing.here").strip() == "No jobs match."
    assert json.loads(run("list", "--json", "--operation", "nothing.here")) == []


@pytest.mark.parametrize(
    "args", [["--ownership", "stuck"], ["--status", "done"], ["--limit", "0"], ["--limit", "x"]]
)
def test_list_rejects_bad_filters(jobs, args):
    with pytest.raises(CommandError):
        run("list", *args)


# -- show ----------------------------------------------------------------------------------------


def test_show_json_has_every_field_and_the_attempts_newest_first(jobs):
    job = row(jobs["complete"].pk)
    data = json.loads(run("show", str(job.pk), "--json"))
    for field in Job._meta.concrete_fields:
        assert field.attname in data
    assert data["id"] == str(job.pk) and data["status"] == "complete"
    assert data["proposal"] == job.proposal  # the exact stored text
    assert json.loads(data["result"]) == {"ok": True}
    assert data["ownership"] == "terminal" and data["diagnostic_error"] is None
    history = data["attempt_history"]
    assert [(a["epoch"], a["outcome"]) for a in history] == [(2, "complete"), (1, "interrupted")]
    assert history[0]["claimed_by"] == "live-worker" and history[1]["claimed_by"] == "old-worker"
    assert history[1]["error"]  # the interrupted attempt says why its outcome is unknown
    assert JobAttempt.objects.filter(job=job).count() == 2


def test_show_text_pretty_prints_proposal_and_result_and_lists_attempts(jobs):
    text = run("show", str(jobs["complete"].pk))
    assert "id" in text and str(jobs["complete"].pk) in text
    assert "proposal:" in text and '\n      "a": [\n' in text  # indented JSON
    assert 'result:\n  {\n    "ok": true\n  }' in text
    assert "attempts (2, newest first):" in text
    assert text.index("epoch 2  complete") < text.index("epoch 1  interrupted")


def test_show_of_an_unknown_id_exits_1():
    missing = uuid.uuid4()
    with pytest.raises(CommandError, match=f"No job {missing}") as caught:
        run("show", str(missing))
    assert caught.value.returncode == 1


def test_show_of_a_malformed_id_exits_1():
    with pytest.raises(CommandError, match="not a job id"):
        run("show", "not-a-uuid")


# -- cancel --------------------------------------------------------------------------------------


def test_cancel_expired_running_job_records_the_request_and_keeps_it_running(jobs):
    pk = jobs["expired"].pk
    data = json.loads(run("cancel", str(pk), "--json"))
    assert data == [
        {
            "id": str(pk),
            "ok": True,
            "outcome": "requested",
            "status": "running",
            "message": data[0]["message"],
        }
    ]
    job = row(pk)
    assert job.cancellation_requested_at is not None and job.status == "running"
    assert job.fencing_epoch == 1  # the owner is not changed, only asked


def test_cancel_pending_job_cancels_it_and_reports_each_id_in_text(jobs):
    pending, current = jobs["pending"].pk, jobs["current"].pk
    text = run("cancel", str(pending), str(current))
    assert f"{pending}: cancelled (it had not started)" in text
    assert f"{current}: cancellation requested" in text
    assert row(pending).status == "cancelled"
    assert row(current).status == "running" and row(current).cancellation_requested_at


def test_cancel_twice_reports_the_earlier_request(jobs):
    pk = jobs["current"].pk
    run("cancel", str(pk))
    first = row(pk).cancellation_requested_at
    assert "already requested" in run("cancel", str(pk))
    assert row(pk).cancellation_requested_at == first


def test_cancel_of_a_finished_job_is_refused_and_changes_nothing(jobs):
    before = db_state()
    out, message = run_refused("cancel", str(jobs["complete"].pk), "--json")
    assert json.loads(out)[0]["outcome"] == "finished"
    assert "already complete" in message and "1 of 1 request(s) refused" in message
    assert db_state() == before


def test_cancel_with_an_unknown_and_a_malformed_id_still_handles_the_good_one(jobs):
    missing, good = uuid.uuid4(), jobs["current"].pk
    out, message = run_refused("cancel", str(missing), "nope", str(good), "--json")
    results = json.loads(out)
    assert [(r["id"], r["ok"], r["outcome"]) for r in results] == [
        (str(missing), False, "unknown"),
        ("nope", False, "malformed"),
        (str(good), True, "requested"),
    ]
    assert "2 of 3 request(s) refused" in message and "no such job" in message
    assert row(good).cancellation_requested_at is not None


# -- retry ---------------------------------------------------------------------------------------


def test_retry_expired_job_records_the_request(jobs):
    pk = jobs["expired"].pk
    data = json.loads(run("retry", str(pk), "--json"))
    assert [(r["id"], r["ok"], r["outcome"]) for r in data] == [(str(pk), True, "requested")]
    assert row(pk).retry_requested_at is not None


def test_retry_of_a_complete_job_is_refused_and_changes_nothing(jobs):
    before = db_state()
    out, message = run_refused("retry", str(jobs["complete"].pk))
    assert "is complete and is never reopened" in message
    assert "never reopened" in out
    assert db_state() == before


def test_retry_of_a_job_that_has_not_ended_is_refused(jobs):
    before = db_state()
    _, message = run_refused("retry", str(jobs["pending"].pk), str(jobs["current"].pk))
    assert "2 of 2 request(s) refused" in message and "nothing to retry" in message
    assert db_state() == before


def test_retry_of_unknown_and_malformed_ids_exits_1(jobs):
    before = db_state()
    out, message = run_refused("retry", str(uuid.uuid4()), "12", "--json")
    assert [r["outcome"] for r in json.loads(out)] == ["unknown", "malformed"]
    assert db_state() == before


# -- command surface -----------------------------------------------------------------------------


def test_a_subcommand_is_required():
    with pytest.raises(CommandError):
        run()


# A fresh interpreter in which neither django-ninja nor the REST API package can be imported.
WITHOUT_THE_API = """
import json, sys
from importlib.abc import MetaPathFinder

HIDDEN = ("ninja", "django_durable_jobs.api")


def hidden(name):
    return any(name == top or name.startswith(top + ".") for top in HIDDEN)


class WithoutTheApi(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if hidden(name):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, WithoutTheApi())
import django

django.setup()
from django.core.management import call_command

call_command("jobs", "token", "create", "--user", "robot", "--scope", "tenant-a", "--name", "ci")
call_command("jobs", "token", "list", "--json")
assert not [name for name in sys.modules if hidden(name)], "the REST API was imported"
try:
    import django_durable_jobs.api
except ImportError:
    print("the REST API stayed hidden")
"""


def test_token_needs_no_rest_api(db_settings_env):
    """``jobs token`` mints and lists tokens where the REST API (django-ninja) cannot be imported."""
    get_user_model().objects.create_user("robot")
    ran = subprocess.run(
        [sys.executable, "-c", WITHOUT_THE_API],
        env={**os.environ, **db_settings_env},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert "Created token" in ran.stdout and ran.stdout.endswith("the REST API stayed hidden\n")
    (row,) = ApiToken.objects.all()
    assert (row.user.get_username(), row.scope, row.name) == ("robot", "tenant-a", "ci")
    assert f'"prefix": "{row.prefix}"' in ran.stdout


def test_token_subcommands_create_list_and_revoke():
    get_user_model().objects.create_user("robot")
    created = run("token", "create", "--user", "robot", "--scope", "tenant-a", "--name", "ci")
    assert "Created token" in created and "robot" in created
    listed = run("token", "list")
    assert "robot" in listed and "tenant-a" in listed
    out, message = run_refused("token", "revoke", "999999")
    assert out == "" and message == "No active token has id 999999; see jobs token list."


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "django", "jobs", *args],
        env={**os.environ, **env},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_real_process_lists_json_and_exits_1_on_refusal(jobs, db_settings_env):
    listed = _manage(db_settings_env, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    assert {r["id"] for r in data} == {str(j.pk) for j in jobs.values()}
    assert all(LIST_FIELDS <= set(r) for r in data)

    before = db_state()
    refused = _manage(db_settings_env, "retry", str(jobs["complete"].pk))
    assert refused.returncode == 1
    assert "CommandError" in refused.stderr and "never reopened" in refused.stderr
    unknown = _manage(db_settings_env, "show", str(uuid.uuid4()))
    assert unknown.returncode == 1 and "No job" in unknown.stderr
    assert db_state() == before
