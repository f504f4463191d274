"""No-op operations under each capacity limit an operation can declare (see ``__init__``).

Importing this module registers nothing: the app's ``ready()`` does, in the workers.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from django_durable_jobs.rules import registry
from tests import registering

CAPPED = "limited.capped"  # max_running=3
KEYED = "limited.keyed"  # one running per payload["key"]
RATED = "limited.rated"  # 150 starts a second
CAPPED_AT = 3
RATE = 150


def _key(payload):
    return payload["key"]


def noop(ctx, payload):
    return None


def register() -> None:
    """Register the operations, each running ``noop`` (again is harmless: the same function)."""
    registry.operation(CAPPED, max_running=CAPPED_AT)(noop)
    registry.operation(KEYED, max_running_per_key=1, concurrency_key=_key)(noop)
    registry.operation(RATED, rate_limit=f"{RATE}/s")(noop)


def registered() -> AbstractContextManager[None]:
    """Register the operations for a block of a test, then unregister them."""
    return registering.registered(register, (CAPPED, KEYED, RATED))
