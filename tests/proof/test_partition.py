"""Network partitions between real hosts: a ``runjobs`` worker cut off from the database.

Worker A runs in a network namespace of its own (tests/proof/netns.py) and reaches the
database server over a veth link through a TCP relay; worker B runs on the test's own host.
The link is cut with iptables DROP both ways, so A's connections stall exactly as behind a
dead switch: nothing is refused, packets vanish, the kernel retransmits with backoff.

* Cut and heal while A holds leases: B reclaims them once they expire (epoch + 1) and
  completes the jobs from A's last checkpoints; after the heal A's late writes are refused
  (its log says ``lease-lost``, and not one job or attempt row changes), every job completed
  exactly once with A's attempt ``interrupted``, and A recovers by itself: same process, its
  worker row heartbeats again, and it claims and completes jobs submitted after the heal.
* The cut lands inside A's transaction holding a row lock: the server keeps the transaction
  (and the lock) open for as long as the cut lasts; B's claim skips the row, so the job waits
  for the heal; with ``idle_in_transaction_session_timeout`` (PostgreSQL) or
  ``idle_transaction_timeout`` (MariaDB) the server ends it and B takes over during the cut.
  An operator's store call with an execution gets ``DeadlineExceeded`` after its budget.
* A slow, lossy link (not a cut): no job is lost, failed because of the network, or done
  twice. On the harsher link this found a bug (fixed): a ctx write refused as ``LeaseLost``,
  then a renewal sent earlier reaching the server later and reviving the lease, and the
  worker recording the job code's re-raised ``LeaseLost`` as the job's failure. The last two
  tests reproduce that race in one process, through the worker and through ``JobManager``.

PostgreSQL and MariaDB; SQLite has no network (a worker on another host cannot share its
file). Timings measured here (how long B waits, how long A takes to notice the heal) are
printed for the report (``-s``) and bounded by the assertions.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.db import DatabaseError, connection, transaction

from django_durable_jobs import submit
from django_durable_jobs.models import Job, JobStatus
from django_durable_jobs.rules.errors import DeadlineExceeded
from django_durable_jobs.rules.vocabulary import WorkerState
from django_durable_jobs.store import DurableJobStore
from tests.proof import netns
from tests.proof.netns import Host
from tests.settings import TEST_DB
from tests.support import (
    REPO_ROOT,
    WAIT_TIMEOUT,
    assert_refused,
    db_state,
    execution_for,
    live_clock,
    wait_for,
)
from tests.worker_support import FAST, RunJobs, WorkerPool, attempts, checkpoint_done, job

pytestmark = [pytest.mark.proof, pytest.mark.processes, pytest.mark.django_db(transaction=True)]

LEASE = 2.0  # FAST's --lease
LONG = os.environ.get("DURABLE_JOBS_PROOF") == "long"
# How long the first scenario keeps the cut at least, and whether A's TCP gives connections up
# early (tcp_retries2 in A's namespace, with tcp_syn_retries 2: the kernel-wide stand-in for a
# client's tcp_user_timeout and connect_timeout). The bounded profile cuts as short as it can;
# ``make proof`` also holds the cut 45 s, where TCP's retransmission backoff shows, with and
# without giving up early. DURABLE_JOBS_PROOF_CUT=SECONDS adds a hold of your choosing.
CUTS: list[tuple[float, int | None]] = [(0.0, None)]
if LONG:
    CUTS += [(45.0, None), (45.0, 5)]
if os.environ.get("DURABLE_JOBS_PROOF_CUT"):
    CUTS.append((float(os.environ["DURABLE_JOBS_PROOF_CUT"]), None))
STEPS = 12
STEP_DELAY = 0.25


class RemoteRunJobs(RunJobs):
    """A ``runjobs`` child started inside ``host``'s namespace (``ip netns exec`` execs it)."""

    def __init__(
        self, host: Host, args: list[str], env: dict[str, str], log_dir: Path, name: str
    ) -> None:
        self.name = name
        self.args = args
        self.stdout_path = log_dir / f"{name}.stdout"
        self.stderr_path = log_dir / f"{name}.stderr"
        argv = host.command([sys.executable, "-m", "django", "runjobs", *args])
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                argv,
                env={**os.environ, **env},
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self.started = time.monotonic()


