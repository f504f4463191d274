"""Holdings and Heartbeat, the machinery Worker and JobManager share, on every database.

Proves: one heartbeat pass renews every held lease in one statement and follows each renewed
expiry; a cancellation request recorded elsewhere sets the executor's ``ctx.cancelled``; a lost
lease sets ``ctx.cancelled`` and ``ctx.lease_lost`` (and only warns while the attempt runs); an
unavailable database skips the pass without touching anything; finishing a claim forgets it and
wakes whoever waits; a Heartbeat beats between start and stop, and starts again after a stop.
"""

from __future__ import annotations

import logging
import re
import threading
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection
from django.test.utils import CaptureQueriesContext

from django_durable_jobs.models import Job
from django_durable_jobs.rules.vocabulary import AttemptOutcomeChoice
from django_durable_jobs.worker.attempt import context_of
from django_durable_jobs.worker.heartbeat import Heartbeat
from django_durable_jobs.worker.held import CancelEvent, Held, HeldState
from django_durable_jobs.worker.holdings import Holdings
from django_durable_jobs.worker.reports import AttemptReport
from tests.support import LEASE, submission

pytestmark = pytest.mark.django_db(transaction=True)

OP = "holdings.op"
WAIT = 15.0


def hold(store, count: int) -> tuple[Holdings, list[Held]]:
    """Claim ``count`` new jobs with ``store`` and hold each, running, with its context."""
    for n in range(count):
        store.defer(OP, submission({"n": n}, key=f"{OP}-{n}"))
    holdings = Holdings(store)
    entries = []
    for claim in store.claim_batch(limit=count, resume_expired=[]):
        entry = Held(claim, HeldState.RUNNING)
        entry.ctx = context_of(store, claim, entry.cancel)
        with holdings.lock:
            holdings.add(entry)
        entries.append(entry)
    return holdings, entries


def renewals(queries) -> list[str]:
    # On PostgreSQL the statement locks its rows in id order first: WITH locked AS (...) UPDATE
    return [q["sql"] for q in queries if re.match(r"(WITH .*\) )?UPDATE ", q["sql"].upper())]


def test_one_pass_renews_every_held_lease_in_one_statement(store, clock):
    holdings, entries = hold(store, 3)
    clock.advance(LEASE / 2)
    with CaptureQueriesContext(connection) as queries:
        assert holdings.renew() == 3
    assert len(renewals(queries)) == 1
    renewed = clock() + timedelta(seconds=LEASE)
    for entry in entries:
        assert entry.expires_at == renewed > entry.lease.expires_at
        assert Job.objects.get(pk=entry.lease.job_id).lease_expires_at == renewed
        assert not entry.cancel.is_set()


def test_a_cancellation_request_reaches_the_executor_and_only_its_own(store, rival):
    holdings, (asked, other) = hold(store, 2)
    assert rival.request_cancel(asked.lease.job_id) is True
    holdings.renew()
    assert asked.ctx.cancelled and not asked.ctx.lease_lost
    assert not other.ctx.cancelled


def test_a_lost_lease_sets_cancelled_and_lease_lost_and_warns_while_running(
    store, rival, clock, caplog
):
    holdings, (lost, kept) = hold(store, 2)
    clock.advance(LEASE + 1)
    rival.claim(lost.lease.job_id)  # the expired lease is taken over
    with caplog.at_level(logging.WARNING, logger="django_durable_jobs.worker"):
        holdings.renew()
    assert (lost.ctx.cancelled, lost.ctx.lease_lost) == (True, True)
    assert f"job {lost.lease.job_id} lease lost" in caplog.text
    # ``kept`` expired as well: nobody took it, but an expired lease cannot revive itself.
    assert (kept.ctx.cancelled, kept.ctx.lease_lost) == (True, True)


def test_a_lease_lost_after_the_attempt_ended_is_not_worth_a_warning(store, clock, caplog):
    holdings, (entry,) = hold(store, 1)
    with holdings.lock:
        holdings.finish(entry, None)
        holdings.add(entry)  # still held, as while its outcome waits: state DONE
    clock.advance(LEASE + 1)
    with caplog.at_level(logging.WARNING, logger="django_durable_jobs.worker"):
        holdings.renew()
    assert entry.cancel.is_set() and not entry.ctx.lease_lost
    assert "lease lost" not in caplog.text


