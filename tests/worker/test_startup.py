"""A ``runjobs`` that starts while its database is unreachable waits; a wrong configuration fails.

Real processes, real sockets, and the shared database servers left alone: the worker's
``DATABASES`` entry points at a port of this test's own (:class:`LateProxy`), which refuses
connections until the test opens it and then forwards them to the real server. Each worker gets a
settings module written for the test (``tests.settings`` plus overrides), so a wrong user, an
unknown database or a missing SQLite folder reaches it exactly as a user would configure it.

* unreachable (PostgreSQL, MariaDB): the worker logs a WARNING per attempt with the driver's
  reason, and once the port opens registers and runs the job, exit 0; SIGTERM or SIGINT during
  the wait exits 0 with no traceback;
* misconfigured: an unknown user, an unknown database (servers), a file in a missing folder or a
  database without the job tables (SQLite), an unknown alias: exit 1 within seconds, one clear
  line, no traceback.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
from django.core.checks import Tags
from django.db import OperationalError

from django_durable_jobs import submit
from django_durable_jobs.management.commands.runjobs import Command
from django_durable_jobs.models import Job, WorkerProcess
from django_durable_jobs.worker.startup import DatabaseUnusable, until_reachable
from tests.settings import TEST_DB
from tests.worker_support import WorkerPool

pytestmark = pytest.mark.django_db(transaction=True)

SERVER_PORTS = {"postgresql": 5432, "mariadb": 3306}
FAIL_FAST = 15.0  # seconds: a refused configuration ends long before the backoff's 10 s cap
servers_only = pytest.mark.skipif(
    TEST_DB not in SERVER_PORTS, reason="SQLite has no server to wait for (see its own tests)"
)
sqlite_only = pytest.mark.skipif(TEST_DB != "sqlite", reason="an SQLite file's configuration")


class LateProxy:
    """A local TCP port that refuses connections until ``open()``, then forwards them.

    The socket is bound from the start (so the port stays ours) but does not listen: the
    kernel refuses every connection, as it does for a database server that is not up yet.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self.closed = threading.Event()
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()

    def open(self) -> None:
        """Start accepting: each connection is forwarded to the real server."""
        self.listener.listen()
        threading.Thread(target=self._accept, name="late-proxy", daemon=True).start()

    def close(self) -> None:
        self.closed.set()
        with self.lock:
            for sock in [*self.sockets, self.listener]:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            with self.lock:
                self.sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass


@pytest.fixture
def start_worker(db_settings_env, tmp_path):
    """Return ``start(overrides, *args, settings=None)``: a runjobs child with its own DATABASES.

    ``overrides`` update ``DATABASES["default"]`` of a settings module written for the child;
    ``settings`` adds lines to it. Every child is killed when the test ends.
    """
    modules = iter(range(1, 100))
    pools: list[WorkerPool] = []

    def start(overrides: dict, *args: str, settings: str = ""):
        name = f"startup_settings_{next(modules)}"
        Path(tmp_path, f"{name}.py").write_text(
            "from tests.settings import *  # noqa: F403\n\n"
            f"DATABASES['default'].update({overrides!r})  # noqa: F405\n{settings}\n"
        )
        env = {
            **db_settings_env,
            "DJANGO_SETTINGS_MODULE": name,
            "PYTHONPATH": f"{tmp_path}:{db_settings_env['PYTHONPATH']}",
        }
        pool = WorkerPool(env, tmp_path / name)
        (tmp_path / name).mkdir()
        pools.append(pool)
        return pool.start("--burst", *args)

    yield start
    for pool in pools:
        pool.__exit__(None, None, None)


@pytest.fixture
def proxy():
    late = LateProxy(SERVER_PORTS.get(TEST_DB, 0))
    yield late
    late.close()


def _assert_clean(worker) -> None:
    assert "Traceback" not in worker.stderr(), worker.logs()


# -- unreachable: wait ------------------------------------------------------------------------------


@servers_only
@pytest.mark.processes
def test_a_worker_started_before_its_database_waits_then_runs_the_job(start_worker, proxy):
    job = submit("tests.noop", {"n": 1})
    worker = start_worker({"PORT": str(proxy.port)})

    first = worker.wait_for_log("unreachable, attempt 1")
    worker.wait_for_log("unreachable, attempt 2")
    assert "WARNING" in first and "trying again in" in first
    assert "refused" in first.lower() or "can't connect" in first.lower(), first
    assert Job.objects.get(pk=job.pk).status == "pending"
    assert not WorkerProcess.objects.exists()

    proxy.open()

    assert worker.wait() == 0, worker.logs()
    assert Job.objects.get(pk=job.pk).status == "complete"
    assert WorkerProcess.objects.get(pid=worker.pid).state() == "stopped"
    assert "reachable after" in worker.stderr()
    _assert_clean(worker)


@servers_only
@pytest.mark.processes
def test_the_backoff_doubles_and_every_attempt_says_why(start_worker, proxy):
    worker = start_worker({"PORT": str(proxy.port)})
    lines = [worker.wait_for_log(f"unreachable, attempt {n}") for n in (1, 2, 3, 4)]
    pauses = [float(line.rsplit("trying again in ", 1)[1].rstrip("s")) for line in lines]
    for n, pause in enumerate(pauses):  # a random half to all of 0.5 s doubling
        assert 0.5 * 2**n / 2 <= pause <= 0.5 * 2**n, pauses
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


