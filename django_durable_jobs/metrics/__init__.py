"""Prometheus metrics: what the worker counts as it goes, and gauges read from the job table.

Recording is off until something turns it on: ``runjobs --metrics-port`` calls :func:`enable` in
the worker process. Until then every hook below costs one ``is None`` test, and prometheus-client
is never imported, so the app runs the same without the ``metrics`` extra installed.

The hooks are called by the worker where things happen (a claim, an attempt's start and end, a
fenced write the store refused with ``LeaseLost``); they only increment counters and observe
histograms, never touching the database. The gauges (jobs per status, queue lag, workers per
state) are read at scrape time from ``stats.snapshot()`` by ``collector.DatabaseCollector``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..worker import AttemptReport
    from .recorder import Recorder

__all__ = [
    "EXTRA",
    "MetricsUnavailable",
    "attempt_ended",
    "attempt_started",
    "available",
    "claimed",
    "disable",
    "enable",
    "require",
    "stale_write_refused",
]

EXTRA = 'pip install "django-durable-jobs[metrics]"'

# What ``stale_write_refused`` names as ``write``: every fenced write a worker makes.
WRITES = ("outcome", "heartbeat", "checkpoint", "progress", "complete_atomically")

_recorder: Recorder | None = None


class MetricsUnavailable(RuntimeError):
    """Metrics were asked for, but prometheus-client is not installed."""


def available() -> bool:
    """Return True when prometheus-client can be imported (without importing it)."""
    return find_spec("prometheus_client") is not None


def require() -> None:
    """Raise ``MetricsUnavailable``, saying what to install, unless prometheus-client is there."""
    if not available():
        raise MetricsUnavailable(
            "Prometheus metrics need the prometheus-client package, which is not installed. "
            f"Install the metrics extra ({EXTRA}), or leave metrics off."
        )


def enable(registry: Any = None) -> Recorder:
    """Start recording in this process; return the recorder (the same one when called again).

    ``registry`` is the prometheus-client ``CollectorRegistry`` the counters register in; None
    registers them nowhere, for a ``runjobs --processes`` child whose counters the parent reads
    from ``PROMETHEUS_MULTIPROC_DIR``.
    """
    global _recorder
    require()
    if _recorder is None:
        from .recorder import Recorder

        _recorder = Recorder(registry)
    return _recorder


def disable() -> None:
    """Stop recording in this process (the counters are forgotten)."""
    global _recorder
    _recorder = None


def current() -> Recorder | None:
    """Return the recorder of this process, or None while recording is off."""
    return _recorder


# -- the worker's hooks: each a no-op while recording is off -------------------------------------


def claimed(operation: str) -> None:
    """Count one claim of a job of ``operation``."""
    if _recorder is not None:
        _recorder.claimed(operation)


def attempt_started(job: Any, clock: Callable[[], datetime]) -> None:
    """Note that an attempt of ``job`` (the claimed row) starts now, as ``clock()`` says.

    A first attempt's wait, from the time the job became due to now, is observed as its
    enqueue-to-start latency.
    """
    if _recorder is not None:
        _recorder.attempt_started(job, clock)


def attempt_ended(report: AttemptReport) -> None:
    """Count how an attempt ended, observe its duration, and count a lost lease."""
    if _recorder is not None:
        _recorder.attempt_ended(report)


def stale_write_refused(operation: str, write: str) -> None:
    """Count one fenced ``write`` (one of ``WRITES``) that the store refused with ``LeaseLost``."""
    if _recorder is not None:
        _recorder.stale_write_refused(operation, write)
