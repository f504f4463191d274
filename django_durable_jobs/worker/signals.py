"""Signal handlers that cannot deadlock the process they stop.

A Python signal handler runs in the main thread, between two bytecodes of whatever it was doing.
If that was ``Event.wait()`` (the fetch loop waiting for work) the main thread may be holding the
event's lock at that instant, and a handler that calls ``Event.set()`` on the same event waits for
that lock forever: the worker hangs, holding its leases, until someone kills it.

So the handlers here only write one byte to a pipe, which takes no lock; a relay thread reads the
pipe and calls the real action from outside the main thread, where waiting for a lock is safe.
Signals are acted on in the order they arrived.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable

__all__ = ["relay_signals"]

RELAY_END_SECONDS = 5.0  # how long a restore waits for the relay thread's last actions


def relay_signals(actions: dict[int, Callable[[int], None]]) -> Callable[[], None]:
    """Install a handler for each signal of ``actions`` that runs ``actions[signum](signum)`` in a
    relay thread; return a function that restores the previous handlers.

    The restore ends the relay thread too, once it has acted on the signals already received
    (waiting for it up to ``RELAY_END_SECONDS``): a process that forks next, as ``runjobs
    --processes`` does, must run no other thread. Main thread only (where Python allows
    installing handlers).
    """
    read_end, write_end = os.pipe()
    signums = list(actions)

    def relay() -> None:
        try:
            while data := os.read(read_end, 1):
                signum = signums[data[0]]
                actions[signum](signum)
        finally:
            os.close(read_end)

    def handle(signum: int, frame: object) -> None:
        os.write(write_end, bytes([signums.index(signum)]))

    relaying = threading.Thread(target=relay, name="durable-jobs-signals", daemon=True)
    relaying.start()
    previous = {signum: signal.signal(signum, handle) for signum in signums}

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        os.close(write_end)  # the relay thread reads EOF and ends
        if threading.current_thread() is not relaying:
            relaying.join(RELAY_END_SECONDS)

    return restore