@dataclass
class Partition:
    """A host in its own namespace, the environment that reaches the database through it, and
    the pool whose workers are all killed before the host is closed."""

    host: Host
    pool: WorkerPool
    remote_env: dict[str, str]
    folder: Path

    def start_remote(self, *args: str) -> RunJobs:
        name = f"remote{len(self.pool.workers) + 1}"
        worker = RemoteRunJobs(self.host, [*FAST, *args], self.remote_env, self.folder, name)
        self.pool.workers.append(worker)
        return worker


@pytest.fixture
def partition(transactional_db, db_settings_env, tmp_path) -> Iterator[Partition]:
    if TEST_DB == "sqlite":
        pytest.skip(
            "SQLite has no network: a worker on another host cannot share its database file"
        )
    reason = netns.unavailable_reason()
    if reason:
        pytest.skip(reason)
    port = int(settings.DATABASES["default"]["PORT"])
    with Host("part") as host:
        gateway, _ = host.forward(port)
        env = {
            **db_settings_env,
            "DURABLE_JOBS_DB_HOST": gateway,
            "DURABLE_JOBS_DB_PORT": str(port),
        }
        with WorkerPool(db_settings_env, tmp_path) as pool:
            yield Partition(host, pool, env, tmp_path)


def note(text: str) -> None:
    """Print a measurement for the report (shown with ``pytest -s``)."""
    print(f"[partition {TEST_DB}] {text}", flush=True)


def log_lines(worker: RunJobs, text: str) -> list[str]:
    return [line for line in worker.stderr().splitlines() if text in line]


def locked(job_id: int) -> bool:
    """Return True when another transaction holds the job's row lock (asked without waiting)."""
    try:
        with transaction.atomic():
            list(Job.objects.select_for_update(nowait=True).filter(pk=job_id))
    except DatabaseError:
        return True
    return False


def open_transactions(host: Host) -> list[float]:
    """Return how long (seconds) each open transaction of ``host``'s sessions has been open.

    The server sees the host's sessions as the relay's connections (``Host.relayed_ports``).
    """
    ports = set(host.relayed_ports())
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT client_port, EXTRACT(EPOCH FROM clock_timestamp() - xact_start)"
                " FROM pg_stat_activity WHERE xact_start IS NOT NULL AND client_port IS NOT NULL"
            )
            rows = cursor.fetchall()
        else:
            cursor.execute(
                "SELECT p.HOST, TIMESTAMPDIFF(MICROSECOND, t.trx_started, NOW(6)) / 1e6"
                " FROM information_schema.PROCESSLIST p"
                " JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID"
            )
            rows = [
                (int(host_port.rsplit(":", 1)[1]), age)
                for host_port, age in cursor.fetchall()
                if ":" in host_port
            ]
    return [float(age) for port, age in rows if port in ports]


