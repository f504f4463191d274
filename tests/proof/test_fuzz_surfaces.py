"""Fuzzing every entry point above the store: submit, @operation, schedules, the REST API, commands.

Proves, on every database, with generated input, that

- ``submit`` / ``submit_many`` (payloads, keys, scope, queue, priority, run_after, database alias
  of every type) store exactly the canonical JSON of the payload, or refuse with a ``JobError``
  and write nothing, inside the caller's transaction too;
- ``@operation(...)`` registers exactly the options it was given or refuses them with a
  ``JobError`` and leaves the registry as it was; a registered retry policy can be carried out
  (failing a job schedules its retry) or the failure is still recorded;
- a schedule declaration (``DURABLE_JOBS["SCHEDULES"]`` entry or ``@operation(schedule=...)``)
  parses or is refused with ``InputInvalid`` naming it, and ``problems()`` (what ``manage.py
  check`` reports) says so exactly when parsing refuses;
- the REST API answers every body, query string and path, for a user with every permission, one
  with none and an anonymous caller, with 2xx or a clean 4xx whose body is exactly
  ``{"code", "message"}``, never a 500, and a refusal writes nothing; an accepted submission
  stored what it said;
- ``manage.py jobs`` either runs or ends in a ``CommandError`` that wrote nothing, and
  ``manage.py runjobs`` refuses a bad option with a ``CommandError`` before anything starts
  (only option sets its own checks refuse are run: no worker is ever started here).
"""

from __future__ import annotations

import json
import uuid
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command, load_command_class
from django.core.management.base import CommandError
from django.test import Client, override_settings
from hypothesis import event, example, given
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from django_durable_jobs import submit, submit_many
from django_durable_jobs.models import ApiToken, Job, JobAttempt, WorkerProcess
from django_durable_jobs.models.tokens import create_token
from django_durable_jobs.rules import registry
from django_durable_jobs.rules.errors import JobError
from django_durable_jobs.rules.retry import RetryPolicy
from django_durable_jobs.rules.validation import loads_strict
from django_durable_jobs.rules.values import canonical_json
from django_durable_jobs.schedules import declared
from django_durable_jobs.store import DurableJobStore
from tests.api.support import BASE, make_user
from tests.proof import strategies as fz
from tests.support import T0, FakeClock, db_state, live_clock, submission

pytestmark = [pytest.mark.proof]

OP = "tests.noop"  # registered by tests/testapp/jobs.py


def note(text: str) -> None:
    """Count ``text`` in Hypothesis' statistics (``--hypothesis-show-statistics``)."""
    if currently_in_test_context():
        event(text)


def refusal(call, what: Any, label: str = "") -> JobError | None:
    """Run ``call``; return None when accepted, or its ``JobError`` after proving nothing changed."""
    before = db_state()
    try:
        call()
    except JobError as exc:
        note(f"{label} refused: {exc.code}")
        assert isinstance(exc.code, str) and exc.code.startswith("E_"), (what, exc)
        assert exc.message, (what, exc)
        assert db_state() == before, f"refusing {what!r} ({exc.code}) changed the database"
        return exc
    note(f"{label} accepted")
    return None


# -- submit and submit_many, in the caller's transaction --------------------------------------------

SUBMIT_ARGUMENTS = {
    "operation": (st.just(OP), st.one_of(fz.names(), fz.anything())),
    "payload": (fz.json_values(), st.one_of(fz.anything(), fz.deep_values())),
    "scope": (st.sampled_from([None, "default", "fuzz"]), fz.names()),
    "key": (st.one_of(st.none(), fz.plausible_names()), fz.names()),
    "queue": (st.one_of(st.none(), fz.plausible_names()), fz.names()),
    "priority": (st.integers(-100, 100), st.one_of(fz.integers(), fz.scalars())),
    "run_after": (
        st.one_of(st.none(), fz.plausible_times()),
        st.one_of(fz.datetimes(), fz.scalars()),
    ),
    "using": (st.sampled_from([None, "default"]), st.one_of(fz.names(), fz.anything())),
    "count": (st.integers(0, 3), st.one_of(st.just(10_001), fz.anything())),
    "keys": (st.sampled_from(["none", "each"]), fz.anything()),
}
VALID_SUBMIT = {
    "operation": OP,
    "payload": {},
    "scope": None,
    "key": None,
    "queue": None,
    "priority": 0,
    "run_after": None,
    "using": None,
    "count": 1,
    "keys": "none",
}


