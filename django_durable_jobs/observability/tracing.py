"""OpenTelemetry spans of enqueues and attempts, when ``opentelemetry-api`` is installed.

Following OpenTelemetry's semantic conventions for messaging:

* every enqueue (``submit``, ``defer``, ``insert``, a schedule's tick, a ``django.tasks``
  enqueue, the REST API) is a ``PRODUCER`` span named ``send <queue>``, a child of the span
  current in the caller (a Django request's, for instance); a bulk ``submit_many()`` /
  ``defer_many()`` is one span with ``messaging.batch.message_count``;
* the producer span's context is stored with the job in ``Job.trace_context`` as the JSON of a
  W3C carrier (``{"traceparent": ..., "tracestate": ...}``), beside the proposal and never part
  of its hash;
* every attempt is a ``CONSUMER`` span named ``process <queue>``: the root of a trace of its
  own, *linked* to the producer's context, and the current span while the job's code runs, so
  the spans that code makes are its children.

The package is imported once, here. Without it every function returns a shared object that
does nothing: no span is made, no context is serialised, ``trace_context`` stays NULL.
Without a configured tracer provider the API's spans do not record, carry no valid context,
and ``trace_context`` stays NULL as well.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

try:
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, SpanKind, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the ``otel`` extra is not installed: everything here does nothing
    trace = None

__all__ = ["INSTRUMENTATION", "consumer", "installed", "producer", "set_tracer_provider"]

INSTRUMENTATION = "django_durable_jobs"  # the tracer's name, and ``messaging.system``
# The carrier is W3C trace context whatever propagators the process configured: the column says
# what it holds, and a worker configured differently from the web app still reads it.
_PROPAGATOR = TraceContextTextMapPropagator() if trace is not None else None
_provider: Any = None
_SILENT_PROVIDERS = (
    (trace.ProxyTracerProvider, trace.NoOpTracerProvider) if trace is not None else ()
)
_cached: tuple[Any, Any] = (None, None)  # (provider, its tracer)


def installed() -> bool:
    """Return True when ``opentelemetry-api`` is importable, so spans can be made."""
    return trace is not None


def set_tracer_provider(provider: Any) -> None:
    """Make this app's spans with ``provider`` instead of OpenTelemetry's global one.

    ``None`` goes back to the global provider. Useful to send the job spans elsewhere, to turn
    them off (``opentelemetry.trace.NoOpTracerProvider()``), or in tests, where the global
    provider can be set only once per process.
    """
    global _provider
    _provider = provider


def _tracer() -> Any:
    """Return this app's tracer from the provider in use now (one set after import too), or
    None while no provider that records spans is set: OpenTelemetry's stand-in before one is
    configured, or its no-op provider. Spans made with them record nothing, yet making them and
    switching the current context cost each attempt about a tenth of a no-op job's drain."""
    global _cached
    provider = _provider if _provider is not None else trace.get_tracer_provider()
    if isinstance(provider, _SILENT_PROVIDERS):
        return None
    cached_provider, tracer = _cached
    if cached_provider is not provider:  # the SDK's get_tracer costs ~50 µs: once per provider
        tracer = provider.get_tracer(INSTRUMENTATION)
        _cached = (provider, tracer)
    return tracer


class Sending:
    """The producer span of one enqueue, and the carrier its jobs store."""

    __slots__ = ("carrier", "span")

    def __init__(self, span: Any, carrier: str | None) -> None:
        self.span = span
        self.carrier = carrier

    def sent(self, job_id: Any, trace_context: str | None) -> None:
        """Record the job an enqueue returned (``trace_context``: the one it stores).

        A job whose stored context is not this span's was there before: the enqueue coalesced
        onto it, and the span is linked to the earlier enqueue's span.
        """
        if self.span is None:
            return
        self.span.set_attribute("messaging.message.id", str(job_id))
        coalesced = trace_context != self.carrier
        self.span.set_attribute("durable_jobs.coalesced", coalesced)
        earlier = _span_context(trace_context) if coalesced else None
        if earlier is not None:
            self.span.add_link(earlier, {"durable_jobs.link": "earlier enqueue"})

    def sent_many(self, trace_contexts: Iterable[str | None]) -> None:
        """Record how many of a batch's jobs were there before (their stored context differs)."""
        if self.span is None:
            return
        earlier = sum(1 for stored in trace_contexts if stored != self.carrier)
        self.span.set_attribute("durable_jobs.coalesced_count", earlier)


