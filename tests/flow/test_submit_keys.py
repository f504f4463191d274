"""Flow-control keys computed at submit, per row, on every way in.

Proves: a job of an operation declaring ``rate_key`` / ``concurrency_key`` stores the keys its
functions return for its own input (``Job.rate_key``, ``Job.concurrency_key``), through the
store's defer, insert and defer_many (multi-row statements, PostgreSQL's arrays included),
``submit()``, ``submit_many()``, the REST API, ``django.tasks`` enqueue (the functions get the
task's arguments), a schedule's tick and a workflow's nodes; an operation without keys stores
none; a key function that raises or returns no usable key refuses the submission with
``InputInvalid`` and writes nothing.
"""

from __future__ import annotations

from datetime import timedelta

import django
import pytest

from django_durable_jobs import submit, submit_many
from django_durable_jobs.models import Job
from django_durable_jobs.rules.errors import InputInvalid
from django_durable_jobs.workflows import Workflow
from tests.flow import submit_ops as ops
from tests.support import assert_refused, submission

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _operations():
    with ops.registered():
        yield


INVALID = "E_JOB_INPUT_INVALID"


def _keys(job) -> tuple[str, str, str | None]:
    row = Job.objects.get(pk=job.pk if hasattr(job, "pk") else job)
    return row.rate_key, row.concurrency_key, row.unique_key


def _input(n: int) -> dict:
    return {"provider": f"p{n % 3}", "customer": f"c{n}", "n": n}


def test_the_store_computes_the_keys_of_each_job(store):
    job = store.defer(ops.KEYED, submission(_input(1)))
    assert _keys(job) == ("p1", "c1", None)
    assert (job.rate_key, job.concurrency_key) == ("p1", "c1")  # the returned job too
    lease = store.insert(ops.KEYED, submission=submission(_input(2)))
    assert _keys(lease.job_id) == ("p2", "c2", None)


@pytest.mark.parametrize("count", [1, 2, 7])  # one row, a VALUES list, PostgreSQL's arrays
def test_defer_many_computes_the_keys_per_row(store, count):
    jobs = store.defer_many(ops.KEYED, [submission(_input(n)) for n in range(count)])
    assert [_keys(job) for job in jobs] == [(f"p{n % 3}", f"c{n}", None) for n in range(count)]
    assert [(job.rate_key, job.concurrency_key) for job in jobs] == [
        (f"p{n % 3}", f"c{n}") for n in range(count)
    ]


def test_submit_and_submit_many_compute_the_keys(db):
    assert _keys(submit(ops.KEYED, _input(4))) == ("p1", "c4", None)
    jobs = submit_many(ops.UNIQUE_KEYED, [_input(5), _input(6), _input(5)])
    assert jobs[0].pk == jobs[2].pk
    assert [_keys(job)[:2] for job in jobs] == [("p2", "c5"), ("p0", "c6"), ("p2", "c5")]
    assert all(_keys(job)[2] for job in jobs)


def test_an_operation_without_flow_control_stores_no_keys(store):
    job = store.defer(ops.PLAIN, submission(_input(1)))
    assert _keys(job) == ("", "", None)


def test_rest_submit_computes_the_keys(db):
    from django_durable_jobs.models.tokens import create_token
    from tests.api.support import Api, make_user

    api = Api(create_token(make_user("alice"), "red", "tests").token)
    response = api.post("/jobs", {"operation": ops.KEYED, "payload": _input(7)})
    assert response.status_code == 201, response.content
    assert _keys(response.json()["id"]) == ("p1", "c7", None)


def test_a_schedule_s_tick_gets_the_keys(store, clock):
    from tests.store.schedule_support import declare, every, worker

    spec = every(60, operation=ops.KEYED, payload=_input(8))
    worker(clock).reconcile_schedules(declare(sync=spec))
    store.enqueue_due_ticks(clock() + timedelta(seconds=60))
    assert _keys(Job.objects.get()) == ("p2", "c8", None)


def test_workflow_nodes_get_the_keys(db):
    graph = Workflow("keys")
    first = graph.job(ops.KEYED, _input(1))
    graph.job(ops.UNIQUE_KEYED, _input(2), after=first)
    graph.submit()
    rows = Job.objects.order_by("rate_key")
    assert [(r.operation, r.rate_key, r.concurrency_key, r.unique_key) for r in rows] == [
        (ops.KEYED, "p1", "c1", None),
        (ops.UNIQUE_KEYED, "p2", "c2", None),
    ]


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks needs Django 6")
def test_enqueue_calls_the_key_functions_with_the_task_s_arguments(db, flow_tasks):
    result = flow_tasks.keyed.enqueue("acme", customer="c9", n=3)
    assert _keys(result.id) == ("acme", "c9", None)
    first = flow_tasks.unique.enqueue(1)
    assert flow_tasks.unique.enqueue(1).id == first.id
    assert flow_tasks.unique.enqueue(2).id != first.id


# -- key functions that give no key ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        ({"customer": "c"}, "rate_key raised KeyError"),
        ({"provider": None, "customer": "c"}, "rate_key returned None"),
        ({"provider": "p", "customer": ["c"]}, "concurrency_key returned ['c']"),
        ({"provider": "", "customer": "c"}, "a key is 1-255 characters"),
        ({"provider": "p" * 256, "customer": "c"}, "a key is 1-255 characters"),
    ],
)
def test_a_key_function_without_a_key_refuses_and_writes_nothing(store, payload, fragment):
    error = assert_refused(
        InputInvalid, INVALID, lambda: store.defer(ops.KEYED, submission(payload))
    )
    assert fragment in error.message
    rows = [_input(1), payload]
    error = assert_refused(InputInvalid, INVALID, lambda: submit_many(ops.KEYED, rows))
    assert "Submission 1" in error.message or "Payload 1" in error.message
    graph = Workflow("bad-keys")
    graph.job(ops.KEYED, payload)
    assert_refused(InputInvalid, INVALID, graph.submit)


def test_a_whole_number_is_a_key(store):
    job = store.defer(ops.KEYED, submission({"provider": 7, "customer": 0}))
    assert _keys(job) == ("7", "0", None)