@pytest.mark.django_db
@fz.fuzz_settings(60)
@given(many=st.booleans(), args=fz.arguments(**SUBMIT_ARGUMENTS))
# An operation name of a type no dict key can be raised TypeError in the registry lookup.
@example(many=False, args={**VALID_SUBMIT, "operation": ["tests.noop"]})
@example(many=True, args={**VALID_SUBMIT, "operation": {"a": 1}})
def test_submit_stores_the_canonical_payload_or_refuses_without_a_write(many, args):
    options = {
        "scope": args["scope"],
        "queue": args["queue"],
        "priority": args["priority"],
        "run_after": args["run_after"],
        "using": args["using"],
    }
    operation, payload = args["operation"], args["payload"]
    if many:
        count, keys = args["count"], args["keys"]
        payloads = [payload] * count if isinstance(count, int) else count
        if keys == "none":
            keys = None
        elif keys == "each" and isinstance(count, int):
            key = args["key"]
            keys = [None if key is None else f"{key}-{i}" for i in range(min(count, 3))]
        call = lambda: submit_many(operation, payloads, idempotency_keys=keys, **options)  # noqa: E731
    else:
        call = lambda: submit(operation, payload, idempotency_key=args["key"], **options)  # noqa: E731
    earlier = set(Job.objects.values_list("pk", flat=True))
    jobs: list = []
    error = refusal(lambda: jobs.append(call()), args, "submit_many" if many else "submit")
    if error is not None:
        return
    stored = jobs[0] if many else [jobs[0]]
    sent = list(payloads) if many else [payload]  # a hostile count may be the payloads itself
    assert len(stored) == len(sent)
    for job, given_payload in zip(stored, sent, strict=True):
        row = Job.objects.get(pk=job.pk)
        assert row.operation == OP and row.proposal == canonical_json(given_payload)
        assert loads_strict(row.proposal) == json.loads(canonical_json(given_payload))
        if row.pk not in earlier:  # new, not an identical earlier submission returned as it is
            assert row.status == "pending" and row.priority == args["priority"]
            assert row.queue == (args["queue"] or "default")


# -- @operation declarations ------------------------------------------------------------------------


def _retry_policies() -> st.SearchStrategy[Any]:
    number = st.one_of(fz.floats(), fz.integers(), fz.scalars(), st.floats(1e5, 1e300))
    return st.one_of(
        st.builds(
            lambda *a: ("policy", a),
            fz.sometimes(st.integers(1, 5), fz.scalars()),
            fz.sometimes(st.floats(0, 60), number),
            fz.sometimes(st.floats(0, 3600), number),
            fz.sometimes(st.floats(0, 1), number),
        ),
        fz.sometimes(st.integers(1, 5), fz.anything()),
    )


OPERATION_ARGUMENTS = {
    "name": (fz.plausible_names(), st.one_of(fz.names(), fz.anything())),
    "on_expired": (st.sampled_from(["hold", "resume"]), st.one_of(fz.names(), fz.anything())),
    "max_running": (st.one_of(st.none(), st.integers(1, 10)), fz.scalars()),
    "timeout": (
        st.one_of(st.none(), st.floats(0.001, 3600)),
        st.one_of(fz.floats(), fz.integers(), fz.scalars()),
    ),
    "max_attempts": (st.one_of(st.none(), st.integers(1, 5)), fz.scalars()),
    "retry": (st.none(), _retry_policies()),
    "schedule": (st.none(), st.one_of(fz.names(), fz.anything())),
    "func": (st.just("a function"), fz.anything()),
}


def _job(ctx, payload):  # noqa: ANN001, ANN202 - the executor registered by the fuzz
    return None


