"""Operations a test registers in its own process for a block, as its workers' app does."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from django_durable_jobs.rules import registry


@contextmanager
def registered(register: Callable[[], None], names: Iterable[str]) -> Iterator[None]:
    """Call ``register()`` for the block, then unregister the operations ``names``."""
    register()
    try:
        yield
    finally:
        for name in names:
            registry.unregister(name)
