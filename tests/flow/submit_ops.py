"""Operations the submit-side flow control tests declare, registered for their tests only.

``registered()`` registers them for a block (the tests' fixture); a racing child calls
``register()``. They are not registered on import: an operation with a rate limit or a key in
the registry changes every worker's claim (the limited pass), which other tests' statement
counts would see.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import timedelta

from django_durable_jobs.rules import registry
from tests import registering

ACTIVE = "flow.unique_active"
WINDOW = "flow.unique_window"
KEYED = "flow.submit.keyed"
UNIQUE_KEYED = "flow.unique_keyed"
PLAIN = "flow.plain"
WINDOW_LENGTH = timedelta(minutes=10)


def _provider(payload):
    return payload["provider"]


def _customer(payload):
    return payload["customer"]


def unique_active(ctx, payload):
    return payload


def unique_window(ctx, payload):
    return payload


def keyed(ctx, payload):
    return payload


def unique_keyed(ctx, payload):
    return payload


def plain(ctx, payload):
    return payload


def register() -> None:
    """Register every operation here (again is harmless: the same function)."""
    registry.operation(ACTIVE, unique_while="active")(unique_active)
    registry.operation(WINDOW, unique_for=WINDOW_LENGTH)(unique_window)
    registry.operation(
        KEYED,
        rate_limit="10/s",
        rate_key=_provider,
        max_running_per_key=1,
        concurrency_key=_customer,
    )(keyed)
    registry.operation(
        UNIQUE_KEYED,
        unique_while="active",
        rate_limit="5/m",
        rate_key=_provider,
        max_running_per_key=2,
        concurrency_key=_customer,
    )(unique_keyed)
    registry.operation(PLAIN)(plain)


def registered() -> AbstractContextManager[None]:
    """Register the operations for the block."""
    return registering.registered(register, (ACTIVE, WINDOW, KEYED, UNIQUE_KEYED, PLAIN))
