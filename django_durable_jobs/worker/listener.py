"""Wake-ups on new work: PostgreSQL LISTEN/NOTIFY, with polling as the fallback everywhere."""

from __future__ import annotations

import inspect
import logging
import select
import threading
from collections.abc import Callable
from typing import Any

from django.db import connections

from ..database.dbvendor import listen_statement
from ..formatting.terminal import printable

logger = logging.getLogger("django_durable_jobs.worker")

WAIT_SECONDS = 1.0  # how often the listener looks at its stop event while idle
RECONNECT_MIN_SECONDS = 0.2
RECONNECT_MAX_SECONDS = 5.0


class NotifyListener(threading.Thread):
    """Set ``wake`` whenever a job is deferred or a retry requested (PostgreSQL only).

    Uses a session of its own in autocommit mode, opened with the driver directly (never taken
    from a connection pool Django may have configured: a LISTEN needs a session that stays put),
    and reconnects with backoff when the server restarts or drops it. After every (re)connect it
    wakes the worker once, since notifications sent while it was away are lost; polling covers
    that gap anyway, and the case of a transaction pooler that never delivers notifications.
    Works with psycopg 3 and psycopg2, the drivers Django supports.
    """

    def __init__(self, using: str, wake: threading.Event, stop: threading.Event) -> None:
        super().__init__(name="durable-jobs-listener", daemon=True)
        self.using = using
        self.wake = wake
        self.stop = stop
        self.listening = threading.Event()

    @staticmethod
    def supported(using: str) -> bool:
        """Return True when the database of ``using`` can notify (see ``dbvendor``)."""
        return listen_statement(using) is not None

    def run(self) -> None:
        delay = RECONNECT_MIN_SECONDS
        lost = False
        while not self.stop.is_set():
            raw = None
            try:
                raw = self._connect()
                wait = _waiter(raw)
                self.listening.set()
                self.wake.set()
                if lost:
                    logger.info("LISTEN connection restored")
                    lost = False
                delay = RECONNECT_MIN_SECONDS
                while not self.stop.is_set():
                    if wait(WAIT_SECONDS):
                        self.wake.set()
            except Exception as exc:  # noqa: BLE001 - any driver error: reconnect; polling covers us
                self.listening.clear()
                lost = True
                reason = printable(
                    " ".join(str(exc).split())[:200] or type(exc).__name__, keep_newlines=False
                )
                logger.warning("LISTEN connection lost (%s); reconnecting in %.1fs", reason, delay)
                self.stop.wait(delay)
                delay = min(delay * 2, RECONNECT_MAX_SECONDS)
            finally:
                if raw is not None:
                    try:
                        raw.close()
                    except Exception:  # noqa: BLE001 - closing a dead session
                        pass

    def _connect(self) -> Any:
        """Open a new autocommit session that listens on the work channel."""
        wrapper = connections[self.using]
        raw = wrapper.Database.connect(**wrapper.get_connection_params())
        try:
            raw.autocommit = True
            cursor = raw.cursor()
            try:
                cursor.execute(listen_statement(self.using))
            finally:
                cursor.close()
        except BaseException:
            raw.close()
            raise
        return raw


def _waiter(raw: Any) -> Callable[[float], bool]:
    """Return ``wait(timeout)``: block up to ``timeout`` s, True when a notification arrived."""
    notifies = getattr(raw, "notifies", None)
    if not callable(notifies):  # psycopg2: a list the driver fills on poll()

        def wait_psycopg2(timeout: float) -> bool:
            if not select.select([raw.fileno()], [], [], timeout)[0]:
                return False
            raw.poll()
            arrived = len(raw.notifies) > 0
            raw.notifies.clear()
            return arrived

        return wait_psycopg2

    if "timeout" in inspect.signature(notifies).parameters:  # psycopg >= 3.2

        def wait_psycopg(timeout: float) -> bool:
            # Exhaust the generator (stop_after=1): it holds the connection's lock until closed.
            return bool(list(raw.notifies(timeout=timeout, stop_after=1)))

        return wait_psycopg

    # psycopg < 3.2: notifies() blocks without a timeout. Wait for the socket, then let a
    # statement read what arrived; the driver hands notifications to the handler meanwhile.
    received: list[Any] = []
    raw.add_notify_handler(received.append)

    def wait_psycopg_31(timeout: float) -> bool:
        if select.select([raw.fileno()], [], [], timeout)[0]:
            raw.execute("SELECT 1")
        arrived = bool(received)
        received.clear()
        return arrived

    return wait_psycopg_31
