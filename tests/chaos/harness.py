"""The chaos run: ``runjobs`` processes killed, paused, partitioned and cut off from a restarting
database over thousands of jobs, then the history of every fenced write checked.

``python -m tests.chaos --db postgresql --minutes 10`` (``make chaos CHAOS_ARGS=...``):

1. creates its own database ``durable_jobs_chaos`` (dropped first; never a pytest one) and
   migrates it, or, with ``--database NAME``, uses that migrated database as it is (the pytest
   test database of ``tests/chaos/test_chaos.py``) and removes what it added when it ends;
2. installs the audit triggers (``tests/chaos/audit.py``) and declares a schedule ticking every
   second;
3. starts ``--workers`` ``runjobs`` children (one inside a network namespace, reaching the
   database through a relay, when namespaces can be made here and the database is a server),
   each writing its history of fenced writes to ``history-<pid>.jsonl`` in the run's folder
   under ``test-output/chaos/``;
4. submits ``chaos.domain`` and ``chaos.plain`` jobs in waves, paced over the run and topped up
   so the queue never runs dry before the end, while it carries out the faults the seed planned
   (``tests/chaos/faults.py``): SIGKILL and restart, SIGSTOP past the lease and SIGCONT, a
   partition cut then healed, one database restart (only with
   ``DURABLE_JOBS_TEST_RESTART_SERVERS=1``; the server is always left running);
5. then heals everything, waits for the queue to drain, stops the workers with SIGTERM, runs one
   ``--burst`` worker for the last ticks, checks the run (``tests/chaos/checker.py``), prints
   the summary, writes ``summary.json`` and exits 1 on any violation (2 when it could not
   finish: the queue did not drain).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
OUTPUT = REPO_ROOT / "test-output" / "chaos"
OWN_DATABASE = "durable_jobs_chaos"
SCHEDULE = "chaos-beat"
RESTART_ENV = "DURABLE_JOBS_TEST_RESTART_SERVERS"
PORTS = {"postgresql": 5432, "mariadb": 3306}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.chaos", description=__doc__.split("\n\n")[0].replace("\n", " ")
    )
    parser.add_argument(
        "--db",
        choices=("sqlite", "postgresql", "mariadb"),
        default=os.environ.get("DURABLE_JOBS_TEST_DB", "sqlite") or "sqlite",
    )
    parser.add_argument("--minutes", type=float, default=3.0, help="length of the faults (3)")
    parser.add_argument("--seconds", type=float, help="length in seconds (overrides --minutes)")
    parser.add_argument("--workers", type=int, default=4, help="runjobs processes (4)")
    parser.add_argument("--concurrency", type=int, default=4, help="slots per worker (4)")
    parser.add_argument("--jobs", type=int, help="jobs paced over the run (15 a second)")
    parser.add_argument("--lease", type=float, default=3.0, help="lease seconds (3)")
    parser.add_argument("--kill-every", type=float, default=6.0, help="mean seconds between kills")
    parser.add_argument("--seed", type=int, help="replays a run's faults (default: random)")
    parser.add_argument("--database", help="use this migrated database instead of creating one")
    parser.add_argument("--drain-timeout", type=float, default=120.0)
    parser.add_argument("--output", type=Path, help="the run's folder")
    options = parser.parse_args(argv)
    options.seconds = options.seconds or options.minutes * 60
    options.jobs = options.jobs or int(15 * options.seconds)
    options.seed = options.seed if options.seed is not None else random.randrange(1_000_000)
    return options


def setup_django(options: argparse.Namespace, folder: Path) -> dict[str, str]:
    """Point this process and its children at the run's database; return the children's env."""
    name = options.database or OWN_DATABASE
    if options.db == "sqlite" and not options.database:
        name = str(OUTPUT / f"{OWN_DATABASE}.sqlite3")
    every = {"operation": "chaos.tick", "every": 1, "catch_up": "all", "overlap": "allow"}
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.chaos.settings",
        "DURABLE_JOBS_TEST_DB": options.db,
        "DURABLE_JOBS_DB_NAME": name,
        "DURABLE_JOBS_TEST_SETTINGS": json.dumps(
            {"SCHEDULES": {SCHEDULE: {**every, "catch_up_limit": 10_000}}}
        ),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    os.environ.update(env)
    os.environ.pop("DURABLE_JOBS_CHAOS_DIR", None)  # this process keeps no history
    import django

    django.setup()
    if not options.database:
        _recreate(options.db, name)
    return {**env, "DURABLE_JOBS_CHAOS_DIR": str(folder)}


def _recreate(db: str, name: str) -> None:
    """Drop and create the run's own database, then migrate it."""
    from django.core.management import call_command
    from django.db import connection

    if db == "sqlite":
        for suffix in ("", "-wal", "-shm"):
            Path(name + suffix).unlink(missing_ok=True)
    else:
        quoted = connection.ops.quote_name(name)
        with connection._nodb_cursor() as cursor:
            force = " WITH (FORCE)" if db == "postgresql" else ""
            cursor.execute(f"DROP DATABASE IF EXISTS {quoted}{force}")
            charset = " CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci" if db == "mariadb" else ""
            cursor.execute(f"CREATE DATABASE {quoted}{charset}")
    call_command("migrate", verbosity=0)