VALID_OPERATION = {
    "name": "op",
    "on_expired": "hold",
    "max_running": None,
    "timeout": None,
    "max_attempts": None,
    "retry": None,
    "schedule": None,
    "func": "a function",
}


@pytest.mark.django_db(transaction=True)
@fz.fuzz_settings(40)
@given(args=fz.arguments(**OPERATION_ARGUMENTS))
# A policy whose backoff overflowed the clock: fail() raised OverflowError (the job stayed
# running, and a worker's whole flush of outcomes failed with it). Delays are now at most 30 days.
@example(args={**VALID_OPERATION, "retry": ("policy", (3, 1e300, 1e300, 0.1))})
@example(args={**VALID_OPERATION, "retry": ("policy", (3, 1e12, 1e12, 0.0))})
@example(args={**VALID_OPERATION, "retry": ("policy", (3, 30 * 86400, 30 * 86400, 1.0))})
def test_an_operation_is_registered_as_declared_or_refused_leaving_the_registry_alone(args):
    name = args["name"]
    if isinstance(name, str):
        name = f"fuzz.{uuid.uuid4().hex[:8]}.{name}"  # unique: never an operation of the suite
    retry = args["retry"]
    policy_error = None
    if isinstance(retry, tuple) and retry[0] == "policy":
        try:
            retry = RetryPolicy(*retry[1])
        except JobError as exc:
            policy_error = exc  # refused at construction: a JobError, as it should be
            retry = None
    func = _job if args["func"] == "a function" else args["func"]
    options = {k: args[k] for k in ("on_expired", "max_running", "timeout", "max_attempts")}
    before = registry.all_operations()
    try:
        registered = []
        error = refusal(
            lambda: registered.append(
                registry.operation(name, **options, retry=retry, schedule=args["schedule"])(func)
            ),
            args,
            "@operation",
        )
        if error is not None:
            assert registry.all_operations() == before, "a refused @operation registered"
            return
        spec = registry.get(name)
        assert spec is not None and spec.func is func and registered == [func]
        assert (spec.on_expired, spec.max_running, spec.timeout) == (
            options["on_expired"],
            options["max_running"],
            options["timeout"],
        )
        assert spec.schedule == args["schedule"]
        # A schedule is checked with the other declarations, by manage.py check: the refusal is
        # a message naming it, never a crash.
        problems = declared.problems()
        assert all(isinstance(p, str) and p for p in problems)
        if args["schedule"] is not None:
            try:
                declared.parse_operation_schedule(name, args["schedule"])
            except JobError:
                assert problems, "a refused schedule is not reported by the checks"
        if spec.retry is not None:
            for attempts in (1, 2, 64, 1025, 2**31 - 1):  # a long-failing job's backoff too
                delay = spec.retry.delay(attempts)
                assert 0 <= delay <= spec.retry.max_delay * (1 + spec.retry.jitter) + 1e-6
            _a_failure_schedules_its_retry(name, spec.retry)
    finally:
        registry.unregister(name) if isinstance(name, str) else None
    assert policy_error is None or isinstance(policy_error, JobError)


def _a_failure_schedules_its_retry(name: str, policy: RetryPolicy) -> None:
    """Fail one job of ``name``: the failure is recorded, and a retry is due when allowed."""
    store = DurableJobStore(actor="fuzz", clock=FakeClock())
    lease = store.insert(name, submission=submission(key="retried"))
    store.fail(lease, "boom")
    row = Job.objects.get(pk=lease.job_id)
    assert row.status == "failed"
    if policy.allows_another(1):
        assert row.retry_requested_at == T0 and row.run_after >= T0


# -- schedule declarations ----------------------------------------------------------------------

