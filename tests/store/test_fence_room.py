"""The fence is one room: no module but ``store/fence.py`` filters or compares on the epoch.

Reading the epoch is fine everywhere (copying it into an attempt row or a lease, raising it by
one in a claim); deciding with it whether a write may land is the fence's alone, so a reviewer
audits fencing in one file.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import django_durable_jobs

PACKAGE = Path(django_durable_jobs.__file__).parent
FENCE = PACKAGE / "store" / "fence.py"

# What deciding on the epoch looks like: an ORM filter (``fencing_epoch=``, a lookup
# ``fencing_epoch__…``), a comparison in Python (``.fencing_epoch ==``, a tuple ending in it),
# and SQL text comparing the column (``fencing_epoch = %s``, ``= v.epoch``, ``<``, ``<>``…).
DECIDING = [
    re.compile(r"\bfencing_epoch=(?!=)"),
    re.compile(r"\bfencing_epoch__\w"),
    re.compile(r"\.fencing_epoch\s*[!=]="),
    re.compile(r"\bfencing_epoch\)\s*[!=]="),
    re.compile(r"fencing_epoch[\"'`]?\s*(=|<>|!=|<=|>=|<|>)\s*(%s|\?|v\.|:|\{)"),
]


def deciding_lines(text: str) -> list[str]:
    """Return the lines of ``text`` that filter or compare on the fencing epoch."""
    return [
        line.strip()
        for line in text.splitlines()
        if not line.lstrip().startswith("#") and any(p.search(line) for p in DECIDING)
    ]


def package_modules() -> list[Path]:
    return sorted(
        path
        for path in PACKAGE.rglob("*.py")
        if path != FENCE and "migrations" not in path.relative_to(PACKAGE).parts
    )


def test_only_the_fence_filters_or_compares_on_the_fencing_epoch():
    found = {
        str(path.relative_to(PACKAGE)): lines
        for path in package_modules()
        if (lines := deciding_lines(path.read_text(encoding="utf-8")))
    }
    assert found == {}, f"only store/fence.py may decide on the fencing epoch: {found}"


def test_the_fence_itself_is_found_deciding_on_the_epoch():
    # The patterns find what they are meant to: the fence's own checks.
    assert len(deciding_lines(FENCE.read_text(encoding="utf-8"))) >= 4


@pytest.mark.parametrize(
    "line",
    [
        "Job.objects.filter(pk=lease.job_id, fencing_epoch=lease.epoch)",
        "jobs.filter(fencing_epoch__lt=BIGINT_MAX)",
        "if row.fencing_epoch != lease.epoch:",
        "return row.fencing_epoch == lease.epoch",
        "return (job.status, job.fencing_epoch) == (COMPLETE, lease.epoch)",
        'fences.append(f"(fencing_epoch = %s AND {condition})")',
        'where.append(f"{table}.fencing_epoch = v.epoch")',
        "sql = 'UPDATE job SET x = 1 WHERE \"fencing_epoch\" <> %s'",
    ],
)
def test_a_decision_on_the_epoch_is_recognised(line):
    assert deciding_lines(line) == [line]


@pytest.mark.parametrize(
    "line",
    [
        "epoch=job.fencing_epoch,",
        '"fencing_epoch": epoch,',
        "fencing_epoch = models.BigIntegerField(default=0)",
        "epoch = validation.bump(row.fencing_epoch, BIGINT_MAX)",
        'counters = {"fencing_epoch": F("fencing_epoch") + 1}',
        "row.fencing_epoch += 1",
    ],
)
def test_reading_or_raising_the_epoch_is_not_a_decision(line):
    assert deciding_lines(line) == []