@pytest.mark.parametrize(
    ("hold", "give_up"),
    CUTS,
    ids=[f"cut-held-{hold:g}s" + (f"-tcp-retries-{n}" if n else "") for hold, n in CUTS],
)
def test_cut_while_holding_leases_then_heal(
    partition: Partition, hold: float, give_up: int | None
) -> None:
    if give_up:
        partition.host.sysctl("ipv4.tcp_retries2", give_up)
        partition.host.sysctl("ipv4.tcp_syn_retries", 2)
    ids = [
        submit("tests.steps", {"steps": STEPS, "delay": STEP_DELAY, "n": n}).pk for n in range(3)
    ]
    a = partition.start_remote("--concurrency", "3")
    a_row = a.wait_for_row()
    wait_for(
        lambda: all(job(i).owner_id == a_row.owner_id and checkpoint_done(i) >= 2 for i in ids),
        "worker A to hold all three leases, two checkpoints each",
    )
    partition.host.cut()
    cut_at = time.monotonic()
    at_cut = {i: checkpoint_done(i) for i in ids}

    b = partition.pool.start("--concurrency", "3")
    b_row = b.wait_for_row()
    beat_in_cut = a.row().heartbeat_at  # read after anything in flight at the cut landed

    def finished_or_held() -> bool:
        # A job B cannot reclaim is one whose row A's stalled transaction locks: B's claim
        # skips it. Asked twice, so B's own short claim transaction is not taken for A's.
        stalled = bool(open_transactions(partition.host))
        return all(job(i).status == JobStatus.COMPLETE or (stalled and locked(i)) for i in ids)

    wait_for(
        lambda: finished_or_held() and (time.sleep(0.3) or finished_or_held()),
        "B to finish every job whose row A's stalled transaction does not lock",
    )
    stalled = open_transactions(partition.host)
    b_done = time.monotonic() - cut_at
    time.sleep(max(0.0, cut_at + hold - time.monotonic()))  # the scenario: the cut lasts
    by_b = [i for i in ids if job(i).status == JobStatus.COMPLETE]
    held = [i for i in ids if i not in by_b]
    note(
        f"B completed {len(by_b)} job(s) {b_done:.1f}s into the cut; "
        f"{len(held)} row(s) locked by A's transaction stalled by the cut "
        f"(A's open transactions: {len(stalled)})"
    )
    for i in by_b:
        assert checkpoint_done(i) == STEPS
        assert job(i).fencing_epoch == 2
    before_heal = db_state()

    assert a.row().heartbeat_at == beat_in_cut  # A wrote nothing during the cut
    partition.host.heal()
    healed_at = time.monotonic()
    after_heal = WAIT_TIMEOUT + 3 * hold  # TCP's retransmission backoff grows with the cut
    # A's late writes reach the server only now, and every one is refused: its log says so.
    wait_for(
        lambda: log_lines(a, "outcome=lease-lost"),
        "A's first refusal after the heal",
        timeout=after_heal,
    )
    noticed = time.monotonic() - healed_at
    for i in by_b:
        a.wait_for_log(
            f"job {i} tests.steps attempt=1 epoch=1 outcome=lease-lost", timeout=after_heal
        )
    if not held:
        assert db_state() == before_heal  # not one row of A's landed
    # A job whose row A's stalled transaction locked is reclaimed once that transaction ends.
    wait_for(
        lambda: all(job(i).status == JobStatus.COMPLETE for i in ids),
        "every job complete",
        timeout=after_heal,
    )
    for i in held:
        a.wait_for_log(
            f"job {i} tests.steps attempt=1 epoch=1 outcome=lease-lost", timeout=after_heal
        )

    for i in ids:
        done = job(i)
        # B finished what it could reach during the cut. A row A's stalled transaction locked
        # is claimed anew once that ends, by B or by A itself, recovered: a new attempt under
        # the next epoch either way, never A's first attempt carried on.
        second = {b_row.owner_id} if i in by_b else {a_row.owner_id, b_row.owner_id}
        assert done.owner_id in second
        assert attempts(i) == [
            ("interrupted", 1, a_row.owner_id),
            ("complete", 2, done.owner_id),
        ]
        assert (done.fencing_epoch, done.attempts) == (2, 2)
        assert json.loads(done.result) == {"done": STEPS, "attempt": 2}
        assert json.loads(done.checkpoint) == {"done": STEPS}
        assert at_cut[i] >= 2
    assert log_lines(a, "epoch=1 outcome=complete") == []

    # A recovers by itself: the same process heartbeats again and serves new work.
    wait_for(
        lambda: a.row().heartbeat_at > beat_in_cut and a.row().state() == WorkerState.ALIVE,
        "A's worker row to heartbeat after the heal",
        timeout=after_heal,
    )
    heartbeat_back = time.monotonic() - healed_at
    assert a.running() and a.row().pk == a_row.pk
    b.send(signal.SIGTERM)
    assert b.wait() == 0
    new = [submit("tests.steps", {"steps": 2, "delay": 0, "after": n}).pk for n in range(2)]
    wait_for(lambda: all(job(i).status == JobStatus.COMPLETE for i in new), "A to finish new jobs")
    for i in new:
        assert (job(i).owner_id, job(i).fencing_epoch) == (a_row.owner_id, 1)
    note(
        f"cut lasted {healed_at - cut_at:.1f}s (tcp_retries2 {give_up or 'default'}); A's "
        f"refusals logged {noticed:.1f}s after the heal, its heartbeat back after "
        f"{heartbeat_back:.1f}s"
    )


