"""``runjobs --processes N``: start N worker processes, reap, log and restart them.

The parent runs no jobs and opens no database connection. It starts N children (each a
single-process ``runjobs`` with the same options), and supervises them:

* the **first** N children are forked from the parent, which has set up Django and checked the
  options already, when it can: ``os.fork`` exists, the parent runs no other thread, and
  ``--metrics-port`` is off (its children must import prometheus-client afresh). A forked child
  starts in milliseconds instead of importing Django again, and shares the parent's pages until
  it writes them. A child started later (a replacement), or when forking cannot be done, is a
  new interpreter running ``child_command`` (``--processes=1``);

* a child that **dies** (an exit code other than 0, or a signal: a job calling ``os._exit()``,
  the OOM killer, SIGKILL) is reaped at once and logged at WARNING with its pid and how it ended,
  then restarted after a pause: ``--restart-delay`` (1 s), doubled after each further death of a
  child in the same place, up to ``MAX_RESTART_DELAY`` (60 s). A child that ran longer than the
  crash-loop window is taken to have been healthy: its death starts the pause over;
* ``--crash-loop-deaths`` deaths (5) within ``--crash-loop-seconds`` (60 s), counted over all the
  children, are a **crash loop**: restarting cannot help, so the parent logs it at ERROR, stops the
  other children as on SIGTERM and exits 1, for its process manager (systemd, Kubernetes) to see;
* a child that **exits 0 on its own** (``--max-jobs`` reached, or a SIGTERM sent to the child
  itself) is replaced after ``--restart-delay``, without counting as a death; with ``--burst`` it
  is done, and the parent exits once every child is;
* the parent's own first SIGTERM/SIGINT is passed on as ``PARENT_STOP``, any later one as
  ``PARENT_CANCEL`` (see ``shutdown.py``), and repeated each second for a child that was still
  starting and missed it; from then on nothing is restarted, and the parent exits once every
  child has, with 0 when all stopped cleanly, else the worst child's status (a death by signal N
  counts as 128 + N, as a shell reports it; a stop signal that ended a child still starting,
  before its handlers were in, counts as a clean stop). A child that died earlier and was
  waiting for its restart is not counted: its death was logged and handled.

The jobs a dead child held keep their leases until those expire; workers then reclaim the ones
of ``on_expired="resume"`` operations, as after any crash.

``RestartRule`` and ``Restarts`` are the rule as pure values (times are passed in), tested
without processes; ``Supervisor`` takes a ``clock`` for the same reason.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NoReturn

from .options import seconds, whole
from .shutdown import PARENT_CANCEL, PARENT_STOP
from .signals import relay_signals

logger = logging.getLogger("django_durable_jobs.worker")

RESTART_DELAY = 1.0  # seconds before the first restart of a child that died
MAX_RESTART_DELAY = 60.0  # the doubling's cap
CRASH_LOOP_DEATHS = 5
CRASH_LOOP_SECONDS = 60.0
CRASH_LOOP_EXIT = 1  # the parent's exit status after a crash loop

# Bounds of the options, as ``options.py`` keeps those of the worker's.
RESTART_DELAY_BOUNDS = (0.0, MAX_RESTART_DELAY)
CRASH_LOOP_DEATHS_BOUNDS = (1, 1000)
CRASH_LOOP_SECONDS_BOUNDS = (1.0, 86_400.0)

TICK = 1.0  # the longest the parent waits without a signal (SIGCHLD normally wakes it first)

# A child that ends by one of these while the parent stops was asked to stop (by us, or by a
# service manager that signals every process) before it had installed its handlers: it was still
# starting and held no job, so it counts as stopped cleanly.
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, PARENT_STOP, PARENT_CANCEL)

# Held (blocked) while the first children are forked and until the parent's handlers are in:
# one that arrives meanwhile waits, instead of ending the parent by its default action.
_HELD = {signal.SIGTERM, signal.SIGINT, signal.SIGCHLD}

__all__ = [
    "CRASH_LOOP_EXIT",
    "RestartRule",
    "Restarts",
    "Forked",
    "Supervisor",
    "cannot_fork",
    "child_command",
    "ending",
    "exit_status",
    "supervise",
]


@dataclass(frozen=True)
class RestartRule:
    """When a dead child is restarted, and how many deaths make a crash loop."""

    restart_delay: float = RESTART_DELAY
    crash_loop_deaths: int = CRASH_LOOP_DEATHS
    crash_loop_seconds: float = CRASH_LOOP_SECONDS

    def validate(self) -> None:
        """Raise ValueError naming the first option that cannot work."""
        seconds(self.restart_delay, "--restart-delay", RESTART_DELAY_BOUNDS)
        whole(self.crash_loop_deaths, "--crash-loop-deaths", CRASH_LOOP_DEATHS_BOUNDS)
        seconds(self.crash_loop_seconds, "--crash-loop-seconds", CRASH_LOOP_SECONDS_BOUNDS)


class Restarts:
    """The rule applied death by death: each place's next pause and the recent deaths.

    Pure: every time is passed in (seconds of one monotonic clock), so tests need no processes.
    """

    def __init__(self, rule: RestartRule) -> None:
        self.rule = rule
        self._next: dict[int, float] = {}  # place -> pause before its next restart
        self._deaths: deque[float] = deque()

    def died(self, place: int, *, lived: float, now: float) -> float | None:
        """Record that the child in ``place`` died at ``now`` after ``lived`` seconds.

        Return the pause before its restart, or None when this death completes a crash loop
        (``crash_loop_deaths`` deaths within the last ``crash_loop_seconds``).
        """
        rule = self.rule
        self._deaths.append(now)
        while self._deaths and self._deaths[0] <= now - rule.crash_loop_seconds:
            self._deaths.popleft()
        if len(self._deaths) >= rule.crash_loop_deaths:
            return None
        if lived >= rule.crash_loop_seconds:  # it was healthy: start over
            pause = rule.restart_delay
        else:
            pause = self._next.get(place, rule.restart_delay)
        self._next[place] = min(pause * 2, MAX_RESTART_DELAY)
        return pause

    def recent(self) -> int:
        """Return how many deaths the crash-loop window held at the last one."""
        return len(self._deaths)


def ending(returncode: int) -> str:
    """Return how a child ended, as ``Popen.returncode`` says: "exit code 7", "signal SIGKILL"."""
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        return f"signal {signal.Signals(-returncode).name}"
    except ValueError:
        return f"signal {-returncode}"


def exit_status(returncode: int) -> int:
    """Return ``returncode`` as a shell reports it: a death by signal N is 128 + N."""
    return returncode if returncode >= 0 else 128 - returncode


def child_command(argv: list[str]) -> list[str]:
    """Return the command that starts one child: this interpreter, ``argv`` (``sys.orig_argv``,
    so ``-m django`` stays intact) without ``--processes``, then ``--processes=1``.

    The last ``--processes`` wins, so an abbreviation the parser accepted (``--proc 4``) cannot
    make every child start children of its own.
    """
    result, skip = [], False
    for arg in argv[1:]:
        if skip:
            skip = False
        elif arg == "--processes":
            skip = True
        elif not arg.startswith("--processes="):
            result.append(arg)
    return [sys.executable, *result, "--processes=1"]


def supervise(
    processes: int,
    rule: RestartRule,
    *,
    burst: bool = False,
    on_exit: Callable[[int], object] = lambda pid: None,
    argv: list[str] | None = None,
    forked: Callable[[], int] | None = None,
) -> int:
    """Run ``processes`` single-process copies of this ``runjobs`` until they end; return the
    parent's exit status.

    The children's command line is this one's (``argv``, by default ``sys.orig_argv``) with
    ``--processes=1``; ``on_exit`` is called with the pid of each child that ended. With
    ``forked``, the first children are forked where that can be done, and run ``forked()``
    (returning their exit status) instead of the command line.
    """
    command = child_command(sys.orig_argv if argv is None else argv)
    return Supervisor(command, processes, rule, burst=burst, on_exit=on_exit, forked=forked).run()


def cannot_fork() -> str | None:
    """Return why a child cannot be forked safely here, or None where it can: ``os.fork`` exists,
    and this process runs no other thread (one could hold a lock the child would then wait for
    forever)."""
    if not hasattr(os, "fork"):
        return "this system has no os.fork"
    if (threads := threading.active_count()) > 1:
        return (
            f"this process runs {threads} threads, and a thread holding a lock while the "
            "process forks would leave the child waiting for it"
        )
    return None


class Forked:
    """A child forked by ``Forked.start``, with what the supervisor uses of ``subprocess.Popen``:
    ``pid``, ``returncode`` (negative for a death by signal, as Popen's), ``poll()`` and
    ``send_signal()``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    @classmethod
    def start(cls, run: Callable[[], int]) -> Forked:
        """Fork a child that runs ``run()`` and exits with what it returns (the caller holds
        ``_HELD``, which the child lets through once it is in a process group of its own)."""
        for stream in (sys.stdout, sys.stderr):  # not written twice, by parent and child
            stream.flush()
        pid = os.fork()
        if pid == 0:
            _child(run)
        try:  # the child does the same: whichever runs first, a group-wide Ctrl-C misses it
            os.setpgid(pid, pid)
        except OSError:  # it already ran and exited
            pass
        return cls(pid)

    def poll(self) -> int | None:
        """Reap the child if it ended; return its returncode, None while it runs."""
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        """Send ``signum`` to the child unless it was reaped (its pid may be another's now)."""
        if self.poll() is None:
            os.kill(self.pid, signum)


def _child(run: Callable[[], int]) -> NoReturn:
    """The forked child: run, then exit at once, never returning into the parent's frames."""
    status = 1
    try:
        os.setpgid(0, 0)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)
        status = run()
    except SystemExit as exc:  # as the interpreter ends on it: a text is printed, status 1
        status = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the child must never unwind into the parent's code
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001, S110 - exiting whatever happens
                pass
        os._exit(status)