class Processing:
    """The consumer span of one attempt."""

    __slots__ = ("span",)

    def __init__(self, span: Any) -> None:
        self.span = span

    def ended(
        self, outcome: str, error: BaseException | None = None, *, lease_lost: bool = False
    ) -> None:
        """Record how the job's code ended: ``complete``, ``failed`` or ``cancelled``.

        A failure sets the status to ERROR and records ``error``. A lost lease is an ERROR too:
        another attempt took the job over and this one's outcome will not be recorded. A
        cancellation a person asked for is not an error.
        """
        span = self.span
        if span is None:
            return
        span.set_attribute("durable_jobs.outcome", outcome)
        if lease_lost:
            span.set_attribute("durable_jobs.lease_lost", True)
        if error is not None:
            kind = type(error)
            span.set_attribute("error.type", f"{kind.__module__}.{kind.__qualname__}")
            span.record_exception(error)
            span.set_status(StatusCode.ERROR, f"{kind.__name__}: {error}")
        elif lease_lost:
            span.set_attribute("error.type", "lease_lost")
            span.set_status(StatusCode.ERROR, "Lease lost: this attempt's outcome is not recorded.")


_NOT_SENT = nullcontext(Sending(None, None))
_NOT_PROCESSED = nullcontext(Processing(None))


def producer(
    operation: str, *, queue: str, scope: str, count: int | None = None
) -> AbstractContextManager[Sending]:
    """Return the producer span of an enqueue into ``queue``, current while it is open.

    ``count`` is the number of messages of a bulk enqueue (None for one job).
    """
    tracer = _tracer() if trace is not None else None
    if tracer is None:
        return _NOT_SENT
    return _producer(tracer, operation, queue, scope, count)


@contextmanager
def _producer(
    tracer: Any, operation: str, queue: str, scope: str, count: int | None
) -> Iterator[Sending]:
    attributes: dict[str, Any] = {
        "messaging.system": INSTRUMENTATION,
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": queue,
        "durable_jobs.operation": operation,
        "durable_jobs.scope": scope,
    }
    if count is not None:
        attributes["messaging.batch.message_count"] = count
    with tracer.start_as_current_span(
        f"send {queue}", kind=SpanKind.PRODUCER, attributes=attributes
    ) as span:
        yield Sending(span, _inject())


def consumer(job: Any) -> AbstractContextManager[Processing]:
    """Return the consumer span of an attempt of ``job`` (the row as claimed).

    The span starts a trace of its own, linked to the context the enqueue stored, and is the
    current span until it ends.
    """
    tracer = _tracer() if trace is not None else None
    if tracer is None:
        return _NOT_PROCESSED
    return _consumer(tracer, job)


@contextmanager
def _consumer(tracer: Any, job: Any) -> Iterator[Processing]:
    enqueued = _span_context(job.trace_context)
    links = [Link(enqueued)] if enqueued is not None else []
    span = tracer.start_span(
        f"process {job.queue}",
        context=Context(),  # a root: an attempt may run hours after the request that enqueued it
        kind=SpanKind.CONSUMER,
        links=links,
        attributes={
            "messaging.system": INSTRUMENTATION,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": job.queue,
            "messaging.message.id": str(job.pk),
            "durable_jobs.operation": job.operation,
            "durable_jobs.scope": job.scope or "",
            "durable_jobs.attempt": job.attempts,
            "durable_jobs.fencing_epoch": job.fencing_epoch,
        },
    )
    with trace.use_span(span, end_on_exit=True):
        yield Processing(span)


def _inject() -> str | None:
    """Return the JSON carrier of the current span's context, or None when it has none."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    if not carrier:
        return None
    return json.dumps(carrier, sort_keys=True, separators=(",", ":"))


def _span_context(text: str | None) -> Any:
    """Return the valid span context a stored carrier names, or None (a damaged one too)."""
    if not text:
        return None
    try:
        carrier = json.loads(text)
    except ValueError:
        return None
    if not isinstance(carrier, dict) or not all(
        isinstance(value, str) for value in carrier.values()
    ):
        return None
    context = trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()
    return context if context.is_valid else None
