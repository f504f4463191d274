"""The pace rule (``worker/pace.py``): which operations run short, and how many of them to hold.

Pure arithmetic; a real worker growing its buffer is in ``test_prefetch.py``.
"""

from __future__ import annotations

import pytest

from django_durable_jobs.worker.pace import GROWN_MAX, RECENT, SHORT_SECONDS, Pace


def test_an_operation_not_run_yet_is_not_short():
    assert Pace(4, None).short(["a", "b"]) == ([], 0)


def test_only_operations_seen_to_run_short_grow_the_buffer_to_what_the_threads_run_in_50ms():
    pace = Pace(4, None)
    pace.ran("quick", 0.002)
    pace.ran("slow", 0.2)
    # 4 threads at 2 ms a job run 100 jobs in 50 ms; "slow" and the unseen "other" are left out
    assert pace.short(["slow", "quick", "other"]) == (["quick"], 100)
    pace.ran("quick", 0.002)
    pace.ran("quick", 0.011)  # the mean is now 5 ms: 4 threads x 50 ms / 5 ms
    assert pace.short(["quick"]) == (["quick"], 40)
    assert pace.short(["slow"]) == ([], 0)


def test_the_slowest_short_operation_sets_the_hold_and_it_never_exceeds_the_cap():
    pace = Pace(2, None)
    pace.ran("a", 0.000_01)
    assert pace.short(["a"]) == (["a"], GROWN_MAX)
    pace.ran("b", SHORT_SECONDS)
    assert pace.short(["a", "b"]) == (["a", "b"], 20)  # 2 threads x 50 ms / 5 ms


def test_a_slow_first_run_does_not_keep_an_operation_from_being_short():
    pace = Pace(4, None)
    pace.ran("a", 0.5)  # imports on the first run, say
    for _ in range(2):
        pace.ran("a", 0.001)
    short, hold = pace.short(["a"])  # the median is 1 ms; the mean, 167 ms, holds little
    assert (short, hold) == (["a"], 1)
    for _ in range(RECENT):
        pace.ran("a", 0.001)
    assert pace.short(["a"]) == (["a"], GROWN_MAX)  # the slow run is forgotten


def test_an_operation_whose_runs_turn_long_stops_being_short():
    pace = Pace(4, None)
    for _ in range(RECENT):
        pace.ran("a", 0.001)
    for _ in range(RECENT // 2 + 1):
        pace.ran("a", 1.0)
    assert pace.short(["a"]) == ([], 0)


@pytest.mark.parametrize("prefetch", [0, 4, 50])
def test_a_prefetch_given_never_grows(prefetch):
    pace = Pace(4, prefetch)
    pace.ran("a", 0.000_1)
    assert pace.short(["a"]) == ([], 0)
