"""The chaos run's faults: the plan a seed makes, and the worker processes they are done to.

:func:`plan` is pure: the same seed, length and options give the same faults at the same
offsets, so a run's seed replays its schedule. :class:`Fleet` starts the ``runjobs`` children
(one slot may live in a network namespace, to be partitioned), kills, pauses, resumes and
restarts them with real signals, and counts what it really did.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KINDS = ("kill", "pause", "partition", "restart")
SETTLED = 3.0  # seconds after its start by which a worker holds jobs


@dataclass(frozen=True)
class Fault:
    """One fault: at ``at`` seconds into the run, ``kind`` done to slot ``victim``.

    ``length`` is how long a paused worker stays stopped, a partition stays cut, or a killed
    worker stays down before it is started again.
    """

    at: float
    kind: str
    victim: int = -1
    length: float = 0.0

    def describe(self) -> str:
        who = f" worker {self.victim}" if self.victim >= 0 else ""
        return f"{self.at:7.2f}s {self.kind}{who} ({self.length:.2f}s)"


def plan(
    seed: int,
    seconds: float,
    *,
    workers: int,
    lease: float,
    kill_every: float,
    partition_slot: int | None,
    restart: bool,
) -> list[Fault]:
    """Return the faults of a run of ``seconds`` seconds, in order of time.

    Kills every ``kill_every`` seconds on average; a pause past the lease about once a minute
    (at least one); a partition of ``partition_slot`` about every two minutes (at least one,
    when there is such a slot); one database restart in the middle third when ``restart``.
    Every fault ends before the run does.
    """
    rng = random.Random(seed)
    faults: list[Fault] = []
    at = 1.5
    while True:
        at += rng.uniform(0.5, 1.5) * kill_every
        if at > seconds - 2:
            break
        faults.append(Fault(at, "kill", rng.randrange(workers), rng.uniform(0.2, 1.5)))
    others = [slot for slot in range(workers) if slot != partition_slot]

    def spread(kind: str, count: int, length: float, victims: list[int]) -> None:
        for k in range(count):
            span = (seconds - length - 2) / count
            start = 2 + k * span
            when = start + rng.uniform(0.1, 0.6) * max(span - 1, 0.5)
            faults.append(Fault(min(when, seconds - length - 1), kind, rng.choice(victims), length))

    spread("pause", max(1, int(seconds // 60)), lease + rng.uniform(1.0, 2.5), others)
    if partition_slot is not None:
        spread(
            "partition",
            max(1, int(seconds // 120)),
            2 * lease + rng.uniform(1, 3),
            [partition_slot],
        )
    if restart:
        faults.append(Fault(rng.uniform(0.4, 0.6) * seconds, "restart"))
    return sorted(faults, key=lambda f: f.at)


@dataclass
class Worker:
    """One ``runjobs`` child in a slot: the slot's ``generation``-th process."""

    slot: int
    generation: int
    proc: subprocess.Popen
    name: str
    paused: bool = False
    killed: bool = False
    started: float = field(default_factory=time.monotonic)


@dataclass
class Fleet:
    """The run's ``runjobs`` children, one per slot, and the faults done to them."""

    folder: Path
    env: dict[str, str]
    args: list[str]
    slots: int
    netns: Any = None  # a tests.proof.netns.Host for the partitioned slot
    netns_env: dict[str, str] = field(default_factory=dict)
    partition_slot: int | None = None
    workers: dict[int, Worker] = field(default_factory=dict)
    down_until: dict[int, float] = field(default_factory=dict)
    generations: dict[int, int] = field(default_factory=dict)
    done: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    exits: list[str] = field(default_factory=list)
    protected: set[int] = field(default_factory=set)  # slots no kill may take (a cut one)

    def start(self, slot: int, *extra: str) -> Worker:
        """Start the slot's next process (in the namespace for the partitioned slot)."""
        generation = self.generations.get(slot, 0) + 1
        self.generations[slot] = generation
        name = f"worker{slot}-{generation}"
        argv = [sys.executable, "-m", "django", "runjobs", *self.args, *extra]
        env = {**os.environ, **self.env}
        if slot == self.partition_slot and self.netns is not None:
            argv = self.netns.command(argv)
            env.update(self.netns_env)
        with open(self.folder / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = Worker(slot, generation, proc, name)
        self.workers[slot] = worker
        self.down_until.pop(slot, None)
        return worker

    def start_all(self) -> None:
        for slot in range(self.slots):
            self.start(slot)

    def alive(self, slot: int) -> Worker | None:
        worker = self.workers.get(slot)
        return worker if worker is not None and worker.proc.poll() is None else None

    def kill(self, slot: int, down: float) -> Worker | None:
        """SIGKILL the slot's process; start another ``down`` seconds later.

        A paused or cut-off process is left to wake up (its stale writes are the point of the
        pause or the partition): the next running one is killed instead.
        """
        order = [(slot + k) % self.slots for k in range(self.slots)]
        order = [s for s in order if s not in self.protected]
        running = [self.alive(s) for s in order]
        worker = next((w for w in running if w is not None and not w.paused), None)
        if worker is None:
            return None
        slot = worker.slot
        worker.proc.send_signal(signal.SIGKILL)
        worker.proc.wait()
        worker.killed = True
        self.down_until[slot] = time.monotonic() + down
        self.done["kill"] += 1
        return worker

    def pause(self, slot: int) -> Worker | None:
        """SIGSTOP the slot's process, or the next running one if that slot is down.

        A process that started less than :data:`SETTLED` seconds ago may hold no job yet: one
        that has run longer is taken first, so the pause leaves leases to lose.
        """
        order = [slot] + [s for s in range(self.slots) if s not in (slot, self.partition_slot)]
        running = [w for w in map(self.alive, order) if w is not None and not w.paused]
        settled = [w for w in running if time.monotonic() - w.started >= SETTLED]
        if not running:
            return None
        worker = (settled or running)[0]
        worker.proc.send_signal(signal.SIGSTOP)
        worker.paused = True
        self.done["pause"] += 1
        return worker

    def resume(self, worker: Worker) -> None:
        if worker.paused and worker.proc.poll() is None:
            worker.proc.send_signal(signal.SIGCONT)
        worker.paused = False

    def resume_all(self) -> None:
        for worker in self.workers.values():
            self.resume(worker)

    def tend(self, *, restart_all: bool = False) -> None:
        """Start the slots whose down time is over, and note processes that exited on their own."""
        now = time.monotonic()
        for slot in range(self.slots):
            worker = self.workers.get(slot)
            if worker is not None and worker.proc.poll() is not None and not worker.killed:
                tail = (self.folder / f"{worker.name}.log").read_text(errors="replace")[-600:]
                self.exits.append(f"{worker.name} exited {worker.proc.returncode}: {tail}")
                worker.killed = True
                self.down_until[slot] = now + 1.0
            due = self.down_until.get(slot)
            if due is not None and (restart_all or now >= due):
                self.start(slot)

    def stop(self, timeout: float = 40.0) -> list[str]:
        """SIGTERM every process, wait for all to exit; SIGKILL (and say so) what did not."""
        self.resume_all()
        running = [w for w in self.workers.values() if w.proc.poll() is None]
        for worker in running:
            worker.proc.send_signal(signal.SIGTERM)
        late = []
        deadline = time.monotonic() + timeout
        for worker in running:
            try:
                worker.proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait()
                late.append(worker.name)
        return late
