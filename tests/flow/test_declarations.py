"""Bad flow-control declarations: reported by ``manage.py check`` and refused at every submit.

Proves, for ``rate_limit="10/fortnight"``, a negative ``max_running_per_key`` and a key that is
not a function (on ``@operation`` and on a ``DurableTask``): ``check`` reports
``durable_jobs.E017`` naming the operation, and every way in refuses with ``InputInvalid``
(422 over REST) before writing anything: the store's defer, insert and defer_many,
``submit()``, ``submit_many()``, a workflow, and ``enqueue()``. A bad ``QUEUES`` entry is
``durable_jobs.E018``.
"""

from __future__ import annotations

import django
import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_durable_jobs import submit, submit_many
from django_durable_jobs.checks import check_settings
from django_durable_jobs.rules import registry
from django_durable_jobs.rules.errors import InputInvalid
from django_durable_jobs.workflows import Workflow
from tests.support import assert_refused, db_state, submission

pytestmark = pytest.mark.django_db(transaction=True)

BAD = "flow.badly_declared"
INVALID = "E_JOB_INPUT_INVALID"


def _customer(payload):
    return payload["customer"]


DECLARATIONS = {
    "fortnight": ({"rate_limit": "10/fortnight"}, "rate_limit is written 'N/s', 'N/m' or 'N/h'"),
    "negative": (
        {"max_running_per_key": -2, "concurrency_key": _customer},
        "max_running_per_key is a positive whole number; got -2",
    ),
    "not callable": (
        {"rate_limit": "10/s", "rate_key": "provider"},
        "rate_key is a function of the input; got 'provider'",
    ),
}


@pytest.fixture(params=sorted(DECLARATIONS))
def bad(request):
    """Register ``BAD`` with one bad declaration; yield the text the refusal names."""
    options, fragment = DECLARATIONS[request.param]

    def run(ctx, payload):
        return payload

    registry.operation(BAD, **options)(run)
    yield fragment
    registry.unregister(BAD)


def test_check_reports_the_declaration(bad):
    errors = [e for e in check_settings() if e.id == "durable_jobs.E017"]
    assert len(errors) == 1 and BAD in errors[0].msg and bad in errors[0].msg
    with pytest.raises(SystemCheckError, match="durable_jobs.E017"):
        call_command("check")


def _refused(call, fragment: str) -> None:
    error = assert_refused(InputInvalid, INVALID, call)
    assert BAD in error.message and fragment in error.message


def test_every_store_path_refuses_and_writes_nothing(bad, store):
    _refused(lambda: store.defer(BAD, submission({"customer": "c"})), bad)
    _refused(lambda: store.insert(BAD, submission=submission({"customer": "c"})), bad)
    _refused(lambda: store.defer_many(BAD, [submission({"customer": "c"})]), bad)


def test_submit_submit_many_and_workflows_refuse_and_write_nothing(bad):
    _refused(lambda: submit(BAD, {"customer": "c"}), bad)
    _refused(lambda: submit_many(BAD, [{"customer": "c"}, {"customer": "d"}]), bad)
    graph = Workflow("bad")
    graph.job(BAD, {"customer": "c"})
    _refused(graph.submit, bad)


def test_rest_submit_refuses_with_422_and_writes_nothing(bad):
    from django_durable_jobs.models.tokens import create_token
    from tests.api.support import Api, make_user

    api = Api(create_token(make_user("alice"), "red", "tests").token)
    before = db_state()
    response = api.post("/jobs", {"operation": BAD, "payload": {"customer": "c"}})
    assert response.status_code == 422, response.content
    assert response.json()["code"] == INVALID and bad in response.json()["message"]
    assert db_state() == before


TASK_OPTIONS = {
    "fortnight": {"rate_limit": "10/fortnight"},
    "negative": {"max_running_per_key": -1, "concurrency_key": lambda n=0: n},
    "not callable": {"unique_while": "active", "rate_limit": "1/s", "rate_key": 5},
}


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks needs Django 6")
@pytest.mark.parametrize("name", sorted(TASK_OPTIONS))
def test_a_durable_task_declared_badly_is_reported_and_refused(db, name, flow_tasks):
    from django.tasks import task

    built = task(**TASK_OPTIONS[name])(flow_tasks.bare)
    try:
        errors = [e for e in check_settings() if e.id == "durable_jobs.E017"]
        assert len(errors) == 1 and built.module_path in errors[0].msg
        error = assert_refused(InputInvalid, INVALID, lambda: built.enqueue(1))
        assert built.module_path in error.message
    finally:
        registry.unregister(built.module_path)


def test_a_bad_queue_declaration_is_e018():
    with override_settings(DURABLE_JOBS={"QUEUES": {"mail": {"rate_limit": "10/fortnight"}}}):
        errors = [e for e in check_settings() if e.id == "durable_jobs.E018"]
    assert len(errors) == 1 and "mail" in errors[0].msg


def test_a_good_declaration_is_not_reported():
    from tests.flow import submit_ops  # every flow-control option, declared well

    with submit_ops.registered():
        found = [e for e in check_settings() if e.id in ("durable_jobs.E017", "durable_jobs.E018")]
    assert found == []
