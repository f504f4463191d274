"""``manage.py runjobs``: a long-running worker that survives crashes and restarts."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, TypeVar

from django.conf import settings
from django.core.checks import Tags
from django.core.checks.registry import registry
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from ... import metrics
from ...checks import schedules_unchecked
from ...formatting.terminal import PrintableFormatter, printable
from ...rules.errors import JobError
from ...worker import (
    CRASH_LOOP_DEATHS,
    CRASH_LOOP_SECONDS,
    MAX_RESTART_DELAY,
    RESTART_DELAY,
    TIMEOUT_GRACE,
    RestartRule,
    Worker,
    WorkerOptions,
    check_processes,
    check_schedules,
    ignore_parent_requests,
    setting_lease_seconds,
    summary_line,
    supervise,
)

if TYPE_CHECKING:
    from ...metrics.serve import Endpoint

T = TypeVar("T")

DURABLE_BACKEND = "django_durable_jobs.backends.DurableJobsBackend"


class Command(BaseCommand):
    help = (
        "Run durable jobs: claim in batches, renew every held lease each lease/3 seconds, stop "
        "cleanly on SIGTERM/SIGINT (a second signal requests cancellation of running jobs). "
        "Also enqueues the due ticks of the declared schedules (DURABLE_JOBS['SCHEDULES'] and "
        "@operation(schedule=...)) unless --no-schedules; a bad schedule refuses the start."
    )

    def get_check_kwargs(self, options) -> dict:
        # Static checks only (Django 6 also asks each database, e.g. MariaDB its version): the
        # database may not be up yet, and the worker waits for it (worker/startup.py). And every
        # tag but the URL checks': a worker serves no URL, and they import the project's whole
        # URL configuration (views, admin, API), 0.34 s of each start of the example project.
        self.checks_schedules = options.get("schedules", True)
        tags = sorted(tag for tag in registry.tags_available() if tag != Tags.urls)
        return {**super().get_check_kwargs(options), "databases": [], "tags": tags}

    def check(self, *args, **kwargs) -> None:
        """Run the system checks, without the schedules' (E014) under ``--no-schedules``."""
        if getattr(self, "checks_schedules", True):
            return super().check(*args, **kwargs)
        with schedules_unchecked():
            return super().check(*args, **kwargs)

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--concurrency", type=int, default=4, help="job threads, 1-1000 (default 4)"
        )
        parser.add_argument(
            "--prefetch",
            type=int,
            default=None,
            help="claimed jobs kept ready for the job threads, 0-10000 (default: --concurrency, "
            "growing up to 100 jobs held for operations seen to run in 5 ms or less)",
        )
        parser.add_argument(
            "--async-slots",
            type=int,
            default=100,
            help="attempts of async def operations run at once on the worker's event loop, "
            "0-10000 (default 100); 0 runs them in the job threads",
        )
        parser.add_argument(
            "--processes",
            type=int,
            default=1,
            help="worker processes to run, 1-256 (default 1); with more than one, this process "
            "supervises them: it restarts one that dies and exits 1 on a crash loop",
        )
        parser.add_argument(
            "--restart-delay",
            type=float,
            default=RESTART_DELAY,
            help="with --processes: seconds before a worker process that died is restarted, "
            f"doubling with each quick death up to {MAX_RESTART_DELAY:g}, 0-{MAX_RESTART_DELAY:g} "
            f"(default {RESTART_DELAY:g})",
        )
        parser.add_argument(
            "--crash-loop-deaths",
            type=int,
            default=CRASH_LOOP_DEATHS,
            help="with --processes: this many deaths within --crash-loop-seconds stop every "
            f"worker process and exit 1, 1-1000 (default {CRASH_LOOP_DEATHS})",
        )
        parser.add_argument(
            "--crash-loop-seconds",
            type=float,
            default=CRASH_LOOP_SECONDS,
            help="with --processes: the window of --crash-loop-deaths, 1-86400 seconds "
            f"(default {CRASH_LOOP_SECONDS:g})",
        )
        parser.add_argument(
            "--operation",
            action="append",
            dest="operations",
            default=None,
            metavar="NAME",
            help="only claim jobs of this registered operation; repeat for more "
            "(default: every operation registered in this process)",
        )
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            default=None,
            metavar="NAME",
            help="only claim jobs of this queue; repeat for more (default: every queue)",
        )
        parser.add_argument(
            "--lease",
            "--lease-seconds",
            dest="lease_seconds",
            type=float,
            default=None,
            help="how long each lease lasts, 0.1-86400 seconds "
            "(default: DURABLE_JOBS['LEASE_SECONDS'])",
        )
        parser.add_argument(
            "--poll", type=float, default=1.0, help="poll interval, 0.01-3600 seconds (default 1)"
        )
        parser.add_argument(
            "--watch",
            type=float,
            default=None,
            help="on SQLite and MariaDB/MySQL, how often an idle worker looks for new "
            "submissions, 0-60 seconds; 0 leaves it to the poll (default 0.04 on SQLite, "
            "0.05 on MariaDB/MySQL)",
        )
        parser.add_argument(
            "--grace",
            type=float,
            default=30.0,
            help="seconds running jobs get to finish after a stop signal, 0-86400 (default 30)",
        )
        parser.add_argument(
            "--timeout-grace",
            type=float,
            default=TIMEOUT_GRACE,
            help="seconds a job past its operation's timeout gets to stop after it was cancelled, "
            f"before it is failed and its thread abandoned, 0-86400 (default {TIMEOUT_GRACE:g})",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="exit when nothing is claimable (after one scheduler pass)",
        )
        parser.add_argument(
            "--no-schedules",
            dest="schedules",
            action="store_false",
            help="do not run the scheduler: enqueue no schedule's ticks (every runjobs process "
            "runs it by default; exactly once per tick however many do)",
        )
        parser.add_argument(
            "--max-jobs", type=int, default=None, help="exit after N jobs, 1-1000000000"
        )
        parser.add_argument("--scope", default=None, help="only jobs of this scope")
        parser.add_argument(
            "--database", default=None, help="database alias (default: DURABLE_JOBS['DATABASE'])"
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            default=None,
            metavar="PORT",
            help="serve Prometheus metrics over HTTP on this port, 1-65535 (default: off; needs "
            "the metrics extra); with --processes, the parent serves every child's counters summed",
        )
        parser.add_argument(
            "--metrics-addr",
            default="127.0.0.1",
            metavar="ADDR",
            help="the address --metrics-port listens on (default 127.0.0.1, this host only; "
            "0.0.0.0 for every interface)",
        )

    def handle(self, *args, **options) -> None:
        # Every option is checked here, before a child process, a log handler or the database.
        worker_options = _worker_options(options)
        rule = _restart_rule(options)
        endpoint = _metrics_endpoint(options)
        _log_to_stderr(options["verbosity"])
        if options["processes"] > 1:
            # A child forked from here skips what this process did (Python, Django, the checks)
            # and starts in milliseconds. Under --metrics-port the children must import
            # prometheus-client afresh, inside the directory the parent serves from: they are
            # started as new interpreters.
            forked = None if endpoint else lambda: self._forked_child(worker_options, options)
            connections.close_all()  # none is open; a forked child must never share one
            with _serving_children(endpoint, options["database"]) as on_exit:
                sys.exit(
                    supervise(
                        options["processes"],
                        rule,
                        burst=options["burst"],
                        on_exit=on_exit,
                        forked=forked,
                    )
                )
        self._work(worker_options, options, endpoint)

    def _work(
        self, worker_options: WorkerOptions, options: dict, endpoint: Endpoint | None
    ) -> None:
        """Be one worker process: wait for the database, then run until stopped."""
        stop_metrics = _serving_worker(endpoint, options["database"])  # up while it waits
        try:
            if not Worker.wait_for_database(options["database"], then=_discover_tasks):
                return  # SIGTERM/SIGINT before the database answered: nothing started
            self._run(worker_options, options)
        finally:
            stop_metrics()

    def _forked_child(self, worker_options: WorkerOptions, options: dict) -> int:
        """Be a child of ``--processes`` forked from this command; return its exit status, as
        ``runjobs --processes=1`` would exit (a CommandError is printed, and its status)."""
        try:
            self._work(worker_options, options, None)
        except CommandError as exc:
            self.stderr.write(f"CommandError: {exc}")
            return exc.returncode
        return 0

    def _run(self, worker_options: WorkerOptions, options: dict) -> None:
        try:
            worker = Worker(worker_options, report=lambda line: self.stdout.write(printable(line)))
        except (ValueError, JobError) as exc:
            raise CommandError(getattr(exc, "message", str(exc))) from exc
        if getattr(self, "_called_from_command_line", False):  # this process ends with it:
            ignore_parent_requests()  # what undoing the worker's handlers will restore
        restore_signal_handlers = worker.install_signal_handlers()
        if options["verbosity"] >= 1:
            self.stdout.write(
                f"runjobs: {printable(worker.store.actor, keep_newlines=False)} with "
                f"{worker_options.concurrency} thread(s), lease {worker_options.lease_seconds:g}s. "
                f"SIGTERM/Ctrl-C stops claiming; a second one requests cancellation."
            )
        started = time.monotonic()
        try:
            worker.run()
        finally:  # as before the command: it may run inside a process that goes on (call_command)
            restore_signal_handlers()
        if options["burst"] and options["verbosity"] >= 1:
            elapsed = time.monotonic() - started
            line = summary_line(worker.ended_counts(), elapsed, abandoned=worker.abandoned)
            self.stdout.write(printable(line, keep_newlines=False))


