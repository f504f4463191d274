"""Database connections in long-running worker threads."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError, connections

logger = logging.getLogger("django_durable_jobs.worker")
T = TypeVar("T")


def reset_broken_connections() -> None:
    """Close this thread's connections that failed and are no longer usable.

    Django reconnects on the next query, so a worker survives a database restart or a dropped
    connection. Healthy connections are kept (no reconnect per job).
    """
    for connection in connections.all(initialized_only=True):
        if connection.connection is None or connection.in_atomic_block:
            continue
        if not connection.errors_occurred:
            continue  # healthy: no round trip to ask
        if not connection.is_usable():
            connection.close()
        else:
            connection.errors_occurred = False


def close_thread_connections() -> None:
    """Close every connection this thread opened (call when a worker thread ends)."""
    for connection in connections.all(initialized_only=True):
        connection.close()


def persist(call: Callable[[], T], retry_until: Callable[[], bool]) -> T:
    """Call ``call``; on a database error, reconnect and retry while ``retry_until()`` holds."""
    delay = 0.1
    while True:
        try:
            return call()
        except DatabaseError:
            reset_broken_connections()
            if not retry_until():
                raise
            logger.warning("database unavailable; retrying in %.1fs", delay, exc_info=True)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