@servers_only
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.processes
def test_a_stop_signal_while_waiting_exits_0_without_a_traceback(start_worker, proxy, signum):
    worker = start_worker({"PORT": str(proxy.port)})
    worker.wait_for_log("unreachable, attempt 2")
    worker.send(signum)
    assert worker.wait(timeout=FAIL_FAST) == 0, worker.logs()
    assert "stopped while waiting" in worker.stderr()
    _assert_clean(worker)
    assert not WorkerProcess.objects.exists()


# -- misconfigured: fail fast ---------------------------------------------------------------------


def _fails_fast(worker, *words: str) -> str:
    started = time.monotonic()
    assert worker.wait(timeout=FAIL_FAST) == 1, worker.logs()
    assert time.monotonic() - started < FAIL_FAST
    _assert_clean(worker)
    assert "unreachable, attempt" not in worker.stderr(), worker.logs()  # it did not wait
    lines = [line for line in worker.stderr().splitlines() if "Cannot use database" in line]
    assert len(lines) == 1, worker.logs()
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@servers_only
@pytest.mark.processes
def test_an_unknown_user_fails_fast(start_worker):
    worker = start_worker({"USER": "no_such_user_h4", "PASSWORD": "secret-h4"})
    _fails_fast(worker, "refused the credentials", "no_such_user_h4", "DATABASES['default']")
    assert "secret-h4" not in worker.stderr()  # the password is never shown


@servers_only
@pytest.mark.processes
def test_an_unknown_database_name_fails_fast(start_worker):
    worker = start_worker({"NAME": "no_such_database_h4"})
    _fails_fast(worker, "the database does not exist", "no_such_database_h4")


@sqlite_only
@pytest.mark.processes
def test_an_sqlite_file_in_a_missing_folder_fails_fast(start_worker, tmp_path):
    path = tmp_path / "missing-folder" / "jobs.sqlite3"
    worker = start_worker({"NAME": str(path)})
    _fails_fast(worker, "cannot be opened", str(path))
    assert not path.parent.exists()


@sqlite_only
@pytest.mark.processes
def test_an_sqlite_database_without_the_job_tables_fails_fast(start_worker, tmp_path):
    worker = start_worker({"NAME": str(tmp_path / "empty.sqlite3")})
    _fails_fast(worker, "run manage.py migrate")


@pytest.mark.processes
def test_an_unknown_jobs_database_alias_fails_fast(start_worker):
    worker = start_worker({}, settings="DURABLE_JOBS = {'DATABASE': 'nowhere'}")
    assert worker.wait(timeout=FAIL_FAST) == 1, worker.logs()
    _assert_clean(worker)
    assert "nowhere" in worker.stderr()


@pytest.mark.processes
def test_a_worker_does_not_load_the_url_configuration_it_never_serves(start_worker):
    # Django's URL checks import the project's whole URL configuration (views, admin, API):
    # 0.34 s of each start of the example project. runjobs runs every other check at its start.
    job = submit("tests.noop", {"n": 1})
    worker = start_worker({}, settings="ROOT_URLCONF = 'tests.no_such_urls_module'")
    assert worker.wait(timeout=FAIL_FAST) == 0, worker.logs()
    _assert_clean(worker)
    assert Job.objects.get(pk=job.pk).status == "complete"


def test_runjobs_checks_every_tag_but_the_urls():
    tags = Command().get_check_kwargs({"schedules": True})["tags"]
    assert Tags.urls not in tags
    assert {Tags.models, Tags.compatibility, Tags.templates} <= set(tags)  # this app's own too


# -- the wait itself, in this process -------------------------------------------------------------


def test_until_reachable_retries_connection_errors_until_the_call_succeeds(caplog):
    caplog.set_level(logging.WARNING, logger="django_durable_jobs.worker")
    # Errors worth waiting for on every database (SQLite waits only for a lock).
    failures = iter([OperationalError("database is locked"), OperationalError("busy")])

    def call() -> str:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return "done"

    stopping = threading.Event()
    assert until_reachable("default", call, stopping=stopping, first_delay=0.01) is True
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [w.split(": ", 1)[0].rsplit(", ", 1)[1] for w in warnings[:2]] == [
        "attempt 1",
        "attempt 2",
    ]
    assert "database is locked" in warnings[0] and "busy" in warnings[1]
    assert "reachable after 3 attempts" in warnings[2]


def test_until_reachable_gives_up_when_stopped():
    stopping = threading.Event()

    def call() -> None:
        stopping.set()  # a signal arrives during the first attempt
        raise OperationalError("database is locked")

    assert until_reachable("default", call, stopping=stopping, first_delay=30) is False


def test_until_reachable_refuses_an_unknown_alias_before_connecting():
    with pytest.raises(DatabaseUnusable, match="No database alias 'nowhere'"):
        until_reachable("nowhere", lambda: None, stopping=threading.Event())