@pytest.mark.xfail(
    strict=True,
    reason="product issue (reported, not changed here): the graceful stop is driven by the fetch "
    "loop, and a partition blocks that loop inside a database call with no client-side timeout, "
    "so SIGTERM is acted on only after the heal plus TCP's retransmission backoff (measured: "
    "still running 60 s after SIGTERM with --grace 3 during a cut; exited 46 s after the heal)",
)
def test_sigterm_during_a_cut_stops_the_worker_within_its_grace(partition: Partition) -> None:
    ids = [submit("tests.steps", {"steps": 40, "delay": 0.25, "n": n}).pk for n in range(2)]
    # A free slot keeps the fetch loop asking the database for work every poll.
    a = partition.start_remote("--concurrency", "3", "--grace", "1")
    a_row = a.wait_for_row()
    wait_for(lambda: all(job(i).owner_id == a_row.owner_id for i in ids), "A to hold both leases")
    partition.host.cut()
    time.sleep(1.0)  # the scenario: the cut has lasted a second when the stop comes
    a.send(signal.SIGTERM)
    try:
        assert a.wait(timeout=1.0 + 3.0) == 0  # its grace, and some
    finally:
        partition.host.heal()


# A client on the partitioned host that claims a job and is cut inside a fenced write: its
# UPDATE (guarded by owner and epoch, as the store's writes are) holds the row lock, and the
# COMMIT it sends once told to is lost in the cut, so the server keeps the transaction open.
LOCKING_CLIENT = r"""
import sys
import django

django.setup()
from django.db import connection, transaction
from django_durable_jobs.models import Job
from django_durable_jobs.store import DurableJobStore

job_id, server_timeout = sys.argv[1], float(sys.argv[2])
store = DurableJobStore(actor="partitioned-client", lease_seconds=float(sys.argv[3]))
lease = store.claim(job_id)
with connection.cursor() as cursor:
    if server_timeout and connection.vendor == "postgresql":
        cursor.execute("SET idle_in_transaction_session_timeout = %s", [int(server_timeout * 1000)])
    elif server_timeout:
        cursor.execute("SET SESSION idle_transaction_timeout = %s", [int(server_timeout)])
print("claimed", lease.owner_id, flush=True)
try:
    with transaction.atomic():
        fenced = Job.objects.filter(pk=job_id, owner_id=lease.owner_id, fencing_epoch=lease.epoch)
        print("locked", fenced.update(progress=50), flush=True)
        sys.stdin.readline()
    print("committed", flush=True)
except Exception as exc:
    print("failed", type(exc).__name__, str(exc).replace("\n", " "), flush=True)
"""