def _worker_options(options: dict) -> WorkerOptions:
    """Return the checked ``WorkerOptions`` of the command line; CommandError names a bad one."""
    lease_seconds = options["lease_seconds"]
    try:
        check_processes(options["processes"])
        if lease_seconds is None:
            lease_seconds = setting_lease_seconds()
        worker_options = WorkerOptions(
            concurrency=options["concurrency"],
            prefetch=options["prefetch"],
            async_slots=options["async_slots"],
            operations=options["operations"],
            queues=options["queues"],
            lease_seconds=lease_seconds,
            poll=options["poll"],
            watch=options["watch"],
            burst=options["burst"],
            max_jobs=options["max_jobs"],
            scope=options["scope"],
            grace=options["grace"],
            timeout_grace=options["timeout_grace"],
            using=options["database"],
            status_every=10.0 if options["verbosity"] >= 2 else None,
            schedules=options["schedules"],
        )
        worker_options.validate()
        check_schedules(worker_options)
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    return worker_options


def _metrics_endpoint(options: dict) -> Endpoint | None:
    """Return where ``--metrics-port`` serves (None: metrics off); CommandError when it cannot."""
    if options["metrics_port"] is None:
        return None
    try:
        metrics.require()
    except metrics.MetricsUnavailable as exc:
        raise CommandError(f"--metrics-port: {exc}") from exc
    from ...metrics.serve import Endpoint

    endpoint = Endpoint(options["metrics_addr"], options["metrics_port"])
    try:
        endpoint.validate()
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    return endpoint


