"""The schema: migrations match the models, the submission key is unique, the scans use our indexes.

Proves that ``makemigrations --check`` finds nothing to do, that the database itself (not only the
store) refuses a second row with the same (scope, operation, idempotency_key), and that with a table
full of terminal rows the claim query and the expired-lease scan are answered from this app's
indexes, not by scanning the table (SPEC §2: "the same cost with 10 million terminal rows as with
100"), on every database.
"""

from __future__ import annotations

import functools
import json
import uuid
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction

from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.rules.vocabulary import proposal_sha256
from tests.support import T0

pytestmark = pytest.mark.django_db(transaction=True)

TABLE = Job._meta.db_table
RETRY_INDEX = "durable_jobs_retry_status_idx"
# Every scan index leads with status, so any of them confines a scan to the live rows.
CLAIM_INDEX = "durable_jobs_scope_claim_idx"
OPERATION_CLAIM_INDEX = "durable_jobs_operation_claim_idx"  # made by migration 0018
OUR_INDEXES = {CLAIM_INDEX, "durable_jobs_lease_idx", RETRY_INDEX}
TERMINAL_ROWS = 20_000
PROPOSAL = '{"n":1}'
NOW = T0 + timedelta(days=2)


def job_row(n: int, **fields) -> Job:
    values = {
        "id": uuid.uuid4(),
        "operation": "reports.rebuild",
        "scope": "s1",
        "idempotency_key": f"key-{n}",
        "proposal": PROPOSAL,
        "proposal_hash": proposal_sha256(PROPOSAL),
        "proposal_checked": True,  # as the store writes it
        "created_at": T0 + timedelta(seconds=n),
        "run_after": T0 + timedelta(seconds=n),
    }
    values.update(fields)
    return Job(**values)


# -- migrations and constraints ------------------------------------------------------------------


def test_the_models_need_no_new_migration():
    out = StringIO()
    try:
        call_command(
            "makemigrations", "durable_jobs", check=True, dry_run=True, stdout=out, stderr=out
        )
    except SystemExit as exc:  # raised with code 1 when a migration is missing
        pytest.fail(
            f"makemigrations --check found model changes (exit {exc.code}):\n{out.getvalue()}"
        )
    assert "No changes detected" in out.getvalue()


def test_the_unique_submission_constraint_exists_in_the_database():
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, TABLE)
    unique = [c["columns"] for c in constraints.values() if c["unique"] and not c["primary_key"]]
    assert ["scope", "operation", "idempotency_key"] in unique


# Indexes the migrations make beside Job.Meta.indexes (0015, 0018, 0019): their columns, and the
# rows a partial one holds where the database has partial indexes (None: a plain index).
MIGRATION_INDEXES = {
    "durable_jobs_completed_idx": (
        ["completed_at", "status", "operation", "queue"],
        "completed_at",
    ),
    OPERATION_CLAIM_INDEX: (None, None),  # its columns and condition differ by database (0018)
    "durable_jobs_lease_idx": (["status", "lease_expires_at"], "lease_expires_at"),
    "durable_jobs_unique_key_idx": (
        ["unique_key", "scope", "operation", "created_at"],
        "unique_key",
    ),
}


