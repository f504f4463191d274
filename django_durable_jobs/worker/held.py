"""A held claim: one lease this process keeps alive, from its claim until its outcome committed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from ..rules.values import Claimed, Lease

if TYPE_CHECKING:
    from .context import JobContext
    from .reports import AttemptReport


class HeldState(StrEnum):
    """What a held claim is doing; only this process sees it (the job row says ``running``)."""

    BUFFERED = "buffered"  # waiting in the worker's prefetch buffer: none of its code ran
    RUNNING = "running"  # its executor runs in a thread, or on the event loop
    FINISHING = "finishing"  # its executor ended; its outcome waits for the completer's flush
    DONE = "done"  # its outcome committed (or could not be written): no longer held


class CancelEvent(threading.Event):
    """``ctx.cancelled``'s event; setting it also calls what ``on_set`` registered, once.

    An attempt on the event loop registers the cancellation of its task: whatever sets the event
    (a cancellation request, a lost lease, the timeout, a second signal) then raises
    ``CancelledError`` at its next ``await``.
    """

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: list[Callable[[], object]] = []
        self._callbacks_lock = threading.Lock()

    def set(self) -> None:
        super().set()
        with self._callbacks_lock:
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_set(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` when the event is set (now, if it already is); at most once."""
        with self._callbacks_lock:
            if not self.is_set():
                self._callbacks.append(callback)
                return
        callback()


@dataclass(eq=False)
class Held:
    """A claim this process holds, and what its executor should know of it.

    ``cancel`` is the executor's ``ctx.cancelled``: set by a cancellation request, a lost lease
    or the attempt's timeout. ``expires_at`` follows the lease as heartbeats renew it. ``done``
    is set, and ``report`` filled in, once the attempt ended. ``started`` and ``deadline`` are
    ``time.monotonic()`` values, set when the attempt starts (``deadline`` only for an operation
    with a timeout); ``abandoned`` once the worker gave up waiting for its executor (see
    ``watchdog.py``). ``on_loop`` when its executor is a coroutine run on the worker's event
    loop (``eventloop.py``), not in a job thread.
    """

    claim: Claimed
    state: HeldState = HeldState.BUFFERED
    cancel: CancelEvent = field(default_factory=CancelEvent)
    cancel_recorded: bool = False  # this process recorded a cancellation request (2nd signal)
    ctx: JobContext | None = None  # once its attempt started
    expires_at: datetime = field(init=False)
    report: AttemptReport | None = None
    done: threading.Event = field(default_factory=threading.Event)
    started: float | None = None
    timeout: float | None = None  # the operation's timeout, in seconds, if it has one
    deadline: float | None = None  # started + timeout
    abandoned: bool = False
    on_loop: bool = False

    def __post_init__(self) -> None:
        self.expires_at = self.claim.lease.expires_at

    @property
    def lease(self) -> Lease:
        return self.claim.lease

    def lose(self) -> None:
        """Tell the executor its lease is lost: ``ctx.cancelled`` and ``ctx.lease_lost``.

        ``lease_lost`` first: an attempt that stops as soon as it is cancelled (a task on the
        event loop, cancelled by the event) must find it set, or it would offer its stop to the
        fence.
        """
        if self.ctx is not None and self.state != HeldState.DONE:
            self.ctx.lease_lost = True
        self.cancel.set()


def key(lease: Lease) -> tuple:
    """Return the key of a held claim: a job may be held again at a later epoch."""
    return (lease.job_id, lease.epoch)