@pytest.mark.parametrize(
    "server_timeout", [None, 1.0], ids=["no-server-timeout", "idle-timeout-1s"]
)
def test_cut_inside_a_transaction_holding_the_row_lock(
    partition: Partition, server_timeout: float | None
) -> None:
    job_id = submit("tests.steps", {"steps": 2, "delay": 0}).pk
    argv = [sys.executable, "-c", LOCKING_CLIENT, str(job_id), str(server_timeout or 0), str(LEASE)]
    client = subprocess.Popen(
        partition.host.command(argv),
        env={**os.environ, **partition.remote_env},
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, owner = client.stdout.readline().split()
        assert client.stdout.readline().split() == ["locked", "1"]
        partition.host.cut()
        cut_at = time.monotonic()
        client.stdin.write("commit\n")  # its COMMIT goes out into the cut and is lost
        client.stdin.flush()
        expires = job(job_id).lease_expires_at
        b = partition.pool.start("--concurrency", "1")
        b_row = b.wait_for_row()
        if server_timeout is None:
            # The server keeps the cut client's transaction, and its lock, open: B's claim
            # skips the locked row (SKIP LOCKED), so it does not block, but neither does it
            # take the job over, however long ago the lease expired.
            wait_for(
                lambda: open_transactions(partition.host) and time.monotonic() - cut_at > LEASE + 1,
                "the lease to be 1 s past its expiry",
            )
            # B is not stuck, only skipping: it heartbeats on. Waited for, not read once: on a
            # loaded machine B may have registered less than a heartbeat before this point.
            wait_for(
                lambda: b.row().heartbeat_at > b_row.heartbeat_at,
                "a heartbeat of B since it started",
            )
            assert (job(job_id).owner_id, job(job_id).fencing_epoch) == (owner, 1)
            assert locked(job_id)
            held_for = max(open_transactions(partition.host))
            assert held_for >= LEASE + 1
            # A store call with an execution waits for the lock no longer than its budget.
            operator = DurableJobStore(actor="operator")
            asked = time.monotonic()
            assert_refused(
                DeadlineExceeded,
                DeadlineExceeded.code,
                lambda: operator.request_cancel(
                    job_id, execution=execution_for(operator, job(job_id), budget=1.0)
                ),
            )
            operator_waited = time.monotonic() - asked
            assert 0.5 < operator_waited < 5
            partition.host.heal()
            healed_at = time.monotonic()
            assert client.stdout.readline().strip() == "committed"
            commit_after = time.monotonic() - healed_at
            taken = wait_for(lambda: job(job_id).fencing_epoch == 2 and job(job_id), "B's reclaim")
            reclaimed_after = time.monotonic() - healed_at
            note(
                f"cut inside a transaction, no server timeout: lock held {held_for:.1f}s into the "
                f"cut (until the heal), B skipped the row meanwhile (an operator's request_cancel "
                f"with a 1 s budget was refused after {operator_waited:.1f}s); the client's "
                f"COMMIT arrived {commit_after:.1f}s after the heal, B reclaimed "
                f"{reclaimed_after:.1f}s after it"
            )
        else:
            # The server ends the idle transaction: the lock goes, B takes over during the cut.
            taken = wait_for(lambda: job(job_id).fencing_epoch == 2 and job(job_id), "B's reclaim")
            reclaimed_at = time.monotonic() - cut_at
            assert open_transactions(partition.host) == []
            assert client.poll() is None and client.stdout is not None
            partition.host.heal()
            healed_at = time.monotonic()
            answer = client.stdout.readline().strip()
            assert answer.startswith("failed"), answer  # its COMMIT found its session ended
            note(
                f"cut inside a transaction, idle timeout {server_timeout:g}s: B reclaimed "
                f"{reclaimed_at:.1f}s into the cut; the client learnt its transaction was gone "
                f"{time.monotonic() - healed_at:.1f}s after the heal: {answer[:120]}"
            )
        assert taken.owner_id == b_row.owner_id
        assert taken.lease_expires_at > expires
        wait_for(lambda: job(job_id).status == JobStatus.COMPLETE, "B to complete the job")
        assert attempts(job_id) == [("interrupted", 1, owner), ("complete", 2, b_row.owner_id)]
        assert json.loads(job(job_id).result) == {"done": 2, "attempt": 2}
    finally:
        client.kill()
        client.wait()


@pytest.mark.parametrize(
    ("loss", "delay", "lease"),
    [(0.05, 0.02, "5"), (0.1, 0.05, "2")],
    ids=["5%-loss-20ms-lease-5s", "10%-loss-50ms-lease-2s"],
)
def test_slow_lossy_link_loses_and_doubles_nothing(
    partition: Partition, loss: float, delay: float, lease: str
) -> None:
    # Not a cut: a share of the packets dropped each way at random and a delay added to every
    # chunk the relay carries each way (netem is not always built into the kernel; iptables'
    # statistic match and the relay are). On the gentler link A keeps its 5 s leases and does
    # its share; on the harsher one its renewals come too late for a 2 s lease and its jobs
    # pass to B. Either way nothing may be lost, failed because of the network, or done twice.
    partition.host.degrade(loss=loss, delay=delay)
    ids = [submit("tests.steps", {"steps": 3, "delay": 0.1, "n": n}).pk for n in range(6)]
    a = partition.start_remote("--concurrency", "3", "--lease", lease)
    a_owner = a.wait_for_row().owner_id
    wait_for(lambda: Job.objects.filter(owner_id=a_owner).exists(), "A's first claim")
    b = partition.pool.start("--concurrency", "3", "--lease", lease)
    b_owner = b.wait_for_row().owner_id
    wait_for(
        lambda: all(job(i).status == JobStatus.COMPLETE for i in ids),
        "every job to complete over the slow link",
        timeout=60,
    )
    by = {a_owner: a, b_owner: b}
    for i in ids:
        done = job(i)
        history = attempts(i)
        assert [outcome for outcome, _, _ in history[:-1]] == ["interrupted"] * (len(history) - 1)
        assert history[-1] == ("complete", done.fencing_epoch, done.owner_id)
        assert json.loads(done.result) == {"done": 3, "attempt": done.attempts}
        assert done.attempts == len(history)
        # Only the worker that owns the completed job believes it completed it (its log line
        # comes just after the commit the test saw).
        by[done.owner_id].wait_for_log(f"job {i} tests.steps attempt={done.attempts} ")
        for owner, worker in by.items():
            said = [
                line for line in log_lines(worker, f"job {i} tests.steps") if "=complete" in line
            ]
            assert len(said) == (1 if owner == done.owner_id else 0), (i, worker.logs())
    served = {owner: sum(job(i).owner_id == owner for i in ids) for owner in by}
    reclaimed = sum(job(i).attempts > 1 for i in ids)
    lost = len(log_lines(a, "outcome=lease-lost"))
    note(
        f"link with {loss:.0%} loss and {delay * 1000:g} ms each way: A completed "
        f"{served[a_owner]}, B {served[b_owner]}; {reclaimed} job(s) changed hands, A logged "
        f"{lost} lease-lost"
    )
    for worker in by.values():
        assert log_lines(worker, "outcome=failed") == [], worker.logs()
    if lease == "5":
        assert served[a_owner] > 0  # A did its share over the slow link, not only B


def skewed_clock() -> tuple[Callable[[], datetime], threading.local]:
    """Return a clock a second ahead of the wall clock, and the knob that moves it further.

    ``knob.seconds`` moves it for the calling thread only: the job's own write is judged later
    while the worker's claim loop and heartbeat go on by the unmoved clock (a moved shared
    clock would let the claim loop take the job over meanwhile).
    """
    base = live_clock(offset=1)  # the job, submitted by the wall clock, is due by this one
    knob = threading.local()

    def clock() -> datetime:
        return base() + timedelta(seconds=getattr(knob, "seconds", 0.0))

    return clock, knob


def test_an_attempt_whose_write_was_refused_as_lost_records_no_failure() -> None:
    # What the slow lossy link above found, made deterministic in one process: a checkpoint is
    # judged (by the worker's clock, when its transaction starts) after the lease expired and
    # refused with LeaseLost; the job code lets it propagate; the outcome is written later by
    # an earlier clock, as when a renewal sent before the checkpoint reaches the server after
    # it and revives the lease. The attempt was told to stop, so it must write nothing: not
    # ``failed`` (which would end a resumable job for good because of the network).
    from django_durable_jobs.rules.registry import operation, unregister
    from django_durable_jobs.worker import Worker, WorkerOptions

    clock, ahead = skewed_clock()
    lease_seconds = 5.0

    @operation("tests.partition_refused_write", on_expired="resume")
    def refused_write(ctx, payload):
        ahead.seconds = lease_seconds + 1
        try:
            ctx.checkpoint({"done": 1})
        finally:
            ahead.seconds = 0.0
        return {"unreachable": True}

    try:
        job_id = submit("tests.partition_refused_write", {}).pk
        worker = Worker(
            WorkerOptions(burst=True, poll=0.05, lease_seconds=lease_seconds, concurrency=1),
            clock=clock,
        )
        assert worker.run() == 0
    finally:
        unregister("tests.partition_refused_write")
    row = job(job_id)
    assert (row.status, row.error, row.checkpoint) == (JobStatus.RUNNING, None, None)
    assert attempts(job_id) == []  # nothing was written: its lease expires, then a reclaim
    assert worker.outcomes == {"lease-lost": 1}


def test_a_managed_attempt_whose_write_was_refused_as_lost_records_no_failure() -> None:
    # The same race through JobManager, which records each outcome at once.
    from django_durable_jobs.manager import JobManager

    clock, ahead = skewed_clock()
    manager = JobManager(actor="partition-manager", lease_seconds=5.0, clock=clock)

    def refused_write(ctx):
        ahead.seconds = 6.0
        try:
            ctx.checkpoint({"done": 1})
        finally:
            ahead.seconds = 0.0
        return {"unreachable": True}

    try:
        job_id = manager.start_job("tests.partition_managed", refused_write)
        wait_for(lambda: manager.report(job_id), "the attempt to end")
        assert manager.report(job_id).outcome == "lease-lost"
    finally:
        manager.destroy()
    row = job(job_id)
    assert (row.status, row.error, row.checkpoint) == (JobStatus.RUNNING, None, None)
    assert attempts(job_id) == []
