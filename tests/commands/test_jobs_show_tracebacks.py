"""``manage.py jobs show`` prints each failed attempt's exception class and traceback."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from django_durable_jobs.store import DurableJobStore
from tests.support import submission

pytestmark = pytest.mark.django_db(transaction=True)


def run(*args: str) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture
def failed():
    """A job whose attempt failed with an exception, whose retry failed with a message."""
    store = DurableJobStore(actor="w")
    job = store.defer("demo.tb", submission(key="tb"))
    try:
        {}["missing"]
    except KeyError as exc:
        store.fail(store.claim(job.pk), exc)
    store.request_retry(job.pk)
    [lease] = store.claim_next(operations=["demo.tb"])
    store.fail(lease, "gave up")
    return job


def test_show_json_has_each_attempt_s_class_and_traceback(failed):
    history = json.loads(run("show", str(failed.pk), "--json"))["attempt_history"]
    assert [(a["epoch"], a["error_class"]) for a in history] == [(2, ""), (1, "builtins.KeyError")]
    assert history[0]["traceback"] is None
    assert history[1]["traceback"].rstrip().endswith("KeyError: 'missing'")


def test_show_text_names_the_class_and_indents_the_traceback(failed):
    text = run("show", str(failed.pk))
    raised = text[text.index("  epoch 1  failed") :]
    header, message, *traceback = raised.splitlines()
    assert header.endswith("  raised builtins.KeyError")
    assert message == "      KeyError: 'missing'"
    assert traceback[0] == "      Traceback (most recent call last):"
    assert traceback[-1] == "      KeyError: 'missing'"
    second = text[text.index("  epoch 2  failed") : text.index("  epoch 1")]
    assert "raised" not in second and "Traceback" not in second
