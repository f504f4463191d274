"""The SQL and Python ownership assessments agree on every stored proposal, on every database.

A corpus of awkward stored inputs (nested 64, 65 and 10,000 levels; about 1 MiB; 4-byte emoji,
combining marks, U+2028; an escaped lone surrogate, text that is not JSON, NaN, 1e400,
duplicate keys, empty text, none at all) is written both through the store and raw (``bulk_create``
and ORM updates), with ``proposal_checked`` set and not, and the hash right and wrong, in every
status the assessment tells apart. ``Job.objects.with_ownership(now)`` must give each row what
``assess_ownership`` gives it, and reading its diagnostic must never raise. MariaDB's
``JSON_VALID`` gave up at depth 32 and SQLite differed on deep values, which is why neither
database judges JSON here any more: the flag the store sets after its own check does. Migration
0008 sets that flag on the intact rows the app wrote before it existed, and on no others.
"""

from __future__ import annotations

import importlib
import itertools
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.apps import apps
from django.db import connection

from django_durable_jobs.models import Job
from django_durable_jobs.rules.vocabulary import assess_ownership, diagnose, proposal_sha256
from django_durable_jobs.store import DurableJobStore, Submission
from tests.deep_json import maximal_text, nested_text, outside_row
from tests.support import T0, FakeClock

pytestmark = pytest.mark.django_db(transaction=True)

NOW = T0 + timedelta(hours=1)
OP = "tests.noop"

# Text the store accepts: written through it, then some rows changed by hand.
ACCEPTED = {
    "small": '{"n": 1}',
    "depth-64": nested_text(64),
    "huge": maximal_text(size=1_000_000),
    "emoji": '{"unicorn": "🦄🧑🏽‍🚀", "𝄞": "𝄞"}',
    "combining": '["e\u0301", "a\u0308\u0301\u0323"]',
    "u2028": '{"line": "a\u2028b\u2029c"}',
    "big-number": "[1e400, -1e400, 123456789012345678901234567890]",
    "duplicate-keys": '{"a": 1, "a": 2}',
    "whitespace": " \t\n [ ] \r\n",
}
# Text it refuses, which only a raw write can store.
REFUSED = {
    "depth-65": nested_text(65),
    "depth-10000": nested_text(10_000),
    "not-json": "{oops",
    "nan": '{"n": NaN}',
    "infinity": "[Infinity]",
    "empty": "",
    "truncated-huge": maximal_text(size=1_000_000)[:-1],
    # Refused since a lone surrogate is refused escaped as well as raw; stored by earlier
    # versions, so rows holding it are still read (and marked checked) like any other.
    "escaped-lone-surrogate": '["\\ud800", "\\udfff\\ud83e"]',
}
STATUSES = ["pending", "running", "failed", "complete"]
LEASES = {  # (owner_id, lease_expires_at, epoch, attempts)
    "none": (None, None, 0, 0),
    "expired": ("owner-a", NOW - timedelta(seconds=1), 1, 1),
    "live": ("owner-a", NOW + timedelta(seconds=30), 1, 1),
}


def raw_rows() -> list[Job]:
    """Return rows written outside the app: every text, flag, hash, status and lease."""
    texts = {**ACCEPTED, **REFUSED, "missing": None}
    combos = itertools.product(
        texts.items(), [True, None, False], ["right", "wrong"], STATUSES, LEASES.items()
    )
    rows = []
    for n, ((name, text), checked, digest, status, (lease_name, lease)) in enumerate(combos):
        if text is None and digest == "wrong":
            continue
        if "huge" in name and (status, lease_name) != ("pending", "none"):
            continue  # ownership differs by proposal for pending rows only: spare the megabytes
        owner, expires, epoch, attempts = lease
        rows.append(
            outside_row(
                text,
                key=f"raw-{n}-{name}",
                status=status,
                checked=checked,
                digest=None if digest == "right" else "0" * 64,
                now=T0,
                owner_id=owner,
                lease_expires_at=expires,
                fencing_epoch=epoch,
                attempts=attempts,
            )
        )
    return rows


def store_rows(store: DurableJobStore) -> None:
    """Write every accepted text through the store, then change copies of them by hand."""
    for name, text in ACCEPTED.items():
        for change in ("as-written", "unchecked", "wrong-hash", "refused-text", "running"):
            job = store.defer(OP, Submission(None, f"store-{name}-{change}", text))
            rows = Job.objects.filter(pk=job.pk)
            if change == "unchecked":
                rows.update(proposal_checked=None)
            elif change == "wrong-hash":
                rows.update(proposal_hash="f" * 64)
            elif change == "refused-text":  # text and hash rewritten, flag left as it was
                bad = REFUSED["depth-10000"]
                rows.update(proposal=bad, proposal_hash=proposal_sha256(bad))
            elif change == "running":
                store.claim(job.pk)


