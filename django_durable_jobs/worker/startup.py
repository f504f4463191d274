"""Starting while the database is unreachable: wait for it, unless the configuration is wrong.

A worker started while its database restarts (or before the database is up, at boot, in a fresh
container) waits for it, logging at WARNING each attempt and why it failed, with backoff from
``FIRST_DELAY`` doubling to ``MAX_DELAY`` and jitter, so that a fleet of workers does not knock in
step. SIGTERM/SIGINT during the wait stops it cleanly.

A configuration that waiting cannot fix is refused at once, with one line that says what is wrong
(``DatabaseUnusable``): an unknown database alias, credentials the server refuses, a database
that does not exist, job tables that were never migrated, an SQLite file that cannot be opened.
``dbvendor.misconfiguration`` tells them apart from an unreachable server, per database.
"""

from __future__ import annotations

import logging
import random
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError
from django.db import DatabaseError, connections

from ..database.dbvendor import misconfiguration
from ..rules.conf import jobs_settings
from .signals import relay_signals

logger = logging.getLogger("django_durable_jobs.worker")

FIRST_DELAY = 0.5  # seconds before the second attempt
MAX_DELAY = 10.0  # the backoff's cap: a database that comes back is found within this


class DatabaseUnusable(CommandError):
    """The worker's database cannot be used as configured, and waiting would not change that.

    A ``CommandError``, so that ``runjobs`` reports it in one line and exits 1; code that runs a
    ``Worker`` itself catches it like any exception.
    """


def until_reachable(
    using: str,
    call: Callable[[], object],
    *,
    stopping: threading.Event,
    first_delay: float = FIRST_DELAY,
    max_delay: float = MAX_DELAY,
) -> bool:
    """Connect to ``using`` and run ``call()``, retrying until both succeed.

    Return True once they did, False when ``stopping`` was set first. A failure that waiting
    cannot cure raises ``DatabaseUnusable`` at once; any other database error is logged at
    WARNING with its reason, and the next attempt follows after a pause that doubles from
    ``first_delay`` to ``max_delay`` (each pause a random half to all of that, so that workers
    started together spread out).
    """
    if using not in connections.databases:
        known = ", ".join(repr(alias) for alias in connections.databases) or "none"
        raise DatabaseUnusable(
            f"No database alias {using!r} in settings.DATABASES (aliases: {known}). Pass an "
            f"existing alias with --database or set DURABLE_JOBS['DATABASE']."
        )
    delay = first_delay
    attempt = 0
    while not stopping.is_set():
        attempt += 1
        try:
            connection = connections[using]
            connection.ensure_connection()
            call()
        except ImproperlyConfigured as exc:
            raise DatabaseUnusable(
                _refusal(using, "the database settings are incomplete", exc)
            ) from exc
        except DatabaseError as exc:
            reason = misconfiguration(connection.vendor, exc)
            if reason is not None:
                raise DatabaseUnusable(_refusal(using, reason, exc)) from exc
            pause = random.uniform(delay / 2, delay)
            logger.warning(
                "database %r (%s) unreachable, attempt %d: %s; trying again in %.1fs",
                using,
                _target(using),
                attempt,
                _one_line(exc),
                pause,
            )
            _close(using)
            stopping.wait(pause)
            delay = min(delay * 2, max_delay)
            continue
        if attempt > 1:
            logger.warning("database %r reachable after %d attempts", using, attempt)
        return True
    return False


def wait_for_database(
    using: str | None = None, then: Callable[[str], object] = lambda alias: None
) -> bool:
    """Wait until the jobs' database answers, then call ``then(alias)``; for a starting command.

    SIGTERM and SIGINT end the wait (their previous handlers are restored afterwards): return
    False then, so the command can exit 0 without having started anything.
    """
    alias = jobs_settings.database(using)
    stop = threading.Event()
    with _stopped_by_signals(stop):
        reached = until_reachable(alias, lambda: then(alias), stopping=stop)
    if not reached:
        logger.info("stopped while waiting for database %r", alias)
    return reached


@contextmanager
def _stopped_by_signals(stop: threading.Event) -> Iterator[None]:
    """Set ``stop`` on SIGTERM/SIGINT while inside (main thread only; elsewhere do nothing).

    Also on SIGUSR1/SIGUSR2, which ``runjobs --processes`` sends its children instead. The event
    is set from a relay thread (``signals.py``): the main thread may be waiting on it.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)
    restore = relay_signals({signum: lambda signum: stop.set() for signum in signals})
    try:
        yield
    finally:
        restore()


def _refusal(using: str, reason: str, exc: BaseException) -> str:
    return (
        f"Cannot use database {using!r} ({_target(using)}): {reason}: {_one_line(exc)}. "
        f"Fix DATABASES[{using!r}] and start again; runjobs waits for a database that is "
        f"unreachable, not for one that refuses its configuration."
    )


def _target(using: str) -> str:
    """Return where ``using`` points, for a log line: engine, host, port, name, user."""
    settings_dict = connections.settings[using]
    engine = settings_dict.get("ENGINE", "").rsplit(".", 1)[-1]
    if engine == "sqlite3":
        return f"sqlite3 {settings_dict.get('NAME')}"
    host = settings_dict.get("HOST") or "localhost"
    port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
    return (
        f"{engine} {host}{port}, name {settings_dict.get('NAME')!r}, "
        f"user {settings_dict.get('USER')!r}"
    )


def _one_line(exc: BaseException) -> str:
    """Return ``exc`` as one line: drivers put newlines and tabs in their messages."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def _close(using: str) -> None:
    """Drop the failed connection, so that the next attempt opens a fresh one."""
    try:
        connections[using].close()
    except DatabaseError:
        pass