def index_definitions() -> dict[str, str]:
    """Return each index of the job table with its SQL (PostgreSQL, SQLite; '' on MariaDB)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [TABLE]
            )
        elif connection.vendor == "sqlite":
            cursor.execute(
                "SELECT name, coalesce(sql, '') FROM sqlite_master"
                " WHERE type = 'index' AND tbl_name = %s",
                [TABLE],
            )
        else:
            return {}
        return dict(cursor.fetchall())


def test_every_index_of_the_job_table_is_in_the_database():
    # Django rebuilds a SQLite table to alter it and makes again only the indexes the models
    # declare: the overview's index was lost so by migrations 0016 and 0017, until 0019.
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, TABLE)
    declared = {index.name: index.fields for index in Job._meta.indexes}
    for name, fields in declared.items():
        assert name in constraints, sorted(constraints)
        assert constraints[name]["columns"] == [f.lstrip("-") for f in fields]
    definitions = index_definitions()
    for name, (columns, held) in MIGRATION_INDEXES.items():
        assert name in constraints, sorted(constraints)
        if columns is not None:
            assert constraints[name]["columns"] == columns
        if held is None or connection.vendor == "mysql":
            continue
        # Partial: only the rows where the column holds a value.
        definition = " ".join(definitions[name].replace('"', "").split())
        assert definition.endswith(f"WHERE ({held} IS NOT NULL)") or definition.endswith(
            f"WHERE {held} IS NOT NULL"
        ), definition


def test_the_database_refuses_a_second_row_with_the_same_submission_key():
    first = Job.objects.create(**vars_of(job_row(1)))
    with pytest.raises(IntegrityError):
        with transaction.atomic():
            Job.objects.create(**vars_of(job_row(1, proposal='{"n":2}')))
    assert list(Job.objects.values_list("pk", flat=True)) == [first.pk]
    # Another scope, operation or key is a different submission.
    Job.objects.create(**vars_of(job_row(1, scope="s2")))
    Job.objects.create(**vars_of(job_row(1, operation="reports.other")))
    Job.objects.create(**vars_of(job_row(2)))
    assert Job.objects.count() == 4


def vars_of(job: Job) -> dict:
    return {f.attname: getattr(job, f.attname) for f in Job._meta.concrete_fields}


# -- query plans ---------------------------------------------------------------------------------


@functools.cache
def _terminal_rows() -> tuple[str, list[tuple]]:
    """Return the INSERT statement and the values of ``TERMINAL_ROWS`` terminal rows.

    Built once per process, as ``bulk_create`` would write them (the ORM's per-value work took
    most of each test's time), and inserted by each ``crowded_table`` with ``executemany``.
    """
    ended = (JobStatus.COMPLETE, JobStatus.FAILED, JobStatus.CANCELLED)
    fields = Job._meta.concrete_fields
    rows = []
    for n in range(TERMINAL_ROWS):
        job = job_row(
            n,
            status=ended[n % 3],
            owner_id="old-owner",
            lease_expires_at=T0 + timedelta(seconds=n + 30),
            fencing_epoch=1,
            attempts=1,
            completed_at=T0 + timedelta(seconds=n + 5),
            result="1",
            progress=100.0,
        )
        rows.append(
            tuple(field.get_db_prep_save(field.pre_save(job, True), connection) for field in fields)
        )
    columns = ", ".join(connection.ops.quote_name(field.column) for field in fields)
    values = ", ".join(["%s"] * len(fields))
    return f"INSERT INTO {connection.ops.quote_name(TABLE)} ({columns}) VALUES ({values})", rows


def _bulk_cursor():
    """Return a cursor for ``executemany`` of many rows (a context manager).

    On PostgreSQL one that binds on the server: Django's psycopg cursors bind on the client and
    spent seconds quoting the 600,000 values.
    """
    if connection.vendor == "postgresql":
        import psycopg

        connection.ensure_connection()
        return psycopg.Cursor(connection.connection)
    return connection.cursor()


@pytest.fixture(params=[5, 2000], ids=lambda n: f"{n}-pending")
def crowded_table(request):
    """Fill the table with many complete rows and some live ones, then refresh the statistics.

    Parametrised with a handful of pending rows (the steady state) and with a backlog.
    """
    ended = (JobStatus.COMPLETE, JobStatus.FAILED, JobStatus.CANCELLED)
    sql, rows = _terminal_rows()
    with transaction.atomic(), _bulk_cursor() as cursor:
        cursor.executemany(sql, rows)
    first_pending = TERMINAL_ROWS + 100
    live = [job_row(first_pending + n) for n in range(request.param)]
    live += [  # two failed jobs somebody asked to run again
        job_row(
            TERMINAL_ROWS + 50 + n,
            status=JobStatus.FAILED,
            owner_id="old-owner",
            lease_expires_at=T0,
            fencing_epoch=1,
            attempts=1,
            completed_at=T0,
            retry_requested_at=T0 + timedelta(seconds=n),
        )
        for n in range(2)
    ]
    live += [
        job_row(
            TERMINAL_ROWS + 10 + n,
            status=JobStatus.RUNNING,
            owner_id=f"owner-{n}",
            lease_expires_at=NOW + timedelta(seconds=-60 if n % 2 else 60),
            fencing_epoch=1,
            attempts=1,
        )
        for n in range(6)
    ]
    Job.objects.bulk_create(live, batch_size=1000)
    analyze()
    assert Job.objects.filter(status__in=ended).count() == TERMINAL_ROWS + 2
    yield f"key-{first_pending}"
    if connection.vendor == "sqlite":  # the flush keeps statistics; do not steer later plans
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM sqlite_stat1")


def analyze() -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"ANALYZE {connection.ops.quote_name(TABLE)}")
        elif connection.vendor == "mysql":
            cursor.execute(f"ANALYZE TABLE {connection.ops.quote_name(TABLE)}")
            cursor.fetchall()
        elif connection.vendor == "sqlite":
            cursor.execute("ANALYZE")


def plan_indexes(queryset) -> tuple[set[str], bool, str]:
    """Return (indexes the plan reads, whether it scans the whole table, the plan text)."""
    vendor = connection.vendor
    if vendor == "postgresql":
        plan = json.loads(queryset.explain(format="json"))
        nodes = list(_walk(plan))
        used = {n["Index Name"] for n in nodes if "Index Name" in n}
        full = any(n.get("Node Type") == "Seq Scan" for n in nodes)
        return used, full, json.dumps(plan, indent=1)
    if vendor == "mysql":
        text = queryset.explain(format="json")
        plan = json.loads(text)
        if isinstance(plan, str):  # some driver/server pairs return the JSON document quoted
            plan = json.loads(plan)
        text = json.dumps(plan, indent=1)
        nodes = list(_walk(plan))
        tables = [n for n in nodes if n.get("table_name") == TABLE]
        used = {t["key"] for t in tables if t.get("key")}
        full = any(t.get("access_type") in ("ALL", "index") for t in tables)
        return used, full, text
    text = queryset.explain()
    used = {name for name in _sqlite_indexes(text)}
    full = any(
        line.strip().lstrip("-`| ").startswith(f"SCAN {TABLE}") and "INDEX" not in line
        for line in text.splitlines()
    )
    return used, full, text


def _sqlite_indexes(text: str):
    for word in text.replace("(", " ").split():
        if word.startswith("durable_jobs_") and word.endswith("_idx"):
            yield word


def _walk(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


@pytest.mark.parametrize("turn", [None, "", "s0", "s1"], ids=["scoped", "first", "s0", "wrap"])
def test_the_claim_query_uses_the_claim_index(crowded_table, turn):
    pending = Job.objects.pending_due(NOW)
    if turn is None:  # a scoped client's claim
        pending = pending.filter(scope="s1")
    else:  # an unscoped client's: the first scope after ``turn`` that has work, wrapping around
        pending = pending.scope_turn(turn)
    query = pending.in_claim_order()[:1]
    used, full, plan = plan_indexes(query)
    assert not full, plan
    if connection.vendor == "postgresql":
        # PostgreSQL's cost model may read a small backlog through another status-led index and
        # sort it; either way only pending rows are read (benchmarks/ measures the cost).
        assert used & OUR_INDEXES, plan
    else:
        assert CLAIM_INDEX in used, plan
    assert [j.idempotency_key for j in query] == [crowded_table]


def test_the_expired_lease_scan_uses_one_of_our_indexes(crowded_table):
    for query in (
        Job.objects.lease_expired(NOW).in_claim_order()[:1],
        Job.objects.lease_expired(NOW).order_by(),
    ):
        used, full, plan = plan_indexes(query)
        assert not full, plan
        assert used & OUR_INDEXES, plan
    expired = Job.objects.lease_expired(NOW).values_list("owner_id", flat=True)
    assert sorted(expired) == ["owner-1", "owner-3", "owner-5"]


def test_the_retry_scan_uses_the_retry_index_not_every_failed_row(crowded_table):
    # Found by the benchmark: on SQLite a retry_requested_at-only index lost to the lease index,
    # and the scan read every failed and cancelled row.
    query = Job.objects.retry_requested(NOW).in_claim_order()
    used, full, plan = plan_indexes(query[:1])
    assert not full, plan
    assert RETRY_INDEX in used, plan
    assert [j.idempotency_key for j in query] == [
        f"key-{TERMINAL_ROWS + 50}",
        f"key-{TERMINAL_ROWS + 51}",
    ]


@pytest.mark.parametrize("turn", [None, ""], ids=["scoped", "turns"])
def test_one_operations_claim_reads_its_own_pending_rows_not_the_scopes(turn):
    # Found by the flow benchmark: a rate-limited operation's claim (and a worker started with
    # --operations) walked the scope's whole pending range in claim order, skipping every other
    # operation's row: 8 ms a claim with 5,000 other jobs pending (22 ms with 19,000 on
    # SQLite, choosing the scope), while holding the bucket.
    done = {"status": JobStatus.COMPLETE, "owner_id": "old-owner", "fencing_epoch": 1}
    done.update(attempts=1, completed_at=T0, result="1", progress=100.0, lease_expires_at=T0)
    Job.objects.bulk_create(
        [job_row(n, operation="mail.send") for n in range(3000)]
        + [job_row(3000 + n, **done) for n in range(3000)]
        + [job_row(6000 + n) for n in range(5)],
        batch_size=1000,
    )
    analyze()
    query = Job.objects.pending_due(NOW).filter(operation="reports.rebuild")
    query = query.filter(scope="s1") if turn is None else query.scope_turn(turn)
    used, full, plan = plan_indexes(query.in_claim_order()[:1])
    assert not full, plan
    # Every read of the table, the choice of the scope whose turn it is too: through another
    # index it would walk the 3,000 other pending jobs ahead of this operation's first.
    assert used == {OPERATION_CLAIM_INDEX}, plan
    assert [j.idempotency_key for j in query.in_claim_order()[:1]] == ["key-6000"]
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM sqlite_stat1")