def disagreements() -> list[tuple]:
    found = []
    for job in Job.objects.with_ownership(NOW).order_by("idempotency_key"):
        python = assess_ownership(job, NOW)
        diagnose(job)  # must not raise, whatever the row holds
        if job.ownership_sql != python:
            found.append((job.idempotency_key, job.proposal_checked, job.ownership_sql, python))
    return found


def test_sql_and_python_agree_on_rows_written_outside_the_app():
    rows = raw_rows()
    Job.objects.bulk_create(rows, batch_size=4)  # a few ~1 MiB rows per statement at most
    assert Job.objects.count() == len(rows)
    assert disagreements() == []
    states = {job.ownership_sql for job in Job.objects.with_ownership(NOW)}
    assert states == {"terminal", "unclaimed", "legacy-unknown", "expired", "current"}


def test_only_checked_intact_pending_rows_are_unclaimed():
    Job.objects.bulk_create(raw_rows(), batch_size=4)
    unclaimed = Job.objects.with_ownership_state("unclaimed", NOW)
    assert unclaimed.exists()
    for job in unclaimed:
        assert job.proposal_checked is True
        assert job.proposal_hash == proposal_sha256(job.proposal)
        assert (job.status, job.owner_id, job.attempts) == ("pending", None, 0)


def test_sql_and_python_agree_on_rows_written_through_the_store_and_changed_by_hand():
    store = DurableJobStore(actor="writer", lease_seconds=3600 * 2, clock=FakeClock(now=T0))
    store_rows(store)
    assert Job.objects.count() == len(ACCEPTED) * 5
    assert disagreements() == []
    states = {job.idempotency_key: job.ownership_sql for job in Job.objects.with_ownership(NOW)}
    for name in ACCEPTED:
        assert states[f"store-{name}-as-written"] == "unclaimed", name
        assert states[f"store-{name}-unchecked"] == "legacy-unknown", name
        assert states[f"store-{name}-wrong-hash"] == "legacy-unknown", name
        # The flag vouches for the JSON: the worker's attempt fails on the rewritten text.
        assert states[f"store-{name}-refused-text"] == "unclaimed", name
        assert states[f"store-{name}-running"] == "current", name


def test_both_assessments_agree_with_each_database_filter():
    Job.objects.bulk_create(raw_rows(), batch_size=4)
    expected: dict[str, set] = {}
    for job in Job.objects.all():
        expected.setdefault(assess_ownership(job, NOW), set()).add(job.pk)
    for state, pks in expected.items():
        found = set(Job.objects.with_ownership_state(state, NOW).values_list("pk", flat=True))
        assert found == pks, state


# -- migration 0008 marks the rows the app wrote before the flag existed ----------------------------


def test_the_backfill_marks_intact_rows_of_claimable_statuses_only(monkeypatch):
    backfill = importlib.import_module("django_durable_jobs.migrations.0008_job_proposal_checked")
    monkeypatch.setattr(backfill, "CHUNK", 3)  # several chunks, and a last one that is short
    good, deep = '{"n": 1}', nested_text(10_000)
    rows = {
        f"{status}-{kind}": outside_row(
            text, key=f"{status}-{kind}", status=status, now=T0, digest=digest
        )
        for status in ("pending", "running", "failed", "cancelled", "complete", "orphaned")
        for kind, text, digest in (
            ("good", good, None),
            ("depth-64", nested_text(64), None),
            ("depth-65", nested_text(65), None),
            ("deep", deep, None),
            ("nan", '{"n": NaN}', None),
            ("wrong-hash", good, "0" * 64),
            ("missing", None, ""),
        )
    }
    Job.objects.bulk_create(rows.values())
    backfill.mark_checked(apps, SimpleNamespace(connection=connection))
    checked = dict(Job.objects.values_list("idempotency_key", "proposal_checked"))
    marked = {key for key, flag in checked.items() if flag is True}
    assert marked == {
        f"{status}-{kind}"
        for status in ("pending", "running", "failed", "cancelled")
        for kind in ("good", "depth-64")
    }
    assert set(checked.values()) == {True, None}
    assert disagreements() == []