@contextmanager
def _held_signals() -> Iterator[None]:
    """Block ``_HELD`` in this thread while the block runs; what arrived meanwhile then comes."""
    signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)


@dataclass
class _Place:
    """One of the N places a child runs in, and the child now in it (if any)."""

    number: int
    process: subprocess.Popen | Forked | None = None
    started: float = 0.0
    restart_at: float | None = None  # when the next child starts here
    replaces: int | None = None  # the pid of the child it replaces
    done: bool = False
    status: int = 0  # what this place adds to the parent's exit status


class Supervisor:
    """Run ``count`` children of ``command`` and supervise them (see the module docstring)."""

    def __init__(
        self,
        command: list[str],
        count: int,
        rule: RestartRule | None = None,
        *,
        burst: bool = False,
        clock: Callable[[], float] = time.monotonic,
        on_exit: Callable[[int], object] = lambda pid: None,
        forked: Callable[[], int] | None = None,
    ) -> None:
        self.command = command
        self.forked = forked  # what a forked child runs; None: every child runs ``command``
        self.on_exit = on_exit  # called with the pid of each child that ended (metrics)
        self.rule = rule or RestartRule()
        self.restarts = Restarts(self.rule)
        self.burst = burst
        self.clock = clock
        self.places = [_Place(number) for number in range(1, count + 1)]
        self.crash_loop = False
        self.wake = threading.Event()
        self._signals: list[int] = []  # appended by the relay thread
        self._passed_on = 0
        self._asking: signal.Signals | None = None  # what the children were last asked
        self._asked_at = 0.0

    @property
    def stopping(self) -> bool:
        """True once a signal or a crash loop ended the restarting."""
        return bool(self._signals) or self.crash_loop

    def run(self) -> int:
        """Start the children, supervise them until every one has ended; return the exit status.

        Main thread only (it installs signal handlers, and restores the previous ones).
        """
        logger.info("supervising %d worker processes; SIGTERM/Ctrl-C stops them", len(self.places))
        with _held_signals():  # forked before the relay thread exists, and none lost meanwhile
            why_not = cannot_fork() if self.forked is not None else None
            if why_not is not None:
                logger.info("worker processes start as new interpreters, not forked: %s", why_not)
            fork = self.forked is not None and why_not is None
            for place in self.places:
                self._start(place, fork=fork)
            restore = relay_signals(
                {
                    signal.SIGTERM: self._signalled,
                    signal.SIGINT: self._signalled,
                    signal.SIGCHLD: lambda signum: self.wake.set(),
                }
            )
        try:
            while self._step():
                pass
        finally:
            restore()
        status = CRASH_LOOP_EXIT if self.crash_loop else max(p.status for p in self.places)
        logger.log(
            logging.ERROR if status else logging.INFO,
            "every worker process has ended; exiting %d",
            status,
        )
        return status

    def _signalled(self, signum: int) -> None:
        """Note a SIGTERM/SIGINT (in the relay thread); the main thread passes it on."""
        self._signals.append(signum)
        self.wake.set()

    def _step(self) -> bool:
        """Reap, pass signals on, start what is due; return False once nothing is left to run."""
        self.wake.clear()  # before looking, so that an exit or a signal from now on wakes us
        now = self.clock()
        for place in self.places:
            if place.process is not None and place.process.poll() is not None:
                self._ended(place, now)
        self._pass_signals_on(now)
        if self.stopping:
            for place in self.places:
                if place.restart_at is not None:
                    place.restart_at, place.done = None, True
        else:
            for place in self.places:
                if place.restart_at is not None and place.restart_at <= now:
                    self._start(place)
        if not any(p.process is not None or p.restart_at is not None for p in self.places):
            return False
        due = [p.restart_at for p in self.places if p.restart_at is not None]
        self.wake.wait(max(0.0, min([TICK, *(at - self.clock() for at in due)])))
        return True

    def _pass_signals_on(self, now: float) -> None:
        """Pass each new SIGTERM/SIGINT on to the running children: a first one as
        ``PARENT_STOP``, any later one as ``PARENT_CANCEL``; repeat the last request each
        ``TICK``, for a child that was still starting and missed it (asking twice changes
        nothing)."""
        signals = list(self._signals)
        for signum in signals[self._passed_on :]:
            self._passed_on += 1
            passed_on = PARENT_STOP if self._passed_on == 1 else PARENT_CANCEL
            what = "stop claiming" if passed_on == PARENT_STOP else "also cancel running jobs"
            logger.info(
                "%s: passing it on to %d worker process(es) as %s (%s)",
                signal.Signals(signum).name,
                self._ask(passed_on, now),
                passed_on.name,
                what,
            )
        if self._asking is not None and now - self._asked_at >= TICK:
            self._ask(self._asking, now)

    def _ask(self, signum: signal.Signals, now: float) -> int:
        """Send ``signum`` to every running child, and again each ``TICK``; return to how many."""
        self._asking, self._asked_at = signum, now
        return self._send(signum)

    def _send(self, signum: int) -> int:
        """Send ``signum`` to every running child; return to how many."""
        sent = 0
        for place in self.places:
            if place.process is not None and place.process.poll() is None:
                place.process.send_signal(signum)
                sent += 1
        return sent

    def _start(self, place: _Place, *, fork: bool = False) -> None:
        place.restart_at = None
        try:  # a child of its own process group: a group-wide Ctrl-C reaches it once, through us
            if fork:
                place.process = Forked.start(self.forked)
            else:
                place.process = subprocess.Popen(self.command, process_group=0)
        except OSError as exc:  # no memory, no process slot left: a death like any other
            logger.warning("worker process %d could not be started: %s", place.number, exc)
            self._died(place, "could not start", lived=0.0, now=self.clock(), status=1)
            return
        place.started = self.clock()
        replacing = f" (replacing pid {place.replaces})" if place.replaces else ""
        logger.info(
            "worker process %d started: pid %d%s%s",
            place.number,
            place.process.pid,
            replacing,
            " (forked)" if fork else "",
        )

    def _ended(self, place: _Place, now: float) -> None:
        """Log how the child in ``place`` ended and decide what comes next there."""
        process, place.process = place.process, None
        pid, code, lived = process.pid, process.returncode, now - place.started
        place.replaces = pid
        self.on_exit(pid)
        name = f"worker process {place.number} (pid {pid})"
        if self.stopping:  # ended by a signal: still starting, before its handlers were in
            asked = code == 0 or -code in _STOP_SIGNALS
            place.done, place.status = True, 0 if asked else exit_status(code)
            level = logging.INFO if asked else logging.WARNING
            logger.log(level, "%s stopped: %s after %.1fs", name, ending(code), lived)
        elif code == 0 and self.burst:
            place.done = True
            logger.info("%s finished (--burst): exit code 0 after %.1fs", name, lived)
        elif code == 0:  # --max-jobs reached, or someone stopped this child itself
            place.restart_at = now + self.rule.restart_delay
            logger.info(
                "%s ended on its own: exit code 0 after %.1fs; replacing it in %gs",
                name,
                lived,
                self.rule.restart_delay,
            )
        else:
            self._died(place, f"{name} died: {ending(code)}", lived=lived, now=now, status=code)

    def _died(self, place: _Place, what: str, *, lived: float, now: float, status: int) -> None:
        pause = self.restarts.died(place.number, lived=lived, now=now)
        if pause is not None:
            place.restart_at = now + pause
            logger.warning("%s after %.1fs; restarting it in %gs", what, lived, pause)
            return
        place.done, place.status = True, exit_status(status)
        self.crash_loop = True
        rule = self.rule
        logger.error(
            "%s after %.1fs. Crash loop: %d worker process deaths within %gs "
            "(--crash-loop-deaths %d, --crash-loop-seconds %g); restarting cannot help. "
            "Stopping the other worker processes; exiting %d.",
            what,
            lived,
            self.restarts.recent(),
            rule.crash_loop_seconds,
            rule.crash_loop_deaths,
            rule.crash_loop_seconds,
            CRASH_LOOP_EXIT,
        )
        running = self._ask(PARENT_STOP, now)
        if running:
            logger.info("asked %d worker process(es) to stop (%s)", running, PARENT_STOP.name)
