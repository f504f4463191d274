"""Operations the submit-side flow control tests declare (imported by the tests and their children).

Registering is idempotent (the same function again), so a racing child imports this module too.
"""

from __future__ import annotations

from datetime import timedelta

from django_durable_jobs.rules.registry import operation

ACTIVE = "flow.unique_active"
WINDOW = "flow.unique_window"
KEYED = "flow.keyed"
UNIQUE_KEYED = "flow.unique_keyed"
PLAIN = "flow.plain"
WINDOW_LENGTH = timedelta(minutes=10)


def _provider(payload):
    return payload["provider"]


def _customer(payload):
    return payload["customer"]


@operation(ACTIVE, unique_while="active")
def unique_active(ctx, payload):
    return payload


@operation(WINDOW, unique_for=WINDOW_LENGTH)
def unique_window(ctx, payload):
    return payload


@operation(
    KEYED,
    rate_limit="10/s",
    rate_key=_provider,
    max_running_per_key=1,
    concurrency_key=_customer,
)
def keyed(ctx, payload):
    return payload


@operation(
    UNIQUE_KEYED,
    unique_while="active",
    rate_limit="5/m",
    rate_key=_provider,
    max_running_per_key=2,
    concurrency_key=_customer,
)
def unique_keyed(ctx, payload):
    return payload


@operation(PLAIN)
def plain(ctx, payload):
    return payload
