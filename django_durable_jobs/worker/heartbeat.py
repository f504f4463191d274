"""The heartbeat thread: one beat every lease/3 seconds, each renewing every held lease at once.

What a beat does is the owner's: the worker renews its holdings and refreshes its worker row,
``InProcessRunner`` renews its holdings (see ``Holdings.renew``). The worker's heartbeat runs
from start to stop; the in-process runner's runs while it holds anything, and starts again with
its next job.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .connections import close_thread_connections


class Heartbeat:
    """Call ``beat()`` every ``interval`` seconds in a thread of its own, between start and stop.

    Neither method blocks on the database; callers that start and stop it from several
    threads serialise the calls themselves (the in-process runner does under its holdings' lock).
    """

    def __init__(self, interval: float, beat: Callable[[], object], *, name: str) -> None:
        self.interval = interval
        self.beat = beat
        self.name = name
        self.thread: threading.Thread | None = None
        self._stop: threading.Event | None = None

    def start(self) -> None:
        """Start beating, unless it already does."""
        if self._stop is not None:
            return
        self._stop = threading.Event()
        self.thread = threading.Thread(
            target=self._loop, args=(self._stop,), name=self.name, daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        """Stop beating: the thread ends at once, or after the beat it is in."""
        if self._stop is not None:
            self._stop.set()
            self._stop = None

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the last thread started to end."""
        if self.thread is not None:
            self.thread.join(timeout)

    def _loop(self, stop: threading.Event) -> None:
        try:
            while not stop.wait(self.interval):
                self.beat()
        finally:
            close_thread_connections()
