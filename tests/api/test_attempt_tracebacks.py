"""GET /jobs/{id}/attempts shows each failed attempt's exception class and traceback."""

from __future__ import annotations

import pytest

from django_durable_jobs.api import schemas
from tests.api.support import OP
from tests.support import submission

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_failed_attempt_shows_its_exception_class_and_traceback(api, red):
    raised = red.defer(OP, submission({"n": 1}, key="raised"))
    try:
        raise ConnectionError("upstream <closed>")
    except ConnectionError as exc:
        red.fail(red.claim(raised.pk), exc)
    told = red.defer(OP, submission({"n": 2}, key="told"))
    red.fail(red.claim(told.pk), "a message only")

    [failed] = api.get(f"/jobs/{raised.pk}/attempts").json()
    assert (failed["outcome"], failed["error_class"]) == ("failed", "builtins.ConnectionError")
    assert failed["traceback"].startswith("Traceback (most recent call last):")
    assert failed["traceback"].rstrip().endswith("ConnectionError: upstream <closed>")
    [plain] = api.get(f"/jobs/{told.pk}/attempts").json()
    assert (plain["error"], plain["error_class"], plain["traceback"]) == (
        "a message only",
        "",
        None,
    )


def test_the_schema_documents_both_fields():
    fields = schemas.AttemptOut.model_json_schema()["properties"]
    assert fields["error_class"]["type"] == "string"
    assert "class path" in fields["error_class"]["description"]
    assert {"type": "null"} in fields["traceback"]["anyOf"]
