"""The worker's event loop: one thread where ``async def`` operations run as asyncio tasks.

``runjobs --async-slots N`` (100 by default) lets up to N attempts of ``async def`` operations
run at once on this loop, beside the job threads of the others: a job waiting on I/O holds a
task, not a thread. The loop thread makes no database call itself (Django refuses those inside a
running loop); an attempt's ``ctx`` writes go through ``sync_to_async`` (``ctx.acheckpoint()``
and its siblings), and its outcome to the completer like a thread's.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["EventLoop"]


class EventLoop:
    """An asyncio event loop running in a daemon thread of its own, started on demand."""

    def __init__(self, name: str = "durable-jobs-loop") -> None:
        self.name = name
        self.loop: asyncio.AbstractEventLoop | None = None  # made by start()
        self.thread: threading.Thread | None = None
        self.tasks: set[asyncio.Task] = set()  # strong references: the loop keeps weak ones

    def start(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            if not self.tasks:  # else left as they are: they end with the process
                self.loop.close()

    def spawn(self, coroutine: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        """Run ``coroutine()`` as a task of the loop (callable from any thread)."""
        self.loop.call_soon_threadsafe(self._spawn, coroutine)

    def _spawn(self, coroutine: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        task = self.loop.create_task(coroutine())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def cancel(self, task: asyncio.Task) -> None:
        """Cancel ``task`` (callable from any thread): ``CancelledError`` at its next await.

        Nothing to do once the loop has closed (the worker stopped, every task ended).
        """
        try:
            self.loop.call_soon_threadsafe(task.cancel)
        except RuntimeError:  # closed
            pass

    def stop(self, timeout: float) -> None:
        """Stop the loop once what it is running now yields; wait up to ``timeout`` for that.

        Tasks still running (a grace period that ran out) are left as they are: like busy job
        threads, they end with the process.
        """
        if self.thread is not None and self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout)