def restart_database(db: str) -> float:
    """Restart the database server; return the seconds it was away. It is left running."""
    started = time.monotonic()
    if db == "postgresql":
        version = sorted(os.listdir("/etc/postgresql"))[-1]
        ctl = ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main"]
        try:
            subprocess.run([*ctl, "restart"], check=True, timeout=120, capture_output=True)
        finally:
            if not _wait(["pg_isready", "-q", "-h", "127.0.0.1", "-p", "5432"], 60):
                subprocess.run([*ctl, "start"], timeout=120, capture_output=True)
                _wait(["pg_isready", "-q", "-h", "127.0.0.1", "-p", "5432"], 60)
    else:
        ping = ["mysqladmin", "-h127.0.0.1", "-P3306", "-uroot", "ping"]
        try:
            subprocess.run(
                ["mysqladmin", "-h127.0.0.1", "-P3306", "-uroot", "shutdown"],
                timeout=120,
                capture_output=True,
            )
            _wait_down(ping, 60)
            # start-stop-daemon --oknodo starts nothing while the old process still exits.
            _wait_down(["pidof", "mariadbd"], 60)
        finally:
            start = [
                "start-stop-daemon",
                "--start",
                "--oknodo",
                "--background",
                "--exec",
                "/usr/sbin/mariadbd",
            ]
            for _ in range(3):
                subprocess.run(start, timeout=60, capture_output=True)
                if _wait(ping, 20):
                    break
    from django.db import connections

    connections.close_all()
    return time.monotonic() - started


