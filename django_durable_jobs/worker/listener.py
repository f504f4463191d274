"""Wake-ups on new work: PostgreSQL LISTEN/NOTIFY, with polling as the fallback everywhere."""

from __future__ import annotations

import logging
import threading

from django.db import connections

from ..dbvendor import WORK_CHANNEL

logger = logging.getLogger("django_durable_jobs.worker")


class NotifyListener(threading.Thread):
    """Set ``wake`` whenever a job is deferred or a retry requested (PostgreSQL only).

    Uses a connection of its own in autocommit mode, reconnecting with backoff when the server
    restarts. After every (re)connect it wakes the worker once, since notifications sent while it
    was away are lost; polling covers that gap anyway, and the gap behind a transaction pooler.
    """

    def __init__(self, using: str, wake: threading.Event, stop: threading.Event) -> None:
        super().__init__(name="durable-jobs-listener", daemon=True)
        self.using = using
        self.wake = wake
        self.stop = stop
        self.listening = threading.Event()

    @staticmethod
    def supported(using: str) -> bool:
        return connections[using].vendor == "postgresql"

    def run(self) -> None:
        delay = 0.2
        while not self.stop.is_set():
            raw = None
            try:
                wrapper = connections[self.using]
                raw = wrapper.get_new_connection(wrapper.get_connection_params())
                raw.autocommit = True
                raw.execute(f"LISTEN {WORK_CHANNEL}")
                self.listening.set()
                self.wake.set()
                delay = 0.2
                while not self.stop.is_set():
                    for _ in raw.notifies(timeout=1.0, stop_after=1):
                        self.wake.set()
            except Exception:  # noqa: BLE001 - any driver error: reconnect, polling covers us
                self.listening.clear()
                logger.warning("LISTEN connection lost; reconnecting in %.1fs", delay)
                self.stop.wait(delay)
                delay = min(delay * 2, 5.0)
            finally:
                if raw is not None:
                    try:
                        raw.close()
                    except Exception:  # noqa: BLE001
                        pass
