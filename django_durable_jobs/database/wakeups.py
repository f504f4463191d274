"""Wake-ups of the workers in this process when work is written here, on every database.

A worker that runs in the same process as the code that submits (``runjobs``' own scheduler,
a job submitting another, a test) need not wait for a notification or a look at the database:
each worker registers its wake-up event with :func:`listen`, and every write of new work calls
:func:`work_written`, which sets those events when the writing transaction commits (at once in
autocommit). With no worker in the process it costs a dictionary lookup.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import transaction

_lock = threading.Lock()
_events: dict[str, set[threading.Event]] = {}


def listen(using: str, event: threading.Event) -> Callable[[], None]:
    """Set ``event`` whenever work is written to ``using`` in this process; return the undo."""
    with _lock:
        _events.setdefault(using, set()).add(event)

    def stop() -> None:
        with _lock:
            _events.get(using, set()).discard(event)

    return stop


def work_written(using: str) -> None:
    """Wake this process's workers of ``using`` when the current transaction commits."""
    if _events.get(using):
        transaction.on_commit(lambda: _wake(using), using=using)


def _wake(using: str) -> None:
    with _lock:
        events = list(_events.get(using, ()))
    for event in events:
        event.set()