def _serving_children(
    endpoint: Endpoint | None, using: str | None
) -> AbstractContextManager[Callable[[int], object]]:
    """Return the context in which the parent of ``--processes`` serves its children's metrics."""
    if endpoint is None:
        return nullcontext(lambda pid: None)
    from ...metrics.serve import multiprocess

    return _unservable(endpoint, lambda: multiprocess(endpoint, using))


def _serving_worker(endpoint: Endpoint | None, using: str | None) -> Callable[[], None]:
    """Start this worker's metrics (recorded, and served unless a parent serves); return stop."""
    if endpoint is None:
        return lambda: None
    from ...metrics.serve import for_worker

    return _unservable(endpoint, lambda: for_worker(endpoint, using))


def _unservable(endpoint: Endpoint, start: Callable[[], T]) -> T:
    """Return ``start()``; a port that cannot be listened on is a CommandError that says so."""
    try:
        return start()
    except OSError as exc:
        raise CommandError(
            f"--metrics-port: cannot listen on {endpoint.addr}:{endpoint.port} ({exc.strerror or exc}); "
            f"choose a free port, or an address of this host with --metrics-addr."
        ) from exc


def _restart_rule(options: dict) -> RestartRule:
    """Return the checked restart rule of ``--processes``; CommandError names a bad option."""
    rule = RestartRule(
        restart_delay=options["restart_delay"],
        crash_loop_deaths=options["crash_loop_deaths"],
        crash_loop_seconds=options["crash_loop_seconds"],
    )
    try:
        rule.validate()
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    return rule


def _discover_tasks(using: str | None) -> None:
    """Register the Django tasks this worker can run, when a ``TASKS`` backend is this app's.

    Without it, ``@task`` modules are imported only when something imports them, and their jobs
    would wait for a worker that never claims them.
    """
    backends = getattr(settings, "TASKS", {}) or {}
    if not any(cfg.get("BACKEND") == DURABLE_BACKEND for cfg in backends.values()):
        return
    from ...backends import discover_tasks

    discover_tasks(using)


def _log_to_stderr(verbosity: int) -> None:
    """Show one line per job transition unless the project's LOGGING already handles ours."""
    logger = logging.getLogger("django_durable_jobs")
    levels = {0: logging.WARNING, 1: logging.INFO, 2: logging.INFO}
    logger.setLevel(levels.get(verbosity, logging.DEBUG))
    if not logger.hasHandlers():
        handler = logging.StreamHandler()
        # Tracebacks and messages can hold a job's words: print them escaped.
        handler.setFormatter(PrintableFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