SCHEDULE_ENTRY = {
    "operation": (st.just(OP), st.one_of(fz.names(), fz.anything())),
    "cron": (
        st.sampled_from(["* * * * *", "0 3 * * *", "*/5 * * * * *", None]),
        st.one_of(fz.nasty_text(), fz.anything(), st.sampled_from(["0 0 31 2 *", "61 * * * *"])),
    ),
    "every": (
        st.one_of(st.none(), st.integers(1, 86400)),
        st.one_of(fz.floats(), fz.integers(), fz.scalars(), st.timedeltas()),
    ),
    "payload": (fz.json_values(), fz.anything()),
    "scope": (st.sampled_from([None, "default"]), fz.names()),
    "queue": (st.just("default"), fz.names()),
    "priority": (st.integers(-100, 100), fz.scalars()),
    "timezone": (st.sampled_from(["UTC", "Europe/Paris"]), fz.names()),
    "overlap": (st.sampled_from(["skip", "allow"]), fz.anything()),
    "catch_up": (st.sampled_from(["latest", "all", "none"]), fz.anything()),
    "catch_up_limit": (st.integers(1, 10_000), fz.scalars()),
    "anchor": (st.none(), st.one_of(fz.datetimes(), fz.nasty_text(), fz.scalars())),
    "unknown key": (st.none(), fz.anything()),
}


@fz.fuzz_settings(100)
@given(
    name=fz.sometimes(fz.plausible_names(), st.one_of(fz.names(), fz.anything())),
    entry=fz.arguments(**SCHEDULE_ENTRY),
    shape=st.sampled_from(["dict", "dict", "not a dict"]),
)
def test_a_schedule_declaration_parses_or_is_refused_naming_it(name, entry, shape):
    """Pure: no database. The refusal is the same whether parsed or reported by the checks."""
    extra = entry.pop("unknown key")
    if extra is not None:
        entry["every_minute"] = extra
    declaration = {k: v for k, v in entry.items() if v is not None or k in ("cron", "every")}
    if shape == "not a dict":
        declaration = extra
    try:
        spec = declared.parse_settings_schedule(name, declaration)
    except JobError as exc:
        assert exc.code == "E_JOB_INPUT_INVALID" and exc.message.startswith("Schedule "), exc
        parsed = False
        note("schedule refused")
    else:
        parsed = True
        note("schedule parsed")
        assert spec.name == name and (spec.cron is None) != (spec.every is None)
        assert spec.definition_hash == spec.definition_hash  # stable, and JSON-serialisable
        assert spec.row_fields()["definition_hash"] == spec.definition_hash
    try:
        hash(name)
    except TypeError:
        return  # a settings dict cannot even hold this name as a key
    with override_settings(DURABLE_JOBS={"SCHEDULES": {name: declaration}}):
        problems = declared.problems()
    assert bool(problems) == (not parsed), problems


# -- the REST API ------------------------------------------------------------------------------


def _bodies() -> st.SearchStrategy[Any]:
    """Return submission bodies: mostly good objects with a field or two hostile, or not objects."""
    fields = {
        "operation": (st.sampled_from([OP, "tests.fail"]), st.one_of(fz.names(), fz.anything())),
        "payload": (fz.json_values(), st.one_of(fz.json_values(), st.just("absent"))),
        "proposal": (st.just("absent"), fz.json_texts()),
        "idempotency_key": (st.one_of(st.just("absent"), fz.plausible_names()), fz.names()),
        "queue": (st.just("absent"), fz.names()),
        "priority": (st.one_of(st.just("absent"), st.integers(-100, 100)), fz.scalars()),
        "run_after": (
            st.one_of(st.just("absent"), fz.plausible_times().map(lambda t: t.isoformat())),
            st.one_of(fz.nasty_text(), fz.integers(), st.just("2026-01-01T00:00:00")),
        ),
        "extra": (st.just("absent"), fz.json_values()),
    }
    objects = fz.arguments(**fields).map(
        lambda body: {k: v for k, v in body.items() if not (isinstance(v, str) and v == "absent")}
    )
    return st.one_of(objects, objects, objects, fz.json_values())


