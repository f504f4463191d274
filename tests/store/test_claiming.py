"""The claiming room on every database: ``claim_batch`` takes a batch in one statement.

The one-statement path hands each job back with its row loaded; the exact row-by-row path keeps
the claim order when rarer work waits, passes over defective rows and counts capacity.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.models import Job
from django_durable_jobs.rules.values import Claimed
from django_durable_jobs.rules.vocabulary import proposal_sha256
from tests.store.batch_support import OP, backlog, statements
from tests.support import LEASE, submission

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_DELTA = timedelta(seconds=LEASE)


# -- claim_batch -----------------------------------------------------------------------------------


def test_a_batch_is_claimed_in_one_statement_with_its_rows_loaded(store, clock):
    jobs = backlog(store, 6)
    with CaptureQueriesContext(connection) as queries:
        claimed = store.claim_batch(limit=4, resume_expired=[])
    expected = 2 if connection.vendor == "mysql" else 1  # MariaDB: no UPDATE … RETURNING
    extra = 1 if connection.vendor == "mysql" else 0  # … and its rarer-work check is a read
    assert len(statements(queries.captured_queries)) == expected + extra
    # The first four in claim order (within a batch of ties the order of ids may differ: MariaDB
    # sorts its UUID type its own way).
    assert {c.job_id for c in claimed} == {j.pk for j in jobs[:4]}
    for claim in claimed:
        assert isinstance(claim, Claimed)
        stored = Job.objects.get(pk=claim.job_id)
        assert (claim.lease.epoch, claim.lease.owner_id) == (1, store.owner_id)
        for field in Job._meta.concrete_fields:
            loaded, written = getattr(claim.job, field.attname), getattr(stored, field.attname)
            assert loaded == written, field.attname
        assert (stored.status, stored.attempts, stored.fencing_epoch) == ("running", 1, 1)
        assert stored.lease_expires_at == clock() + LEASE_DELTA


def test_claim_order_is_exact_when_a_retry_waits_among_pending_work(store, rival, clock):
    backlog(store, 3, priority=0)
    failed = store.defer(OP, submission({"retry": 1}, key="retry"), priority=50)
    [lease] = store.claim_next(limit=1, resume_expired=[])
    assert lease.job_id == failed.pk
    store.fail(lease, "boom")
    store.request_retry(failed.pk)
    claimed = rival.claim_batch(limit=2, resume_expired=[])
    assert [c.job_id for c in claimed][0] == failed.pk  # the higher priority retry comes first
    assert claimed[0].job.attempts == 2 and claimed[0].job.status == "running"


def test_a_pending_row_whose_hash_does_not_match_is_never_started_nor_in_the_way(store):
    bad, *good = backlog(store, 4)
    Job.objects.filter(pk=bad.pk).update(proposal_hash="0" * 64)
    assert [c.job_id for c in store.claim_batch(limit=1, resume_expired=[])] == [good[0].pk]
    rest = store.claim_batch(limit=5, resume_expired=[])
    assert {c.job_id for c in rest} == {good[1].pk, good[2].pk}
    assert store.claim_batch(limit=5, resume_expired=[]) == []
    assert Job.objects.get(pk=bad.pk).status == "pending"


def test_a_forged_hash_over_invalid_json_is_passed_over(store):
    # Written outside the app (the flag the store sets after checking the JSON is not set): SQL
    # and Python both refuse to trust it, and the claim takes the work behind the row.
    bad, good = backlog(store, 2)
    text = "{not json"
    Job.objects.filter(pk=bad.pk).update(
        proposal=text, proposal_hash=proposal_sha256(text), proposal_checked=None
    )
    claimed = store.claim_batch(limit=2, resume_expired=[])
    assert [c.job_id for c in claimed] == [good.pk]
    bad_row = Job.objects.get(pk=bad.pk)
    assert (bad_row.status, bad_row.fencing_epoch, bad_row.owner_id) == ("pending", 0, None)


def test_a_claim_with_max_running_counts_capacity(store):
    backlog(store, 5)
    assert len(store.claim_batch(limit=5, max_running=2, resume_expired=[])) == 2
    assert store.claim_batch(limit=5, max_running=2, resume_expired=[]) == []


# -- compiled probes and prepared statements -----------------------------------------------------


def probes(queries) -> list[str]:
    # A prepared statement's parameters are bound by the server: Django logs it as
    # "QUERY = '…' - PARAMS = (…)".
    found = (sql.removeprefix("QUERY = '") for sql in statements(queries))
    return [sql for sql in found if sql.startswith("SELECT EXISTS (")]


def test_an_empty_claim_s_compiled_probe_reads_each_call_s_clock(store, rival, clock):
    [job] = backlog(store, 1)
    [held] = store.claim_batch(limit=1, resume_expired=[])
    # Nothing is claimable while the lease lasts: after its one statement took nothing, the
    # claim asks in one probe whether rarer work waits (MariaDB also before its locking read).
    with CaptureQueriesContext(connection) as queries:
        assert rival.claim_batch(limit=2, resume_expired=[OP]) == []
    assert len(probes(queries.captured_queries)) == (2 if connection.vendor == "mysql" else 1)
    assert rival.claim_batch(limit=2, resume_expired=[OP]) == []  # compiled now: the same
    clock.advance(LEASE + 1)
    # The expired lease is the only claimable row. The one statement takes no pending work;
    # the compiled probe, bound to this call's clock, finds the row, and the exact path
    # reclaims it. Bound to the first call's clock, it would find nothing.
    [again] = rival.claim_batch(limit=2, resume_expired=[OP])
    assert (again.job_id, again.lease.epoch) == (job.pk, held.lease.epoch + 1)
    assert again.lease.owner_id == rival.owner_id


def prepared_claims() -> list[tuple[str, int]]:
    """Return this session's prepared claim statements and probes, with how often each ran."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE 'WITH claim AS%%' OR statement LIKE 'SELECT EXISTS (%%'"
        )
        return cursor.fetchall()


postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="prepared statements: PostgreSQL with psycopg 3"
)


@postgresql_only
def test_repeated_claims_are_prepared_on_postgresql_and_still_seen_by_django(store):
    connection.close()  # a new session: no statement prepared yet
    seen: list[str] = []

    def recorder(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(recorder):
        for _ in range(8):
            assert store.claim_batch(limit=2, resume_expired=[]) == []
    found = prepared_claims()
    assert sorted(statement.split(" ", 2)[1] for statement, _ in found) == ["EXISTS", "claim"]
    assert [runs for _, runs in found] == [8, 8]  # each prepared once, then run as prepared
    # Django's execute_wrapper() hooks and query logging see them as any other statement.
    assert sum(sql.startswith("WITH claim AS") for sql in seen) == 8
    assert len(probes([{"sql": sql} for sql in seen])) == 8
    # Prepared, the claim still takes work, with a new clock value every call.
    jobs = backlog(store, 3)
    assert {c.job_id for c in store.claim_batch(limit=5, resume_expired=[])} == {j.pk for j in jobs}


@postgresql_only
def test_a_prepared_claim_binds_only_what_changes_so_postgresql_plans_it_once(store, rival):
    # Its constants (statuses, operations, bounds) are written into the statement: bound, they
    # kept a generic plan from using a partial index, and PostgreSQL planned the claim anew at
    # every call (1.1-1.6 ms). Only the clock, the scope's turn and the claim's new values stay.
    connection.close()
    jobs = backlog(store, 4)
    taken = []
    for _ in range(10):
        taken += store.claim_batch(limit=1, resume_expired=[])
    assert [c.job_id for c in taken] == [j.pk for j in jobs]  # then nothing: the probe ran too
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement, parameter_types::text[], generic_plans FROM pg_prepared_statements"
            " WHERE statement LIKE 'WITH claim AS%%' OR statement LIKE 'SELECT EXISTS (%%'"
        )
        found = cursor.fetchall()
    assert sorted(statement.split(" ", 2)[1] for statement, _, _ in found) == ["EXISTS", "claim"]
    changing = {"timestamp with time zone", "character varying", "text"}
    for statement, types, generic_plans in found:
        assert set(types) <= changing, (types, statement)
        assert "'pending'" in statement, statement
        assert generic_plans > 0, statement  # planned once, then only run
    assert {c.job_id for c in rival.claim_batch(limit=5, resume_expired=[])} == set()


@postgresql_only
@pytest.mark.parametrize(
    "opt_out",
    [
        ("DISABLE_SERVER_SIDE_CURSORS", True),  # Django's setting for a transaction pooler
        ("OPTIONS", {"prepare_threshold": None}),  # psycopg's own, given explicitly
    ],
    ids=["disable-server-side-cursors", "prepare-threshold-none"],
)
def test_claims_are_not_prepared_where_the_settings_say_statements_must_not_outlive_a_transaction(
    store, monkeypatch, opt_out
):
    name, value = opt_out
    if name == "OPTIONS":
        value = {**connection.settings_dict.get("OPTIONS", {}), **value}
    monkeypatch.setitem(connection.settings_dict, name, value)
    connection.close()
    for _ in range(8):
        assert store.claim_batch(limit=2, resume_expired=[]) == []
    assert prepared_claims() == []
    jobs = backlog(store, 2)
    assert {c.job_id for c in store.claim_batch(limit=5, resume_expired=[])} == {j.pk for j in jobs}