def _wait(argv: list[str], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if subprocess.run(argv, capture_output=True, timeout=30).returncode == 0:
            return True
        time.sleep(0.3)
    return False


def _wait_down(argv: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if subprocess.run(argv, capture_output=True, timeout=30).returncode != 0:
            return
        time.sleep(0.2)


class Run:
    """One chaos run: its options, its folder, its workers, its submissions and faults."""

    def __init__(self, options: argparse.Namespace, folder: Path, env: dict[str, str]) -> None:
        from tests.chaos.faults import Fleet

        self.options = options
        self.folder = folder
        self.rng = random.Random(options.seed + 1)
        self.submitted: dict[str, str] = {}
        self.batch: tuple[str, list[dict], list[str]] | None = None  # retried as it was
        self.serial = 0
        self.backlog: list[int] = []
        self.notes: list[str] = []
        self.restart_seconds: list[float] = []
        self.host = None
        self.partition_slot = None
        args = [
            "--lease",
            f"{options.lease:g}",
            "--poll",
            "0.2",
            "--grace",
            "15",
            "--concurrency",
            str(options.concurrency),
        ]
        self.fleet = Fleet(folder, env, args, options.workers)
        self.low_water = 4 * options.workers * options.concurrency

    def say(self, text: str) -> None:
        line = f"[chaos {datetime.now(UTC):%H:%M:%S}] {text}"
        print(line, flush=True)
        self.notes.append(line)

    # -- partition -----------------------------------------------------------------------

    def open_partition(self) -> None:
        """Put the last slot in a network namespace, or say why there is no partition."""
        if self.options.db == "sqlite":
            self.say("partition skipped: SQLite has no network between worker and database")
            return
        from tests.proof import netns

        reason = netns.unavailable_reason()
        if reason is not None:
            self.say(f"partition skipped: {reason}")
            return
        self.host = netns.Host("chaos")
        gateway, port = self.host.forward(PORTS[self.options.db])
        self.partition_slot = self.options.workers - 1
        self.fleet.netns = self.host
        self.fleet.partition_slot = self.partition_slot
        self.fleet.netns_env = {"DURABLE_JOBS_DB_HOST": gateway, "DURABLE_JOBS_DB_PORT": str(port)}
        self.say(f"worker {self.partition_slot} runs in {self.host!r}")

    # -- jobs ----------------------------------------------------------------------------

    def pending(self) -> int:
        from django_durable_jobs.models import Job

        ops = ("chaos.domain", "chaos.plain")
        return Job.objects.filter(operation__in=ops, status="pending").count()

    def top_up(self, elapsed: float) -> None:
        """Submit the jobs due by now (paced), or more when the backlog runs low."""
        from django.db import DatabaseError, connections

        from django_durable_jobs import submit_many

        try:
            if self.batch is None:
                paced = int(self.options.jobs * min(1.0, elapsed / self.options.seconds))
                want = min(max(paced - len(self.submitted), self.low_water - self.pending()), 300)
                if want <= 0:
                    return
                operation = "chaos.domain" if self.serial % 2 else "chaos.plain"
                payloads = [self._payload(operation) for _ in range(want)]
                keys = [f"{operation}-{self.serial}-{n}" for n in range(want)]
                self.serial += 1
                self.batch = (operation, payloads, keys)
            operation, payloads, keys = self.batch
            jobs = submit_many(operation, payloads, idempotency_keys=keys)
            self.batch = None
            self.submitted.update((str(job.pk), operation) for job in jobs)
        except DatabaseError as exc:
            self.say(f"submission failed, retried: {type(exc).__name__}: {str(exc)[:120]}")
            connections.close_all()

    def _payload(self, operation: str) -> dict[str, Any]:
        if operation == "chaos.domain":
            return {
                "steps": self.rng.randint(2, 4),
                "sleep": round(self.rng.uniform(0.02, 0.15), 3),
            }
        return {"sleep": round(self.rng.uniform(0.05, 0.5), 3)}

    def sample(self) -> int | None:
        from django.db import DatabaseError, connections

        try:
            count = self.pending()
        except DatabaseError:
            connections.close_all()
            return None
        self.backlog.append(count)
        return count

    # -- faults --------------------------------------------------------------------------

    def drive(self, faults: list) -> None:
        """Submit and do the planned faults until the run's time is up.

        On SQLite the harness's own statements give up on the write lock after
        ``HARNESS_LOCK_WAIT`` seconds while it drives (and are retried at the next turn of the
        loop): a worker SIGSTOPped inside a transaction holds that lock until its SIGCONT, which
        this loop sends, so waiting SQLite's full timeout here stopped the run's faults for 20 s.
        """
        from django.db import connections
        from django.db.backends.signals import connection_created

        connection_created.connect(_short_lock_wait)
        connections.close_all()  # the next statement opens a connection that waits briefly
        try:
            self._drive(faults)
        finally:
            connection_created.disconnect(_short_lock_wait)
            connections.close_all()

    def _drive(self, faults: list) -> None:
        fleet = self.fleet
        start = time.monotonic()
        later: list[tuple[float, str, Any]] = []  # (due, action, subject)
        queue = list(faults)
        last_top_up = 0.0
        while (elapsed := time.monotonic() - start) < self.options.seconds:
            if elapsed - last_top_up >= 0.25:
                self.top_up(elapsed)
                if elapsed > 3:
                    self.sample()
                last_top_up = elapsed
            for due, action, subject in [item for item in later if item[0] <= elapsed]:
                later.remove((due, action, subject))
                if action == "resume":
                    fleet.resume(subject)
                    self.say(f"SIGCONT {subject.name}")
                elif action == "heal":
                    self.host.heal()
                    fleet.protected.discard(self.partition_slot)
                    self.say("partition healed")
            while queue and queue[0].at <= elapsed:
                fault = queue.pop(0)
                pending = self.sample()
                # The run's clock stops while the database is away: the faults planned after
                # the restart keep their spacing, and the run its length of faults.
                start += self.act(fault, elapsed, later, pending)
            fleet.tend()
            time.sleep(0.1)
        for _, action, subject in later:
            if action == "resume":
                fleet.resume(subject)
            elif action == "heal":
                self.host.heal()

    def act(self, fault, elapsed: float, later: list, pending: int | None) -> float:
        """Do ``fault``; return how long it kept this loop away (a database restart)."""
        fleet = self.fleet
        backlog = f"(backlog {pending})"
        if fault.kind == "kill":
            killed = fleet.kill(fault.victim, fault.length)
            if killed is not None:
                self.say(f"SIGKILL {killed.name} {backlog}")
        elif fault.kind == "pause":
            worker = fleet.pause(fault.victim)
            if worker is not None:
                self.say(f"SIGSTOP {worker.name} for {fault.length:.1f}s {backlog}")
                later.append((elapsed + fault.length, "resume", worker))
        elif fault.kind == "partition" and self.host is not None:
            self.host.cut()
            fleet.protected.add(self.partition_slot)
            fleet.done["partition"] += 1
            self.say(f"partition: worker {fault.victim} cut off for {fault.length:.1f}s {backlog}")
            later.append((elapsed + fault.length, "heal", None))
        elif fault.kind == "restart":
            self.say(f"restarting the database {backlog}")
            took = restart_database(self.options.db)
            fleet.done["restart"] += 1
            self.restart_seconds.append(took)
            self.say(f"database back after {took:.1f}s")
            return took
        return 0.0

    # -- the end -------------------------------------------------------------------------

    def drain(self) -> bool:
        """Wait until every submitted job is complete; return False on timeout."""
        from django.db import DatabaseError, connections

        from django_durable_jobs.models import Job

        deadline = time.monotonic() + self.options.drain_timeout
        ops = ("chaos.domain", "chaos.plain")
        left = None
        while time.monotonic() < deadline:
            self.fleet.tend()
            try:
                left = Job.objects.filter(operation__in=ops).exclude(status="complete").count()
                top = self.batch is None
            except DatabaseError:
                connections.close_all()
                continue
            if left == 0 and top:
                return True
            if not top:
                self.top_up(self.options.seconds)
            time.sleep(0.3)
        self.say(f"the queue did not drain in {self.options.drain_timeout:g}s: {left} jobs left")
        return False

    def finish(self) -> list[str]:
        """Stop the workers, then let one burst worker run the ticks they left pending."""
        late = self.fleet.stop()
        if late:
            self.say(f"SIGKILLed after SIGTERM did not stop them: {late}")
        time.sleep(self.options.lease + 0.5)  # any lease a stopped worker held has run out
        burst = subprocess.run(
            [
                sys.executable,
                "-m",
                "django",
                "runjobs",
                "--burst",
                "--no-schedules",
                "--lease",
                f"{self.options.lease:g}",
            ],
            env={**os.environ, **self.fleet.env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        (self.folder / "burst.log").write_text(burst.stdout + burst.stderr)
        if burst.returncode != 0:
            self.say(f"the burst worker exited {burst.returncode}")
        return late


HARNESS_LOCK_WAIT = 0.25  # seconds; see Run.drive


def _short_lock_wait(sender, connection, **kwargs) -> None:
    """Make a new SQLite connection of the harness wait HARNESS_LOCK_WAIT for a lock at most."""
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA busy_timeout = {int(HARNESS_LOCK_WAIT * 1000)}")


def run(argv: list[str] | None = None) -> int:
    """Run the chaos; return the exit status (0 only when every property holds)."""
    options = parse(argv)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    folder = options.output or OUTPUT / f"{options.db}-{stamp}-seed{options.seed}"
    folder.mkdir(parents=True, exist_ok=True)
    env = setup_django(options, folder)

    from tests.chaos import audit, checker
    from tests.chaos.faults import plan

    chaos = Run(options, folder, env)
    chaos.say(
        f"seed {options.seed}: {options.db}, {options.seconds:g}s, {options.workers} workers x "
        f"{options.concurrency}, {options.jobs} jobs paced, lease {options.lease:g}s, in {folder}"
    )
    restart = os.environ.get(RESTART_ENV) == "1"
    if not restart:
        chaos.say(f"database restart skipped: set {RESTART_ENV}=1 to restart the server")
    elif options.db == "sqlite":
        chaos.say("database restart skipped: SQLite has no server")
        restart = False
    audit.install()
    drained = False
    try:
        chaos.open_partition()
        faults = plan(
            options.seed,
            options.seconds,
            workers=options.workers,
            lease=options.lease,
            kill_every=options.kill_every,
            partition_slot=chaos.partition_slot,
            restart=restart,
        )
        chaos.say("faults: " + "; ".join(f.describe() for f in faults))
        chaos.fleet.start_all()
        chaos.drive(faults)
        chaos.say("faults over: healing, resuming, restarting every worker that is down")
        chaos.fleet.resume_all()
        chaos.fleet.tend(restart_all=True)
        drained = chaos.drain()
        chaos.finish()
    finally:
        chaos.fleet.stop(timeout=5)
        if chaos.host is not None:
            chaos.host.close()
    from django.db import connections

    connections.close_all()
    (folder / "submitted.json").write_text(json.dumps(chaos.submitted))
    data = checker.load_run(
        "default",
        audit.TABLE,
        folder,
        chaos.submitted,
        schedule_name=SCHEDULE,
        schedule_every=1,
        clock_slack=audit.CLOCK_SLACK[connections["default"].vendor],
    )
    report = checker.check(data)
    if options.database:
        audit.remove()
    faults_done = {f"{kind}s": n for kind, n in chaos.fleet.done.items()}
    summary = {
        "seed": options.seed,
        "db": options.db,
        "seconds": options.seconds,
        "workers": options.workers,
        "drained": drained,
        "faults": faults_done,
        "backlog_min": min(chaos.backlog, default=None),
        "restart_seconds": chaos.restart_seconds,
        "worker_exits": chaos.fleet.exits,
        **report.as_dict(),
    }
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"seed {options.seed} ({options.db}, {options.seconds:g}s): {folder}")
    for line in checker.summary_lines(report, faults_done):
        print(line)
    print(
        f"backlog never below {summary['backlog_min']} jobs during the faults; "
        f"workers that exited on their own: {len(chaos.fleet.exits)}"
    )
    if not drained:
        return 2
    return 0 if report.ok else 1


main = run
