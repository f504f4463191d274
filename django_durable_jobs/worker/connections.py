"""Database connections in long-running worker threads."""

from __future__ import annotations

from django.db import connections


def reset_broken_connections() -> None:
    """Close this thread's connections that failed and are no longer usable.

    Django reconnects on the next query, so a worker survives a database restart or a dropped
    connection. Healthy connections are kept (no reconnect per job).
    """
    for connection in connections.all(initialized_only=True):
        if connection.connection is None:
            continue
        if connection.in_atomic_block:
            continue
        if not connection.is_usable():
            connection.close()
        else:
            connection.errors_occurred = False


def close_thread_connections() -> None:
    """Close every connection this thread opened (call when a worker thread ends)."""
    for connection in connections.all(initialized_only=True):
        connection.close()
