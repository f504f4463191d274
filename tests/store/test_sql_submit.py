"""The submit statement (store/sql/submit.py): what ``submit()`` costs in statements, what it
returns, and its NOTIFY.

Proves: a new job is one statement on every database (its NOTIFY included on PostgreSQL), a
repeated one at most two, and no savepoint is taken in the caller's transaction; the returned job
is the row as the ORM loads it; PostgreSQL wakes workers once per queue and transaction (never for
a coalesced, refused or rolled-back submission); a taken job id inside the caller's transaction is
refused without breaking that transaction; MariaDB's case-insensitive keys coalesce as the
database sees them; the path for MySQL, which has no ``INSERT … RETURNING``, is exercised on
MariaDB.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import UTC, datetime

import pytest
from django.db import connection, transaction
from django.db.models.signals import post_init
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_durable_jobs import submit, submit_many
from django_durable_jobs.database.dbvendor import WORK_CHANNEL
from django_durable_jobs.models import Job
from django_durable_jobs.rules.errors import IdempotencyConflict, InputInvalid
from django_durable_jobs.store import DurableJobStore
from django_durable_jobs.store.sql.rows import build_job
from django_durable_jobs.store.sql.submit import ATTNAMES
from tests.settings import TEST_DB
from tests.support import assert_refused, submission
from tests.testapp.models import DomainRow

pytestmark = pytest.mark.django_db(transaction=True)

OP = "tests.noop"
# Statements of submit(): a new job, and one whose key is taken (MariaDB's insert returns the
# row holding the key; elsewhere a SELECT reads it).
STATEMENTS = {"postgresql": (1, 2), "sqlite": (1, 2), "mariadb": (1, 1)}
only_postgresql = pytest.mark.skipif(TEST_DB != "postgresql", reason="NOTIFY is PostgreSQL's")
only_mariadb = pytest.mark.skipif(TEST_DB != "mariadb", reason="MariaDB's insert and collation")


@pytest.fixture(autouse=True)
def counted_backlog():
    """Have this process's count of the scope's pending jobs fresh, as it is under load.

    A submission counts its scope's pending jobs at most once a second (the pending cap); in
    between, and always without a cap, a new job is one statement. See test_quotas.py.
    """
    with override_settings(DURABLE_JOBS={"QUOTAS": {"MAX_PENDING": None}}):
        yield


def sql_of(queries: CaptureQueriesContext) -> list[str]:
    return [query["sql"] for query in queries.captured_queries]


# -- statements ---------------------------------------------------------------------------------


def test_a_new_submit_is_one_statement_and_a_repeated_one_at_most_two():
    new, repeated = STATEMENTS[TEST_DB]
    with CaptureQueriesContext(connection) as queries:
        job = submit(OP, {"n": 1}, idempotency_key="k")
    assert len(queries) == new, sql_of(queries)
    with CaptureQueriesContext(connection) as queries:
        again = submit(OP, {"n": 1}, idempotency_key="k")
    assert len(queries) == repeated, sql_of(queries)
    assert again.pk == job.pk
    assert not any("ORDER BY" in sql for sql in sql_of(queries))  # a unique key needs no order


def test_submit_in_the_callers_transaction_takes_no_savepoint():
    new, repeated = STATEMENTS[TEST_DB]
    with transaction.atomic():
        with CaptureQueriesContext(connection) as queries:
            submit(OP, {"n": 1}, idempotency_key="k")
            submit(OP, {"n": 1}, idempotency_key="k")
    assert len(queries) == new + repeated, sql_of(queries)
    assert not any("SAVEPOINT" in sql.upper() for sql in sql_of(queries))


def test_submit_many_in_the_callers_transaction_takes_one_savepoint():
    with transaction.atomic():
        with CaptureQueriesContext(connection) as queries:
            submit_many(OP, [{"n": i} for i in range(50)])
    statements = [sql.split()[0].upper() for sql in sql_of(queries)]
    assert statements.count("SAVEPOINT") == 1 and len(statements) == 3, sql_of(queries)


# -- the returned job ---------------------------------------------------------------------------


def _columns(job: Job) -> dict:
    return {field.attname: getattr(job, field.attname) for field in Job._meta.concrete_fields}


@pytest.mark.parametrize("many", [False, True], ids=["submit", "submit_many"])
def test_the_returned_job_is_the_row_as_the_orm_loads_it(many):
    def send() -> Job:
        if many:
            return submit_many(OP, [{"n": 1}], idempotency_keys=["k"], queue="q", priority=4)[0]
        return submit(OP, {"n": 1}, idempotency_key="k", queue="q", priority=4)

    for job in (send(), send()):  # new, then coalesced
        loaded = Job.objects.get(pk=job.pk)
        assert _columns(job) == _columns(loaded)
        assert {name: type(value) for name, value in _columns(job).items()} == {
            name: type(value) for name, value in _columns(loaded).items()
        }
        assert isinstance(job.pk, uuid.UUID)
        for value in _columns(job).values():
            assert not isinstance(value, datetime) or value.tzinfo is not None
        assert (job._state.adding, job._state.db) == (False, "default")
        assert job.ownership == "unclaimed"


def test_a_built_job_is_the_instance_from_db_makes_and_init_receivers_still_run():
    job = submit(OP, {"n": 1}, queue="q")
    values = [getattr(job, attname) for attname in ATTNAMES]
    built, loaded = build_job("default", values), Job.from_db("default", ATTNAMES, values)
    assert {k: v for k, v in vars(built).items() if k != "_state"} == {
        k: v for k, v in vars(loaded).items() if k != "_state"
    }
    assert vars(built._state) == vars(loaded._state) == {"adding": False, "db": "default"}
    assert built.workflow is None and built.queue == "q"  # through the fields' descriptors
    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance)

    post_init.connect(receiver, sender=Job)  # with a receiver: Model.__init__, which sends it
    try:
        again = build_job("default", values)
    finally:
        post_init.disconnect(receiver, sender=Job)
    assert len(seen) == 1 and seen[0] is again
    assert vars(again._state) == vars(loaded._state)


def test_insert_returns_none_for_a_repeat_and_refuses_other_bytes(clock):
    store = DurableJobStore(actor="me", clock=clock)
    lease = store.insert(OP, submission=submission({"n": 1}, key="k"))
    row = Job.objects.get(pk=lease.job_id)
    assert (row.status, row.owner_id, row.fencing_epoch, row.claimed_by) == (
        "running",
        store.owner_id,
        1,
        "me",
    )
    assert store.insert(OP, submission=submission({"n": 1}, key="k")) is None
    assert_refused(
        IdempotencyConflict,
        "E_JOB_IDEMPOTENCY_CONFLICT",
        lambda: store.insert(OP, submission=submission({"n": 2}, key="k")),
    )


def test_a_taken_job_id_in_the_callers_transaction_leaves_it_usable(clock):
    store = DurableJobStore(clock=clock)
    taken = store.defer(OP, submission(key="first"))
    with transaction.atomic():
        DomainRow.objects.create(job_id=uuid.uuid4(), value="before")
        with pytest.raises(InputInvalid) as caught:
            store.defer(OP, submission(key="second"), job_id=taken.pk, in_caller_transaction=True)
        assert str(taken.pk) in caught.value.message
        # No failed statement: PostgreSQL would otherwise refuse everything until ROLLBACK.
        DomainRow.objects.create(job_id=uuid.uuid4(), value="after")
    assert DomainRow.objects.count() == 2
    assert list(Job.objects.values_list("idempotency_key", flat=True)) == ["first"]


# -- keys as the database compares them ---------------------------------------------------------


def test_keys_that_differ_only_in_case_follow_the_databases_collation():
    job = submit(OP, {"n": 1}, idempotency_key="Key")
    again = submit(OP, {"n": 1}, idempotency_key="KEY")
    many = submit_many(OP, [{"n": 1}, {"n": 2}], idempotency_keys=["key", "other"])
    if TEST_DB == "mariadb":  # utf8mb4_unicode_ci: one key, as before the lean path
        assert again.pk == job.pk == many[0].pk
        assert Job.objects.count() == 2
    else:
        assert len({job.pk, again.pk, many[0].pk}) == 3
        assert Job.objects.count() == 4


def test_a_bulk_submit_builds_its_new_jobs_and_reads_only_the_holders_of_taken_keys():
    # Beyond two rows MariaDB's insert returns each key's holder's id and key, not whole rows:
    # the new jobs are built from what was sent, the holders of taken keys read after.
    first = submit_many(OP, [{"n": 0}, {"n": 1}], idempotency_keys=["held-0", "held-1"])
    keys = ["new-a", "held-0", "new-b", "held-1", "new-c"]
    payloads = [{"n": 0}, {"n": 0}, {"n": 2}, {"n": 1}, {"n": 3}]
    with CaptureQueriesContext(connection) as queries:
        jobs = submit_many(OP, payloads, idempotency_keys=keys)
    sql = [q["sql"] for q in queries.captured_queries if q["sql"].startswith(("INSERT", "SELECT"))]
    assert (jobs[1].pk, jobs[3].pk) == (first[0].pk, first[1].pk)
    if TEST_DB == "mariadb":
        assert "RETURNING `id`, `idempotency_key`" in sql[0]
        assert len(sql) == 2 and "IN ('held-0', 'held-1')" in sql[1]  # the two taken keys
    assert len({job.pk for job in jobs}) == 5 and Job.objects.count() == 5
    for job in jobs:
        assert _columns(job) == _columns(Job.objects.get(pk=job.pk))
        assert job.ownership == Job.objects.get(pk=job.pk).ownership == "unclaimed"


@only_mariadb
def test_without_insert_returning_a_select_reads_the_rows_mysql_path(monkeypatch):
    monkeypatch.setattr(connection.features, "can_return_columns_from_insert", False)
    with CaptureQueriesContext(connection) as queries:
        job = submit(OP, {"n": 1}, idempotency_key="k")
    assert len(queries) == 2  # the insert, then the SELECT of the row holding the key
    assert _columns(job) == _columns(Job.objects.get(pk=job.pk))
    assert submit(OP, {"n": 1}, idempotency_key="k").pk == job.pk
    jobs = submit_many(OP, [{"n": 1}, {"n": 2}], idempotency_keys=["k", "new"])
    assert jobs[0].pk == job.pk and Job.objects.count() == 2
    assert_refused(
        IdempotencyConflict,
        "E_JOB_IDEMPOTENCY_CONFLICT",
        lambda: submit_many(OP, [{"n": 3}, {"n": 2}], idempotency_keys=["other", "k"]),
    )


@only_mariadb
@pytest.mark.parametrize("many", [1, 5], ids=["one", "many"])
def test_shared_values_are_escaped_once_into_the_statement_and_stored_exactly(many):
    # MariaDB's driver escapes parameters into the statement's text; the values every row of a
    # call shares are written there once, by the driver's escaping, the varying ones bound.
    scope, queue = "te%st's\\sc%%ope", "q%s'\\ü"
    run_after = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    keys = [f"k%{n}'" for n in range(many)]
    seen: list[tuple[str, list]] = []

    def recorder(execute, sql, params, many_, context):
        seen.append((sql, list(params or [])))
        return execute(sql, params, many_, context)

    def send() -> list[Job]:
        return submit_many(
            OP,
            [{"n": n, "s": "a%sb'c"} for n in range(many)],
            scope=scope,
            idempotency_keys=keys,
            queue=queue,
            priority=7,
            run_after=run_after,
        )

    with connection.execute_wrapper(recorder):
        jobs = send()
    ((insert, params),) = [(sql, p) for sql, p in seen if sql.startswith("INSERT")]
    if many == 1:  # one row binds every value
        assert len(params) == len(ATTNAMES) and "te%%st" not in insert
    else:  # the varying values only: id, key, proposal, hash and the flow keys
        assert len(params) == 7 * many
        assert insert.count("te%%st") == many  # the scope once a row, escaped in the text
    for key, job in zip(keys, jobs, strict=True):
        loaded = Job.objects.get(pk=job.pk)
        assert _columns(job) == _columns(loaded)
        assert (loaded.scope, loaded.queue, loaded.priority) == (scope, queue, 7)
        assert (loaded.idempotency_key, loaded.run_after) == (key, run_after)
    again = send()
    assert [job.pk for job in again] == [job.pk for job in jobs]
    assert Job.objects.count() == many


# -- PostgreSQL's bulk insert ---------------------------------------------------------------------

# Items an array's text form must quote or escape, and "NULL", which it must not read as a null.
AWKWARD_KEYS = ["NULL", "null", 'k"1', "k\\2", "k{3}", "k,4", " k5 ", "ключ-6", "k'7", ""]


def prepared_inserts() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement FROM pg_prepared_statements WHERE statement LIKE 'WITH ins AS%%'"
        )
        return [row[0] for row in cursor.fetchall()]


@only_postgresql
@pytest.mark.parametrize(
    "opt_out",
    [None, ("DISABLE_SERVER_SIDE_CURSORS", True), ("OPTIONS", {"prepare_threshold": None})],
    ids=["binary", "disable-server-side-cursors", "prepare-threshold-none"],
)
def test_a_bulk_submit_binds_its_arrays_on_the_server_unless_the_settings_say_not_to(
    monkeypatch, opt_out
):
    if opt_out is not None:
        name, value = opt_out
        if name == "OPTIONS":
            value = {**connection.settings_dict.get("OPTIONS", {}), **value}
        monkeypatch.setitem(connection.settings_dict, name, value)
    connection.close()  # a new session: nothing prepared yet
    keys = AWKWARD_KEYS[:-1]  # an empty idempotency key is refused
    payloads = [{"key": key, "text": 'a "quoted" \\ {braced}, item'} for key in keys]
    seen: list[str] = []

    def recorder(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(recorder):
        jobs = submit_many(OP, payloads, idempotency_keys=keys)
    inserts = [sql for sql in seen if sql.startswith("WITH ins AS")]
    assert len(inserts) == 1 and "unnest(" in inserts[0], seen
    binary = opt_out is None
    assert ("%b::" in inserts[0]) is binary
    assert bool(prepared_inserts()) is binary
    loaded = {job.idempotency_key: job for job in Job.objects.all()}
    assert sorted(loaded) == sorted(keys)
    for key, payload, job in zip(keys, payloads, jobs, strict=True):
        assert job.idempotency_key == key
        assert _columns(job) == _columns(loaded[key])
        assert json.loads(loaded[key].proposal) == payload
        assert loaded[key].unique_key is None and loaded[key].rate_key == ""
    # A second call of the same keys coalesces with every row, on the same statement.
    again = submit_many(OP, payloads, idempotency_keys=keys)
    assert [job.pk for job in again] == [job.pk for job in jobs]
    assert Job.objects.count() == len(keys)


# -- NOTIFY ---------------------------------------------------------------------------------------


@pytest.fixture
def listener():
    """Yield ``heard()``: the work notifications delivered since the last call, by payload."""
    raw = connection.get_new_connection(connection.get_connection_params())
    raw.autocommit = True
    raw.execute(f"LISTEN {WORK_CHANNEL}")

    def heard() -> Counter:
        return Counter(n.payload for n in raw.notifies(timeout=0.3) if n.channel == WORK_CHANNEL)

    yield heard
    raw.close()


@only_postgresql
def test_each_new_submit_in_autocommit_notifies_its_queue_once(listener):
    submit(OP, {"n": 1}, idempotency_key="k", queue="reports")
    assert listener() == {"reports": 1}
    submit(OP, {"n": 1}, idempotency_key="k", queue="reports")  # coalesced: nothing new
    assert listener() == {}


@only_postgresql
def test_a_transaction_notifies_each_queue_once_at_commit(listener):
    with transaction.atomic():
        for n in range(5):
            submit(OP, {"n": n}, queue="a")
        for n in range(3):
            submit(OP, {"n": n}, queue="b")
        submit_many(OP, [{"m": n} for n in range(10)], queue="a")
        assert listener() == {}  # nothing before COMMIT
    assert listener() == {"a": 1, "b": 1}


@only_postgresql
def test_a_call_of_many_statements_notifies_once(listener):
    submit_many(OP, [{"n": n} for n in range(2500)], queue="bulk")
    assert listener() == {"bulk": 1}


@only_postgresql
def test_nothing_is_announced_when_nothing_is_written(listener):
    class Abandon(Exception):
        pass

    with pytest.raises(Abandon):
        with transaction.atomic():
            submit(OP, {"n": 1})
            raise Abandon
    submit(OP, {"n": 1}, idempotency_key="k")
    assert listener() == {"default": 1}
    with pytest.raises(IdempotencyConflict):
        submit_many(OP, [{"n": 2}, {"n": 9}], idempotency_keys=["fresh", "k"])
    with transaction.atomic():
        with pytest.raises(IdempotencyConflict):
            submit_many(OP, [{"n": 2}, {"n": 9}], idempotency_keys=["fresh", "k"])
    assert listener() == {}