def test_an_unavailable_database_skips_the_pass(store, monkeypatch, caplog):
    holdings, (entry,) = hold(store, 1)

    def unavailable(leases):
        raise DatabaseError("server closed the connection")

    monkeypatch.setattr(store, "renew_leases", unavailable)
    with caplog.at_level(logging.WARNING, logger="django_durable_jobs.worker"):
        assert holdings.renew() is None
    assert "heartbeat failed: database unavailable" in caplog.text
    assert entry.expires_at == entry.lease.expires_at and not entry.cancel.is_set()


def test_finish_forgets_the_claim_and_wakes_its_waiters(store):
    holdings, (first, second) = hold(store, 2)
    assert holdings.find(first.lease.job_id) is first
    assert holdings.counts[HeldState.RUNNING] == 2
    report = AttemptReport.of(first.claim, AttemptOutcomeChoice.COMPLETE, 0.5)
    with holdings.lock:
        holdings.finish(first, report)
    assert first.done.is_set() and first.report is report and first.state == HeldState.DONE
    assert holdings.find(first.lease.job_id) is None
    assert holdings.entries() == [second] and len(holdings) == 1
    assert holdings.counts[HeldState.RUNNING] == 1


def test_renewing_nothing_sends_no_statement(store):
    holdings = Holdings(store)
    with CaptureQueriesContext(connection) as queries:
        assert holdings.renew() == 0
    assert queries.captured_queries == []


# -- Heartbeat --------------------------------------------------------------------------------------


class Beats:
    """Count beats; ``after(n)`` waits until n more beats happened."""

    def __init__(self) -> None:
        self.count = 0
        self.changed = threading.Condition()

    def __call__(self) -> None:
        with self.changed:
            self.count += 1
            self.changed.notify_all()

    def after(self, n: int) -> bool:
        with self.changed:
            target = self.count + n
            return self.changed.wait_for(lambda: self.count >= target, WAIT)


def test_a_heartbeat_beats_between_start_and_stop_and_starts_again():
    beats = Beats()
    heartbeat = Heartbeat(0.01, beats, name="test-heartbeat")
    heartbeat.start()
    first = heartbeat.thread
    heartbeat.start()  # already beating: no second thread
    assert heartbeat.thread is first
    assert beats.after(3)
    heartbeat.stop()
    heartbeat.join(WAIT)
    assert not first.is_alive()
    heartbeat.stop()  # stopping twice is harmless
    heartbeat.start()
    assert heartbeat.thread is not first
    assert beats.after(2)
    heartbeat.stop()
    heartbeat.join(WAIT)
    assert not heartbeat.thread.is_alive()


def test_setting_the_cancel_event_calls_what_was_registered_once():
    # An attempt on the event loop registers its task's cancellation: it must run once however
    # many times (and from however many threads) the event is set, and at once when it already is.
    event = CancelEvent()
    calls: list[str] = []
    event.on_set(lambda: calls.append("task"))
    assert calls == []
    setters = [threading.Thread(target=event.set) for _ in range(8)]
    for setter in setters:
        setter.start()
    for setter in setters:
        setter.join()
    assert event.is_set() and calls == ["task"]
    event.on_set(lambda: calls.append("late"))  # registered after: called now
    event.set()
    assert calls == ["task", "late"]


def test_the_claims_on_the_event_loop_are_counted_apart(store):
    # The worker claims for its job threads and its event loop apart (Worker._budgets).
    for n in range(2):
        store.defer(OP, submission({"n": n}, key=f"{OP}-{n}"))
    holdings = Holdings(store)
    in_thread, on_loop = (
        Held(claim, on_loop=loop)
        for claim, loop in zip(store.claim_batch(limit=2), (False, True), strict=True)
    )
    with holdings.lock:
        holdings.add(in_thread)
        holdings.add(on_loop)
        assert (holdings.counts[HeldState.BUFFERED], holdings.loop_counts[HeldState.BUFFERED]) == (
            2,
            1,
        )
        holdings.move(on_loop, HeldState.RUNNING)
        holdings.move(in_thread, HeldState.RUNNING)
        assert (holdings.counts[HeldState.RUNNING], holdings.loop_counts[HeldState.RUNNING]) == (
            2,
            1,
        )
        holdings.finish(on_loop, None)
        assert sum(holdings.loop_counts.values()) == 0
        assert holdings.counts[HeldState.RUNNING] == 1
