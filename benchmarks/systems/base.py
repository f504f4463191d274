"""What every benchmarked system provides to the harness, and the part Django systems share."""

from __future__ import annotations

import os
import sys
from argparse import Namespace
from typing import Any

from benchmarks.databases import recreate_database


def payload(n: int) -> dict[str, Any]:
    """Return the ~50-byte JSON payload of job ``n`` (the same for every system)."""
    return {"n": n, "pad": "x" * 28}


class System:
    """One job system on one database, as a child process of the benchmark sees it.

    A subclass stores and drains jobs its own way; the harness times it all the same way.
    """

    name = ""
    #: The idle worker's poll interval when it learns of new work only by polling, else None.
    poll_seconds: float | None = None
    #: Why the bulk path is missing, or None when ``enqueue_many`` exists.
    bulk_unavailable: str | None = "no bulk enqueue"
    #: Whether ``worker_argv(burst=True)`` exits once the queue is empty. When not, the harness
    #: sends the workers SIGTERM once ``finished()`` counts every job (or, idle, once
    #: ``workers_ready()``).
    exits_when_drained = True

    def __init__(self, db: str, args: Namespace) -> None:
        self.db = db
        self.args = args

    @property
    def wakeup(self) -> str:
        """Describe how an idle worker learns of a new job."""
        return "NOTIFY" if self.poll_seconds is None else f"poll {self.poll_seconds:g} s"

    def series(self) -> dict[str, str]:
        """Return the drain configurations to run, as {series key: label}."""
        return {"default": self.label}

    @property
    def label(self) -> str:
        from benchmarks.systems import SYSTEMS

        return SYSTEMS[self.name].label

    def setup(self) -> None:
        """Drop, recreate and migrate this system's database."""
        raise NotImplementedError

    def open(self) -> None:
        """Prepare this process to use the database ``setup()`` created."""

    def close(self) -> None:
        """Release what ``open()`` took (connections, pools) before the process exits."""

    def server_version(self) -> str:
        raise NotImplementedError

    def enqueue(self, job_payload: dict[str, Any]) -> Any:
        """Enqueue one no-op job the way an application would; return its handle."""
        raise NotImplementedError

    def enqueue_many(self, payloads: list[dict[str, Any]]) -> None:
        """Enqueue one no-op job per payload through the system's bulk path."""
        raise NotImplementedError

    def clear(self) -> None:
        """Remove every job (and its history) so the next measurement starts from empty."""
        raise NotImplementedError

    def load(self, count: int) -> None:
        """Insert ``count`` due no-op jobs for a drain, as quickly as the system allows."""
        raise NotImplementedError

    def analyze(self) -> None:
        """Refresh the planner's statistics after a load."""
        raise NotImplementedError

    def worker_argv(self, *, burst: bool) -> list[str]:
        """Return the command of one worker process; ``burst`` ones exit when the queue is empty."""
        raise NotImplementedError

    def workers_argv(self, processes: int, *, burst: bool) -> tuple[list[str], int]:
        """Return how ``processes`` worker processes are run: a command, and how many copies of
        it to start. By default ``processes`` copies of ``worker_argv``; a system whose own
        documented way to run N processes is one command (a supervisor) returns that, once."""
        return self.worker_argv(burst=burst), processes

    def worker_env(self, series: str) -> dict[str, str]:
        """Return the environment of the worker processes of ``series``."""
        return dict(os.environ)

    def drain_span(self) -> tuple[float, float, int]:
        """Return (first job started, last job finished, jobs finished), Unix seconds."""
        raise NotImplementedError

    def finished(self) -> int:
        """Return how many jobs have finished (systems whose workers do not exit by themselves)."""
        raise NotImplementedError

    def workers_ready(self) -> bool:
        """Return whether a worker has started (systems whose workers do not exit by themselves)."""
        raise NotImplementedError

    def verify(self, jobs: int) -> list[str]:
        """Return what is wrong with the drained jobs (nothing is checked by default)."""
        return []

    def started_at(self, handle: Any) -> float | None:
        """Return when the job's task started (Unix time), None while it has not run yet."""
        raise NotImplementedError


class DjangoSystem(System):
    """A system that lives in a Django project: the settings module picks its database."""

    def setup(self) -> None:
        from django.conf import settings

        recreate_database(self.db, settings.DATABASES["default"])
        self.open()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)

    def open(self) -> None:
        import django

        django.setup()

    def django_command(self, *argv: str) -> list[str]:
        return [sys.executable, "-m", "django", *argv]

    def tables(self) -> list[str]:
        """Return this system's tables, referencing ones first."""
        raise NotImplementedError

    def execute(self, *statements: str) -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)

    def clear(self) -> None:
        from django.db import connection

        quote = connection.ops.quote_name
        tables = [quote(t) for t in self.tables()]
        if connection.vendor == "postgresql":
            self.execute(f"TRUNCATE {', '.join(tables)} CASCADE")
        elif connection.vendor == "mysql":
            self.execute(
                "SET FOREIGN_KEY_CHECKS = 0",
                *(f"TRUNCATE TABLE {t}" for t in tables),
                "SET FOREIGN_KEY_CHECKS = 1",
            )
        else:
            self.execute(*(f"DELETE FROM {t}" for t in tables))

    def analyze(self) -> None:
        from django.db import connection

        quote = connection.ops.quote_name
        tables = [quote(t) for t in self.tables()]
        if connection.vendor == "mysql":
            self.execute(f"ANALYZE TABLE {', '.join(tables)}")
        else:
            self.execute("ANALYZE")

    def server_version(self) -> str:
        from benchmarks.databases import server_version

        return server_version()
