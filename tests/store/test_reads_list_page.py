"""``DurableJobStore.list_page``: bounded keyset pages that never write and never leak.

Proves the (created_at, id) keyset order across pages (including ties on created_at split between
pages), that other scopes' and operations' rows never appear, the status filter and the bounds on
``limit`` and ``max_payload_bytes``, that payload caps count real UTF-8 bytes and refuse the whole
page, that a tampered or foreign cursor is refused with ``ScopeMismatch``, that the caller must be a
scoped store with an actor matching the execution, and that a page read issues only SELECTs.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.models import Job
from django_durable_jobs.rules.errors import (
    DeadlineExceeded,
    ExecutionStopped,
    InputInvalid,
    ScopeMismatch,
)
from django_durable_jobs.rules.execution import Execution, Identity
from django_durable_jobs.store import CandidatePage, DurableJobStore, PageQuery, Submission
from tests.support import T0, FakeClock, db_state

pytestmark = pytest.mark.django_db(transaction=True)

OP = "reports.rebuild"
OTHER_OP = "reports.other"
# Ids that differ only in their last byte sort the same way on every database's UUID type.
ID_BASE = uuid.UUID("6f1c2a4e-0000-4000-8000-000000000000").int


def job_id(n: int) -> uuid.UUID:
    return uuid.UUID(int=ID_BASE + n)


def make_store(clock: FakeClock, scope: str | None = "s1", actor: str | None = "reader"):
    return DurableJobStore(scope=scope, actor=actor, clock=clock)


def execution(scope="s1", actor="reader", operation=OP, budget=10.0) -> Execution:
    return Execution.start(Identity(scope, actor, operation), budget=budget)


def defer(store, n: int, payload=None, op: str = OP) -> Job:
    sub = Submission.of(None, f"key-{n}", {"n": n} if payload is None else payload)
    return store.defer(op, sub, job_id=job_id(n))


def all_pages(store, exe, after=None, **query) -> list[CandidatePage]:
    """Return every page of ``query``, following ``next_cursor`` until ``has_more`` is False."""
    pages = [store.list_page(PageQuery(OP, after=after, **query), exe)]
    while pages[-1].has_more:
        assert len(pages) < 50, "the cursor does not advance"
        pages.append(store.list_page(PageQuery(OP, after=pages[-1].next_cursor, **query), exe))
    return pages


def ids_of(pages) -> list[uuid.UUID]:
    return [job.pk for page in pages for job in page.candidates]


def db_order(**filters) -> list[uuid.UUID]:
    rows = Job.objects.filter(scope="s1", operation=OP, **filters).order_by("created_at", "id")
    return list(rows.values_list("pk", flat=True))


@pytest.fixture
def seeded(clock):
    """Nine s1 rows of OP: ties on created_at (inserted in reverse id order) and distinct times.

    Also rows of another scope and another operation that must never appear.
    """
    store = make_store(clock)
    defer(store, 1)
    clock.advance(1)
    for n in (5, 4, 3, 2):  # four rows at one instant, inserted against id order
        defer(store, n)
    clock.advance(1)
    defer(store, 6)
    clock.advance(1)
    for n in (9, 8, 7):
        defer(store, n)
    defer(make_store(clock, scope="s2"), 50)
    defer(make_store(clock, scope=None), 51, op=OP)  # default scope
    defer(store, 52, op=OTHER_OP)
    expected = [job_id(n) for n in (1, 2, 3, 4, 5, 6, 7, 8, 9)]
    return store, expected


# -- order and completeness ----------------------------------------------------------------------


@pytest.mark.parametrize("limit", [2, 3, 4, 9, 100])
def test_pages_concatenate_to_the_full_keyset_order_without_duplicates(seeded, limit):
    store, expected = seeded
    pages = all_pages(store, execution(), limit=limit)
    got = ids_of(pages)
    assert got == expected
    assert got == db_order()
    assert len(set(got)) == len(got)
    assert len(pages) == -(-len(expected) // limit)
    for page in pages[:-1]:
        assert page.has_more is True
        assert isinstance(page.next_cursor, str) and page.next_cursor
        assert len(page.candidates) == page.scanned_count == limit
    assert pages[-1].has_more is False
    assert pages[-1].next_cursor is None
    stamps = [(j.created_at, j.pk) for p in pages for j in p.candidates]
    assert stamps == sorted(stamps)


def test_a_page_boundary_inside_a_tie_on_created_at_loses_and_repeats_nothing(seeded):
    store, expected = seeded
    exe = execution()
    first = store.list_page(PageQuery(OP, limit=3), exe)
    assert [j.pk for j in first.candidates] == [job_id(1), job_id(2), job_id(3)]
    tied = {j.created_at for j in first.candidates[1:]}
    assert len(tied) == 1  # the cursor points into the middle of the four-row tie
    second = store.list_page(PageQuery(OP, limit=3, after=first.next_cursor), exe)
    assert [j.pk for j in second.candidates] == [job_id(4), job_id(5), job_id(6)]
    assert second.candidates[0].created_at == first.candidates[-1].created_at


def test_an_exactly_full_last_page_says_there_is_no_more(clock):
    store = make_store(clock)
    for n in range(6):
        defer(store, n)
    pages = all_pages(store, execution(), limit=3)
    assert [len(p.candidates) for p in pages] == [3, 3]
    assert (pages[-1].has_more, pages[-1].next_cursor) == (False, None)


def test_an_empty_operation_gives_one_empty_final_page(clock):
    store = make_store(clock)
    defer(store, 1, op=OTHER_OP)
    page = store.list_page(PageQuery(OP), execution())
    assert page == CandidatePage(candidates=[], scanned_count=0, has_more=False, next_cursor=None)
    assert page.matching_total is None
    assert page.observation == "per-page-snapshot"
    assert page.principal_validation == "domain-required"


def test_a_cursor_keeps_its_place_when_rows_arrive_meanwhile(seeded, clock):
    store, expected = seeded
    exe = execution()
    first = store.list_page(PageQuery(OP, limit=4), exe)
    clock.advance(60)
    defer(store, 10)  # later than every row: must appear at the end
    clock.now = T0 - timedelta(hours=1)
    defer(store, 11)  # before the cursor's place: a keyset page never goes back for it
    rest = all_pages(store, exe, limit=4, after=first.next_cursor)
    assert [j.pk for j in first.candidates] + ids_of(rest) == [*expected, job_id(10)]


def test_candidates_carry_their_ownership_assessed_with_the_store_clock(seeded, clock):
    store, _ = seeded
    lease = store.claim(job_id(2))
    clock.advance(store.lease)
    page = store.list_page(PageQuery(OP, limit=3), execution())
    states = {j.pk: j.ownership for j in page.candidates}
    assert states == {job_id(1): "unclaimed", job_id(2): "expired", job_id(3): "unclaimed"}
    assert lease.epoch == 1


# -- scope, operation and status -----------------------------------------------------------------


def test_other_scopes_and_operations_never_appear(seeded, clock):
    store, expected = seeded
    seen = ids_of(all_pages(store, execution(), limit=2))
    assert job_id(50) not in seen and job_id(51) not in seen and job_id(52) not in seen
    s2 = make_store(clock, scope="s2")
    only = s2.list_page(PageQuery(OP), execution(scope="s2"))
    assert [j.pk for j in only.candidates] == [job_id(50)]
    other = store.list_page(PageQuery(OTHER_OP), execution(operation=OTHER_OP))
    assert [j.pk for j in other.candidates] == [job_id(52)]
    assert {j.scope for j in other.candidates} == {"s1"}


def test_the_status_filter_pages_only_that_status(seeded):
    store, expected = seeded
    store.claim(job_id(3))
    store.claim(job_id(8))
    assert store.request_cancel(job_id(6)) is True
    exe = execution()
    running = ids_of(all_pages(store, exe, status="running", limit=1))
    assert running == [job_id(3), job_id(8)] == db_order(status="running")
    pending = ids_of(all_pages(store, exe, status="pending", limit=2))
    assert pending == [i for i in expected if i not in {job_id(3), job_id(8), job_id(6)}]
    cancelled = store.list_page(PageQuery(OP, status="cancelled"), exe)
    assert [j.pk for j in cancelled.candidates] == [job_id(6)]
    assert store.list_page(PageQuery(OP, status="orphaned"), exe).candidates == []


@pytest.mark.parametrize("status", ["done", "PENDING", "", 1])
def test_an_unknown_status_is_refused(seeded, status):
    store, _ = seeded
    before = db_state()
    with pytest.raises(InputInvalid) as excinfo:
        store.list_page(PageQuery(OP, status=status), execution())
    assert excinfo.value.code == "E_JOB_INPUT_INVALID"
    assert db_state() == before


# -- bounds --------------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [0, -1, 101, "2", 2.0, True, None])
def test_a_limit_outside_one_to_a_hundred_is_refused(seeded, limit):
    store, _ = seeded
    with pytest.raises(InputInvalid) as excinfo:
        store.list_page(PageQuery(OP, limit=limit), execution())
    assert excinfo.value.code == "E_JOB_INPUT_INVALID"


@pytest.mark.parametrize("cap", [0, -1, 1_048_577, "1024", 1024.0, False])
def test_a_payload_cap_outside_one_byte_to_one_mebibyte_is_refused(seeded, cap):
    store, _ = seeded
    with pytest.raises(InputInvalid) as excinfo:
        store.list_page(PageQuery(OP, max_payload_bytes=cap), execution())
    assert excinfo.value.code == "E_JOB_INPUT_INVALID"


def test_the_largest_limit_and_cap_are_accepted(seeded):
    store, expected = seeded
    page = store.list_page(PageQuery(OP, limit=100, max_payload_bytes=1_048_576), execution())
    assert [j.pk for j in page.candidates] == expected


def test_the_payload_cap_counts_utf8_bytes_not_characters(clock):
    store = make_store(clock)
    job = defer(store, 1, payload={"t": "€" * 100})
    chars, size = len(job.proposal), len(job.proposal.encode("utf-8"))
    assert (chars, size) == (108, 308)
    exe = execution()
    before = db_state()
    for cap in (200, size - 1):  # over the character count, under the byte count
        with pytest.raises(InputInvalid) as excinfo:
            store.list_page(PageQuery(OP, max_payload_bytes=cap), exe)
        assert excinfo.value.code == "E_JOB_INPUT_INVALID"
        assert str(size) in excinfo.value.message
    assert db_state() == before
    page = store.list_page(PageQuery(OP, max_payload_bytes=size), exe)
    assert [j.pk for j in page.candidates] == [job.pk]


def test_the_cap_counts_the_checkpoint_and_result_too(clock):
    store = make_store(clock)
    job = defer(store, 1, payload={"t": "x"})
    lease = store.claim(job.pk)
    store.checkpoint(lease, '"' + "ж" * 40 + '"')  # 42 characters, 82 bytes
    store.complete(lease, "日本" * 10)  # 22 characters, 62 bytes
    total = sum(
        len(t.encode()) for t in (job.proposal, '"' + "ж" * 40 + '"', '"' + "日本" * 10 + '"')
    )
    exe = execution()
    with pytest.raises(InputInvalid) as excinfo:
        store.list_page(PageQuery(OP, max_payload_bytes=total - 1), exe)
    assert excinfo.value.code == "E_JOB_INPUT_INVALID"
    page = store.list_page(PageQuery(OP, max_payload_bytes=total), exe)
    assert [j.pk for j in page.candidates] == [job.pk]


def test_one_oversized_row_refuses_the_whole_page(clock):
    store = make_store(clock)
    for n in (1, 2):
        defer(store, n)
        clock.advance(1)
    defer(store, 3, payload={"t": "€" * 100})
    clock.advance(1)
    defer(store, 4)
    exe = execution()
    before = db_state()
    with pytest.raises(InputInvalid) as excinfo:
        store.list_page(PageQuery(OP, limit=4, max_payload_bytes=200), exe)
    assert excinfo.value.code == "E_JOB_INPUT_INVALID"
    assert str(job_id(3)) in excinfo.value.message
    assert db_state() == before
    # A page that stops before the oversized row is served (the look-ahead row is not counted).
    first = store.list_page(PageQuery(OP, limit=2, max_payload_bytes=200), exe)
    assert [j.pk for j in first.candidates] == [job_id(1), job_id(2)]
    assert first.has_more is True
    with pytest.raises(InputInvalid):
        store.list_page(PageQuery(OP, limit=2, max_payload_bytes=200, after=first.next_cursor), exe)


# -- cursors -------------------------------------------------------------------------------------


def _first_cursor(store, **query) -> str:
    page = store.list_page(PageQuery(OP, limit=2, **query), execution())
    assert page.has_more is True
    return page.next_cursor


def _refused(store, query: PageQuery, exe: Execution) -> None:
    before = db_state()
    with pytest.raises(ScopeMismatch) as excinfo:
        store.list_page(query, exe)
    assert excinfo.value.code == "E_JOB_SCOPE_MISMATCH"
    assert db_state() == before


def test_a_cursor_with_any_one_character_changed_is_refused(seeded):
    store, _ = seeded
    cursor = _first_cursor(store)
    assert store.list_page(PageQuery(OP, limit=2, after=cursor), execution()).candidates
    positions = sorted({0, 1, len(cursor) // 3, len(cursor) // 2, len(cursor) - 2, len(cursor) - 1})
    for at in positions:
        swap = "A" if cursor[at] != "A" else "B"
        tampered = cursor[:at] + swap + cursor[at + 1 :]
        _refused(store, PageQuery(OP, limit=2, after=tampered), execution())
    for broken in ("", cursor + "x", cursor[:-1], "garbage", cursor.replace(":", ".")):
        _refused(store, PageQuery(OP, limit=2, after=broken), execution())


@pytest.mark.parametrize(
    "changed",
    [{"status": "pending"}, {"limit": 3}, {"max_payload_bytes": 1000}],
    ids=["status", "limit", "cap"],
)
def test_a_cursor_reused_with_another_query_is_refused(seeded, changed):
    store, _ = seeded
    cursor = _first_cursor(store)
    query = {"limit": 2, **changed}
    _refused(store, PageQuery(OP, after=cursor, **query), execution())


def test_a_cursor_issued_for_a_status_is_refused_without_it(seeded):
    store, _ = seeded
    cursor = _first_cursor(store, status="pending")
    _refused(store, PageQuery(OP, limit=2, after=cursor), execution())


def test_a_cursor_reused_for_another_operation_is_refused(seeded, clock):
    store, _ = seeded
    for n in (60, 61, 62):
        defer(store, n, op=OTHER_OP)
    cursor = _first_cursor(store)
    _refused(store, PageQuery(OTHER_OP, limit=2, after=cursor), execution(operation=OTHER_OP))


def test_a_cursor_from_another_scope_or_actor_is_refused(seeded, clock):
    store, _ = seeded
    for n in (70, 71, 72):
        defer(make_store(clock, scope="s2"), n)
    cursor = _first_cursor(store)
    s2 = make_store(clock, scope="s2")
    _refused(s2, PageQuery(OP, limit=2, after=cursor), execution(scope="s2"))
    other_actor = make_store(clock, actor="auditor")
    _refused(other_actor, PageQuery(OP, limit=2, after=cursor), execution(actor="auditor"))
    # The issuing caller (a new store instance of the same scope and actor) may still use it.
    again = make_store(clock)
    assert again.list_page(PageQuery(OP, limit=2, after=cursor), execution()).candidates


@pytest.mark.parametrize("cursor", [123, b"abc", ["x"], {"t": "x"}], ids=repr)
def test_a_cursor_that_is_not_a_string_is_refused(seeded, cursor):
    store, _ = seeded
    _refused(store, PageQuery(OP, limit=2, after=cursor), execution())


# -- who may read a page -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scope", "actor"), [(None, "reader"), ("s1", None), (None, None)], ids=str
)
def test_a_store_without_scope_or_actor_is_refused(seeded, clock, scope, actor):
    store = make_store(clock, scope=scope, actor=actor)
    _refused(store, PageQuery(OP), execution(scope="s1" if scope is None else scope))


@pytest.mark.parametrize(
    "identity",
    [
        {"actor": "someone-else"},
        {"actor": None},
        {"operation": OTHER_OP},
        {"scope": "s2"},
    ],
    ids=["actor", "no-actor", "operation", "scope"],
)
def test_an_execution_for_another_actor_operation_or_scope_is_refused(seeded, identity):
    store, _ = seeded
    _refused(store, PageQuery(OP), execution(**identity))


def test_a_non_query_or_non_execution_is_refused(seeded):
    store, _ = seeded
    with pytest.raises(InputInvalid) as excinfo:
        store.list_page({"operation": OP}, execution())
    assert excinfo.value.code == "E_JOB_INPUT_INVALID"
    with pytest.raises(InputInvalid) as excinfo:
        store.list_page(PageQuery(OP), Identity("s1", "reader", OP))
    assert excinfo.value.code == "E_JOB_INPUT_INVALID"


# -- read-only and bounded -----------------------------------------------------------------------


def test_list_page_issues_only_selects_and_changes_nothing(seeded):
    store, expected = seeded
    exe = execution()
    before = db_state()
    with CaptureQueriesContext(connection) as queries:
        pages = all_pages(store, exe, limit=2)
    assert ids_of(pages) == expected
    statements = [q["sql"].lstrip().upper() for q in queries.captured_queries]
    assert statements, "no query was captured"
    assert all(s.startswith("SELECT") for s in statements), statements
    assert db_state() == before


def test_a_spent_budget_is_refused_before_any_sql(seeded):
    store, _ = seeded
    before = db_state()
    with CaptureQueriesContext(connection) as queries:
        with pytest.raises(DeadlineExceeded) as excinfo:
            store.list_page(PageQuery(OP), execution(budget=0))
    assert excinfo.value.code == "E_JOB_DEADLINE_EXCEEDED"
    assert queries.captured_queries == []
    assert db_state() == before


def test_a_cancelled_or_closed_execution_is_refused(seeded):
    store, _ = seeded
    cancelled = execution()
    cancelled.cancel()
    with pytest.raises(ExecutionStopped) as excinfo:
        store.list_page(PageQuery(OP), cancelled)
    assert excinfo.value.code == "E_OPERATION_CANCELLED"
    closed = execution()
    closed.close()
    with pytest.raises(ExecutionStopped) as excinfo:
        store.list_page(PageQuery(OP), closed)
    assert excinfo.value.code == "E_OPERATION_CLOSED"
