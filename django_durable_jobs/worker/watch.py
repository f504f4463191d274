"""Wake-ups on new work where the database has no NOTIFY (SQLite, MariaDB and MySQL).

While the fetch loop sleeps with a free slot, a thread looks every ``--watch`` seconds (40 ms
on SQLite, 50 on MariaDB/MySQL by default) for a job submitted since it last looked: the newest
row of the ``(created_at, id)`` index, one index probe. On SQLite it first reads ``PRAGMA
data_version``, which changes only when another connection commits, so an idle worker beside an
idle database runs no other query. What it finds wakes the fetch loop, which claims as it does
after a poll.

It wakes for submissions only. Retries that come due, a pause lifted, a capacity limit with room
again are found by the poll (``--poll``), as before; on PostgreSQL the NOTIFY listener
(``listener.py``) covers those and this watch does not run.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.db import DatabaseError, connections

from ..models import Job
from .connections import close_thread_connections, reset_broken_connections

logger = logging.getLogger("django_durable_jobs.worker")

# How often an idle worker looks, per Django vendor: the wake-up's latency is about half of it.
# A look on MariaDB/MySQL is a round trip to the server, about 250 µs of the worker's CPU against
# SQLite's few microseconds once nothing changed: every 40 ms it cost an idle worker 0.9-1.2 % of a
# core in all (measured), every 50 ms 0.8 %, for 5 ms more latency on average.
LOOK_SECONDS = {"sqlite": 0.04, "mysql": 0.05}
BACKOFF_SECONDS = 1.0  # after a database error; the poll goes on meanwhile
IDLE_SECONDS = 1.0  # how often it looks at its stop event while the fetch loop is busy


class SubmissionWatch(threading.Thread):
    """Set ``wake`` when a job is submitted while ``looking`` is set (the fetch loop sleeps).

    Its queries run on this thread's own connection, in autocommit, so they never hold a lock,
    through the driver's cursor, kept from look to look (no Django cursor wrapper per look; a
    look's cost is mostly the thread waking up).
    """

    def __init__(
        self,
        using: str,
        wake: threading.Event,
        looking: threading.Event,
        stop: threading.Event,
        every: float | None = None,
    ) -> None:
        super().__init__(name="durable-jobs-watch", daemon=True)
        self.using = using
        self.wake = wake
        self.looking = looking
        self.stop = stop
        self.sqlite = connections[using].vendor == "sqlite"
        self.every = every or LOOK_SECONDS[connections[using].vendor]
        sql, params = (
            Job.objects.using(using)
            .order_by("-created_at", "-id")
            .values_list("created_at", "id")[:1]
            .query.get_compiler(using)
            .as_sql()
        )
        if params:  # the driver's cursor takes no Django placeholders
            raise ValueError(f"the newest-job query has parameters: {params!r}")
        self.newest_sql = sql
        self.newest: Any = None  # the newest job seen; None until the first look
        self.version: Any = None  # SQLite's data_version at the last look
        self._raw: Any = None
        self._cursor: Any = None

    @staticmethod
    def supported(using: str) -> bool:
        """Return True for the databases that need it: those without NOTIFY (see above)."""
        return connections[using].vendor in LOOK_SECONDS

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                if not self.looking.wait(IDLE_SECONDS):
                    continue
                try:
                    if self._submitted():
                        self.wake.set()
                except DatabaseError:
                    reset_broken_connections()
                    logger.debug("watch for new work failed; polling only", exc_info=True)
                    self.stop.wait(BACKOFF_SECONDS)
                    continue
                time.sleep(self.every)
        finally:
            close_thread_connections()

    def _submitted(self) -> bool:
        """Return True when the newest job is not the one the last look found."""
        wrapper = connections[self.using]
        with wrapper.wrap_database_errors:  # driver errors as Django's, marked for the reset
            wrapper.ensure_connection()
            if self._raw is not wrapper.connection:  # a new connection: a new cursor
                self._raw = wrapper.connection
                self._cursor = self._raw.cursor()
            cursor = self._cursor
            if self.sqlite:
                cursor.execute("PRAGMA data_version")
                version = cursor.fetchone()[0]
                if version == self.version:
                    return False  # no other connection committed since the last look
                self.version = version
            cursor.execute(self.newest_sql)
            newest = cursor.fetchone()
        if newest == self.newest:
            return False
        # The first look (and the first after a busy spell) may wake for a job the fetch loop
        # already claimed: one claim too many, never a submission missed.
        self.newest = newest
        return True