def _to_json(body: Any) -> str:
    """Return ``body`` as request text: JSON where it can be, else its repr (not JSON)."""
    try:
        return json.dumps(body, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(body)


def _path_segment() -> st.SearchStrategy[str]:
    return st.one_of(
        st.uuids().map(str),
        fz.nasty_text(20).filter(lambda s: "/" not in s and "?" not in s and "#" not in s),
        st.just("stats"),
        st.sampled_from(["..", ".", "%00", "%2F", "null", " "]),
    )


def _query_values() -> st.SearchStrategy[Any]:
    return st.one_of(fz.nasty_text(12), fz.integers().map(str), st.sampled_from(["", "pending"]))


REQUESTS = [
    "submit",
    "submit raw",
    "submit bytes",
    "list",
    "raw url",
    "method",
    "get",
    "attempts",
    "cancel",
    "retry",
    "schedule",
]
PATHS = ["/jobs", "/jobs/stats", "/jobs/{id}", "/jobs/{id}/attempts", "/jobs/{id}/cancel"]


def _percent_encoded() -> st.SearchStrategy[str]:
    """Return text of %XX escapes of any bytes (invalid UTF-8, NUL, surrogate halves) and text."""
    escapes = st.binary(max_size=8).map(lambda b: "".join(f"%{c:02X}" for c in b))
    return st.lists(st.one_of(escapes, st.sampled_from(["a", "=", "&", "+", "%", "%G0"]))).map(
        "".join
    )


@pytest.fixture
def callers(transactional_db) -> dict[str, Client]:
    """Clients acting as a user with every job permission, one with none, and anonymous."""
    allowed = create_token(make_user("fuzz-allowed"), "red", "fuzz").token
    denied = create_token(make_user("fuzz-denied", perms=()), "red", "fuzz").token
    return {
        "allowed": (Client(raise_request_exception=False), allowed),
        "denied": (Client(raise_request_exception=False), denied),
        "anonymous": (Client(raise_request_exception=False), None),
        "bad token": (Client(raise_request_exception=False), "not-a-token\x00"),
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.urls")
@fz.fuzz_settings(60)
@given(
    data=st.data(),
    kind=st.sampled_from(REQUESTS),
    who=fz.sometimes(st.just("allowed"), st.sampled_from(["denied", "anonymous", "bad token"])),
)
def test_the_api_answers_every_request_with_2xx_or_a_clean_4xx_that_wrote_nothing(
    callers, data, kind, who
):
    client, token = callers[who]
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    red = DurableJobStore(scope="red", actor="fuzz-red", clock=live_clock())
    if not Job.objects.filter(scope="red").exists():
        red.defer(OP, submission({"n": 1}, key="mine"))
    mine = str(Job.objects.filter(scope="red").first().pk)
    draw = data.draw
    segment = draw(fz.sometimes(st.just(mine), _path_segment()), label="id")
    content_type = "application/json"
    if kind == "submit":
        method, path, body = "post", "/jobs", _to_json(draw(_bodies(), label="body"))
    elif kind == "submit bytes":
        method, path, body = "post", "/jobs", draw(st.binary(max_size=64), label="bytes")
        content_type = draw(
            st.sampled_from(["application/json", "text/plain", "application/x-www-form-urlencoded"])
        )
    elif kind == "raw url":
        template = draw(st.sampled_from(PATHS), label="path")
        path = template.format(id=draw(_percent_encoded(), label="raw id"))
        method, body = "get", None
        path = f"{path}?{draw(_percent_encoded(), label='raw query')}"
    elif kind == "method":
        method = draw(st.sampled_from(["put", "patch", "delete", "head", "options"]))
        path, body = draw(st.sampled_from(PATHS), label="path").format(id=segment), ""
    elif kind == "submit raw":
        raw = draw(st.one_of(st.sampled_from(fz.BROKEN_JSON + fz.DEEP), fz.nasty_text()))
        method, path, body = "post", "/jobs", raw
    elif kind == "list":
        params = draw(
            st.dictionaries(
                st.sampled_from(["operation", "status", "ownership", "limit", "cursor", "x"]),
                _query_values(),
                max_size=4,
            ),
            label="query",
        )
        method, path, body = "get", "/jobs", params
    elif kind in ("get", "attempts"):
        suffix = "" if kind == "get" else "/attempts"
        method, path, body = "get", f"/jobs/{segment}{suffix}", None
    elif kind in ("cancel", "retry"):
        method, path, body = "post", f"/jobs/{segment}/{kind}", ""
    else:
        verb = draw(st.sampled_from(["", "/pause", "/resume"]), label="verb")
        method = "get" if verb == "" else "post"
        path, body = f"/schedules/{draw(_path_segment(), label='name')}{verb}", ""
    before = db_state()
    try:
        if method == "get":
            response = client.get(BASE + path, body, headers=headers)
        elif method == "post":
            response = client.post(BASE + path, body, content_type=content_type, headers=headers)
        else:
            response = client.generic(method.upper(), BASE + path, body, headers=headers)
    except UnicodeEncodeError:
        return  # the test client cannot even encode a lone surrogate into a URL or body
    assert response.status_code < 500, (kind, who, path, body, response.content[:500])
    note(f"{kind} as {who}: {response.status_code}")
    if response.status_code >= 400:
        if method in ("head", "options") and not response.content:
            assert db_state() == before
            return  # no body to speak of
        assert response["Content-Type"].startswith("application/json"), response.content[:200]
        answer = response.json()
        assert set(answer) == {"code", "message"}, answer
        assert isinstance(answer["code"], str) and answer["code"] and answer["message"]
        assert db_state() == before, f"{kind} refused with {response.status_code} but wrote"
        return
    assert who == "allowed", (who, kind, response.status_code)
    if kind.startswith("submit") and response.status_code in (200, 201):
        job = Job.objects.get(pk=response.json()["id"])
        assert job.scope == "red" and job.proposal_hash
        sent = json.loads(body) if kind == "submit" else None
        if isinstance(sent, dict) and sent.get("proposal") is not None:
            assert job.proposal == sent["proposal"]  # stored byte for byte
        elif isinstance(sent, dict) and "payload" in sent:
            assert job.proposal == canonical_json(sent["payload"])


# -- manage.py jobs ------------------------------------------------------------------------------


def _jobs_argv(ids: list[str]) -> st.SearchStrategy[list[str]]:
    text = fz.nasty_text(16).filter(lambda s: "\x00" not in s)  # an argv never holds NUL
    job_id = fz.sometimes(st.sampled_from(ids), st.one_of(text, st.uuids().map(str)))
    option = st.one_of(
        st.tuples(st.just("--status"), fz.sometimes(st.just("pending"), text)),
        st.tuples(st.just("--ownership"), fz.sometimes(st.just("unclaimed"), text)),
        st.tuples(st.just("--operation"), fz.sometimes(st.just(OP), text)),
        st.tuples(st.just("--scope"), fz.sometimes(st.just("default"), text)),
        st.tuples(st.just("--queue"), text),
        st.tuples(st.just("--limit"), fz.sometimes(st.just("5"), text)),
        st.tuples(st.just("--order"), fz.sometimes(st.just("oldest"), text)),
        st.tuples(st.just("--database"), fz.sometimes(st.just("default"), text)),
        st.tuples(st.just("--raw"), fz.sometimes(st.just("proposal"), text)),
        st.just(("--json",)),
    )
    options = st.lists(option, max_size=3).map(lambda pairs: [x for pair in pairs for x in pair])
    return st.one_of(
        st.tuples(st.just(["list"]), options),
        st.tuples(st.just(["stats"]), options),
        st.tuples(job_id.map(lambda j: ["show", j]), options),
        st.tuples(st.lists(job_id, min_size=1, max_size=2).map(lambda j: ["cancel", *j]), options),
        st.tuples(st.lists(job_id, min_size=1, max_size=2).map(lambda j: ["retry", *j]), options),
        st.tuples(
            st.tuples(st.sampled_from(["pause", "resume"]), text).map(lambda v: ["schedules", *v]),
            options,
        ),
        st.tuples(st.lists(text, max_size=3), st.just([])),
    ).map(lambda parts: [*parts[0], *parts[1]])


def _token_argv(text: st.SearchStrategy[str]) -> st.SearchStrategy[list[str]]:
    """Return ``token create|revoke|list`` command lines with fuzzed options."""
    durations = st.one_of(
        text,
        st.sampled_from(["3600", "90m", "1w2d", "0", "99999999999999999999w", "²", "٣h", " 5 "]),
    )
    moments = st.one_of(
        text,
        fz.datetimes().map(lambda t: t.isoformat()),
        st.sampled_from(["9999-12-31T23:59:59-12:00", "0001-01-01T00:00:00+14:00", "2030-01-31"]),
    )
    create = st.tuples(
        fz.sometimes(st.just("fuzz-allowed"), text),
        fz.sometimes(st.just("red"), text),
        fz.sometimes(st.just("label"), st.one_of(text, fz.long_text())),
        st.lists(fz.sometimes(st.just(OP), text), max_size=2),
        st.one_of(
            st.just([]),
            durations.map(lambda d: [f"--expires-in={d}"]),
            moments.map(lambda m: [f"--expires-at={m}"]),
        ),
    ).map(
        lambda c: [
            "token",
            "create",
            f"--user={c[0]}",
            f"--scope={c[1]}",
            f"--name={c[2]}",
            *[f"--operation={op}" for op in c[3]],
            *c[4],
        ]
    )
    revoke = fz.sometimes(st.integers(1, 3).map(str), text).map(lambda i: ["token", "revoke", i])
    return st.one_of(create, revoke, st.just(["token", "list", "--all"]))


@pytest.mark.django_db(transaction=True)
@fz.fuzz_settings(50)
@given(data=st.data())
def test_manage_py_jobs_runs_or_ends_in_a_command_error_that_wrote_nothing(data):
    store = DurableJobStore(actor="fuzz", clock=live_clock())
    if not Job.objects.exists():
        store.defer(OP, submission({"n": 1}, key="pending"))
        store.fail(store.insert(OP, submission=submission({"n": 2}, key="failed")), "boom")
    ids = [str(pk) for pk in Job.objects.values_list("pk", flat=True)]
    argv = data.draw(_jobs_argv(ids), label="argv")
    before, workers, tokens = rows_by_id(), WorkerProcess.objects.count(), token_rows()
    try:
        call_command("jobs", *argv, stdout=StringIO(), stderr=StringIO())
    except CommandError as exc:
        note(f"jobs {argv[:1]}: CommandError")
        message = str(exc)
        assert message
        after = rows_by_id()
        changed = {pk for pk in before if before[pk] != after.get(pk)} | (set(after) - set(before))
        if argv[:1] in (["cancel"], ["retry"]) and " request(s) refused: " in message:
            # Each id is its own request, as with the admin's actions: the ones accepted are
            # recorded, and the error names the refused ones, which are left as they were.
            assert changed <= set(argv[1:]), (argv, changed)
            once = {pk for pk in changed if argv.count(pk) == 1}  # twice: accepted, then not
            assert not any(pk in message for pk in once), (message, changed)
        else:
            assert not changed, f"jobs {argv} failed with {message!r} but wrote"
        assert token_rows() == tokens, f"jobs {argv} failed with {message!r} but wrote a token"
    else:
        note(f"jobs {argv[:1]}: ran")
    assert WorkerProcess.objects.count() == workers


@pytest.mark.django_db
@fz.fuzz_settings(40)
@given(argv=_token_argv(fz.nasty_text(16).filter(lambda s: "\x00" not in s)))
# A superscript digit isdigit() but int() refuses it: ValueError, not a CommandError; found here.
@example(argv=["token", "create", "--user=fuzz-allowed", "--scope=red", "--expires-in=²"])
# An argv byte that is not UTF-8 arrives as a lone surrogate: the user lookup raised
# UnicodeEncodeError in the database driver; found by the long profile on MariaDB.
@example(argv=["token", "create", "--user=\udcff", "--scope=red"])
@example(argv=["token", "list", "--user=\udcff"])
def test_manage_py_jobs_token_creates_what_it_says_or_refuses_without_a_token(argv):
    """``jobs token create|revoke|list``: users, scopes, names, operations and expiries."""
    if not ApiToken.objects.exists():
        create_token(make_user("fuzz-allowed"), "red", "fuzz")
    before = token_rows()
    out = StringIO()
    try:
        call_command("jobs", *argv, stdout=out, stderr=StringIO())
    except CommandError as exc:
        note(f"jobs token {argv[1]}: CommandError")
        assert str(exc)
        assert token_rows() == before, f"jobs {argv} failed with {exc} but wrote a token"
        return
    note(f"jobs token {argv[1]}: ran")
    if argv[1] == "create":
        (row,) = ApiToken.objects.exclude(pk__in=[t["id"] for t in before])
        assert f"Created token {row.pk} " in out.getvalue()
        assert row.user.get_username() == "fuzz-allowed" and f"--scope={row.scope}" in argv


def token_rows() -> list[dict]:
    return list(ApiToken.objects.order_by("pk").values())


def rows_by_id() -> dict[str, str]:
    """Return a dump of each job with its attempts, by job id (``db_state``, one job at a time)."""
    attempts: dict[str, list] = {}
    for attempt in JobAttempt.objects.order_by("id").values():
        attempts.setdefault(str(attempt["job_id"]), []).append(attempt)
    return {
        str(job["id"]): json.dumps([job, attempts.get(str(job["id"]), [])], default=str)
        for job in Job.objects.values()
    }


# -- manage.py runjobs: only what its checks refuse --------------------------------------------

RUNJOBS_OPTIONS = {
    "--concurrency": (st.integers(1, 1000), st.one_of(fz.integers(), st.just("x"))),
    "--prefetch": (st.integers(0, 10_000), fz.integers()),
    "--async-slots": (st.integers(0, 10_000), fz.integers()),
    "--processes": (st.integers(1, 256), fz.integers()),
    "--restart-delay": (st.floats(0, 60), fz.floats()),
    "--crash-loop-deaths": (st.integers(1, 1000), fz.integers()),
    "--crash-loop-seconds": (st.floats(1, 86400), fz.floats()),
    "--lease-seconds": (st.floats(0.1, 86400), fz.floats()),
    "--poll": (st.floats(0.01, 3600), fz.floats()),
    "--watch": (st.floats(0, 60), fz.floats()),
    "--grace": (st.floats(0, 86400), fz.floats()),
    "--timeout-grace": (st.floats(0, 86400), fz.floats()),
    "--max-jobs": (st.integers(1, 10**9), fz.integers()),
    "--scope": (st.sampled_from(["default", "red"]), fz.nasty_text(12)),
    "--queue": (st.sampled_from(["default", "fast"]), fz.nasty_text(12)),
    "--operation": (st.just(OP), fz.nasty_text(12)),
    "--database": (st.just("default"), fz.nasty_text(12)),
    "--metrics-port": (st.none(), fz.integers()),
    "--metrics-addr": (st.just("127.0.0.1"), fz.nasty_text(12)),
}


def _runjobs_checks(argv: list[str]) -> CommandError | None:
    """Return the CommandError runjobs' own checks give ``argv`` (parsing included), or None.

    Pure: the parser and the option checks ``handle`` runs before anything else.
    """
    from django_durable_jobs.management.commands import runjobs

    command = load_command_class("django_durable_jobs", "runjobs")
    parser = command.create_parser("manage.py", "runjobs")
    try:
        options = vars(parser.parse_args(argv))
        runjobs._worker_options(options)
        runjobs._restart_rule(options)
        runjobs._metrics_endpoint(options)
    except CommandError as exc:
        return exc
    return None


@pytest.mark.django_db
@fz.fuzz_settings(60)
@given(options=fz.arguments(**RUNJOBS_OPTIONS))
def test_runjobs_refuses_a_bad_option_before_anything_starts(options):
    argv = [f"{name}={value}" for name, value in sorted(options.items()) if value is not None]
    if "\x00" in "".join(argv):
        return  # no command line can carry NUL
    refused = _runjobs_checks(argv)
    note("runjobs: valid, not run" if refused is None else "runjobs: refused")
    if refused is None:
        return  # a valid command line: it would start a worker, which this fuzz never does
    assert str(refused)
    before, workers = db_state(), WorkerProcess.objects.count()
    with pytest.raises(CommandError) as caught:
        call_command("runjobs", *argv, "--burst", stdout=StringIO(), stderr=StringIO())
    assert str(caught.value) == str(refused)
    assert db_state() == before and WorkerProcess.objects.count() == workers
