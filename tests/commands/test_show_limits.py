"""``manage.py jobs show`` prints any stored JSON in bounded size and time; ``--raw`` prints it whole.

No ``jobs`` subcommand takes job input, so the depth limit meets the CLI where it prints: the
biggest input the app accepts (1 MiB, 64 levels deep, wide) is shown in under 200 KB with a
marker naming the ``--raw`` command; ``--raw proposal|checkpoint|result`` prints the exact stored
text; rows written outside the app with JSON 10,000 levels deep are listed and shown (as stored
text with a note, and as ``--json``) without a crash.
"""

from __future__ import annotations

import json
import time
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from django_durable_jobs.models import Job
from django_durable_jobs.rules.jsontext import DISPLAY_CAP_BYTES
from django_durable_jobs.store import DurableJobStore, Submission
from tests.deep_json import deep_outside_rows, maximal_text, nested_text, outside_row
from tests.support import db_state

pytestmark = pytest.mark.django_db(transaction=True)

OUTPUT_BYTES_MAX = 200_000
SECONDS_MAX = 10.0  # generous: it takes well under a second


def run(*args: str) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out)
    return out.getvalue()


def timed(*args: str) -> tuple[str, float]:
    started = time.monotonic()
    text = run(*args)
    return text, time.monotonic() - started


@pytest.fixture
def maximal() -> Job:
    """A complete job whose input, checkpoint and result are each about the biggest accepted."""
    store = DurableJobStore(actor="cli-test", lease_seconds=600)
    job = store.defer("demo.op", Submission(None, "maximal", maximal_text()))
    lease = store.claim(job.pk)
    store.checkpoint(lease, maximal_text())
    store.complete(lease, [nested_text(10)] * 40_000)
    return Job.objects.get(pk=job.pk)


def test_show_of_a_maximal_input_is_small_and_fast():
    store = DurableJobStore(actor="cli-test")
    job = store.defer("demo.op", Submission(None, "input", maximal_text()))
    text, seconds = timed("show", str(job.pk))
    assert len(text.encode("utf-8")) < OUTPUT_BYTES_MAX
    assert seconds < SECONDS_MAX
    assert f"; all of it: manage.py jobs show {job.pk} --raw proposal" in text


def test_show_caps_each_stored_value(maximal):
    text, seconds = timed("show", str(maximal.pk))
    assert len(text.encode("utf-8")) < 3 * DISPLAY_CAP_BYTES + 20_000  # three capped values
    assert seconds < SECONDS_MAX
    for field in ("proposal", "checkpoint", "result"):
        assert f"; all of it: manage.py jobs show {maximal.pk} --raw {field}" in text
    assert text.count("… truncated: showing ") == 3
    assert " of 1,048,576 bytes" in text
    assert 'proposal:\n  [\n    {\n      "k": {' in text


@pytest.mark.parametrize("field", ["proposal", "checkpoint", "result"])
def test_raw_prints_the_exact_stored_text(maximal, field):
    text, seconds = timed("show", str(maximal.pk), "--raw", field)
    assert text == getattr(maximal, field)
    assert seconds < SECONDS_MAX


def test_raw_of_a_value_that_is_not_stored_exits_1():
    job = DurableJobStore(actor="cli-test").defer("demo.op", Submission(None, "k", "{}"))
    before = db_state()
    with pytest.raises(CommandError, match=f"Job {job.pk} has no stored checkpoint") as caught:
        run("show", str(job.pk), "--raw", "checkpoint")
    assert caught.value.returncode == 1
    with pytest.raises(CommandError, match="invalid choice"):
        run("show", str(job.pk), "--raw", "error")
    assert db_state() == before


def test_raw_escapes_control_characters_on_a_terminal(monkeypatch):
    job = DurableJobStore(actor="cli-test").defer(
        "demo.op", Submission(None, "k", '["\u009b2J", "\u202e"]')
    )
    out = StringIO()
    out.isatty = lambda: True  # type: ignore[method-assign]
    call_command("jobs", "show", str(job.pk), "--raw", "proposal", stdout=out)
    assert out.getvalue() == '["\\x9b2J", "\\u202e"]'
    piped = run("show", str(job.pk), "--raw", "proposal")
    assert piped == '["\u009b2J", "\u202e"]'  # the exact text when piped


def test_a_small_value_is_shown_whole_without_a_marker():
    job = DurableJobStore(actor="cli-test").defer("demo.op", Submission(None, "k", '{"a": [1]}'))
    text = run("show", str(job.pk))
    assert 'proposal:\n  {\n    "a": [\n      1\n    ]\n  }' in text
    assert "truncated" not in text


# -- rows written outside the app ------------------------------------------------------------------


@pytest.fixture
def deep_rows() -> dict[str, Job]:
    now = timezone.now()
    deep = nested_text(10_000)
    rows = deep_outside_rows(deep, now=now, operation="demo.op")
    rows["huge-invalid"] = outside_row(
        maximal_text()[:-1], key="huge", now=now, operation="demo.op"
    )
    Job.objects.bulk_create(rows.values())
    return rows


def test_deep_rows_written_outside_the_app_are_listed(deep_rows):
    listed = json.loads(run("list", "--json"))
    states = {row["id"]: row["ownership"] for row in listed}
    assert states[str(deep_rows["unchecked"].pk)] == "legacy-unknown"
    assert states[str(deep_rows["done"].pk)] == "terminal"
    assert "legacy-unknown" in run("list", "--ownership", "legacy-unknown")


def test_deep_rows_written_outside_the_app_are_shown_as_stored_text(deep_rows):
    for name, row in deep_rows.items():
        text, seconds = timed("show", str(row.pk))
        assert len(text.encode("utf-8")) < OUTPUT_BYTES_MAX and seconds < SECONDS_MAX, name
        data = json.loads(run("show", str(row.pk), "--json"))
        assert data["proposal"] == row.proposal  # --json keeps the exact stored text
        assert data["diagnostic_error"], name
    done = run("show", str(deep_rows["done"].pk))
    assert (
        "result:\n  (nested 10,000 levels deep, deeper than the 64 this app reads; stored text "
        "follows)\n  [[[[" in done
    )
    huge = run("show", str(deep_rows["huge-invalid"].pk))
    assert "proposal:\n  (not valid JSON; stored text follows)\n  [{" in huge
    assert "--raw proposal" in huge and "… truncated: showing 65,536 of 1,048,575 bytes" in huge
    raw = run("show", str(deep_rows["done"].pk), "--raw", "result")
    assert raw == nested_text(10_000)
