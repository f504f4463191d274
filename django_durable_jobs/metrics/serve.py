"""``runjobs --metrics-port``: serve the exposition over HTTP from the worker itself.

* A lone ``runjobs`` records into a registry of its own and serves it, with the gauges.
* ``runjobs --processes N``: the parent makes a fresh ``PROMETHEUS_MULTIPROC_DIR`` before it
  starts the children, which inherit it and record into files there (prometheus-client's
  multiprocess mode); the parent alone serves, summing every child's files (those of children
  that died and were replaced too, so counters never go back) plus the gauges, read once. When
  a child ends, its live gauges are dropped (``mark_process_dead``); at the parent's exit the
  directory is removed.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, start_wsgi_server
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from . import disable, enable
from .collector import DatabaseCollector

logger = logging.getLogger("django_durable_jobs.metrics")

MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"
# Set by the parent of ``runjobs --processes`` for its children: record, the parent serves.
CHILD = "DURABLE_JOBS_METRICS_CHILD"


@dataclass(frozen=True)
class Endpoint:
    """Where to serve: ``runjobs --metrics-addr`` and ``--metrics-port``."""

    addr: str
    port: int

    def validate(self) -> None:
        """Raise ValueError naming the option that cannot work."""
        if isinstance(self.port, bool) or not isinstance(self.port, int):
            raise ValueError(f"--metrics-port must be a whole number; got {self.port!r}.")
        if not 1 <= self.port <= 65535:
            raise ValueError(f"--metrics-port must be within 1-65535; got {self.port}.")
        if not self.addr:
            raise ValueError("--metrics-addr must name an address, e.g. 127.0.0.1 or 0.0.0.0.")


def is_child() -> bool:
    """Return True in a child of ``runjobs --processes`` whose parent serves the metrics."""
    return bool(os.environ.get(CHILD)) and bool(os.environ.get(MULTIPROC_DIR))


def serve(endpoint: Endpoint, registry: CollectorRegistry) -> Callable[[], None]:
    """Serve ``registry`` at ``endpoint`` in a thread; return the function that stops it.

    OSError (the port is taken, the address is not this host's) is raised as it comes.
    """
    server, thread = start_wsgi_server(endpoint.port, endpoint.addr, registry)
    logger.info("serving Prometheus metrics at http://%s:%d/metrics", endpoint.addr, endpoint.port)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop


def worker_registry(using: str | None) -> CollectorRegistry:
    """Start recording in this process and return its registry, with the gauges."""
    registry = CollectorRegistry(auto_describe=False)
    enable(registry)
    registry.register(DatabaseCollector(using=using, close_connection=True))
    return registry


@contextmanager
def multiprocess(endpoint: Endpoint, using: str | None) -> Iterator[Callable[[int], None]]:
    """Serve what the children of ``runjobs --processes`` record, while the block runs.

    Yield the function to call with a child's pid when it ended. The directory is fresh (never
    a previous run's counters), set in this process's environment for the children to inherit,
    and removed afterwards along with the variables.
    """
    path = tempfile.mkdtemp(prefix="durable-jobs-metrics-")
    saved = {name: os.environ.get(name) for name in (MULTIPROC_DIR, CHILD)}
    stop = None
    try:
        os.environ[MULTIPROC_DIR] = path
        os.environ[CHILD] = "1"
        registry = CollectorRegistry(auto_describe=False)
        MultiProcessCollector(registry, path=path)
        registry.register(DatabaseCollector(using=using, close_connection=True))
        stop = serve(endpoint, registry)
        logger.info("the worker processes record their metrics in %s", path)
        yield lambda pid: mark_process_dead(pid, path)
    finally:
        if stop is not None:
            stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(path, ignore_errors=True)


def for_worker(endpoint: Endpoint, using: str | None) -> Callable[[], None]:
    """Start recording in this ``runjobs`` process, serving at ``endpoint`` unless the parent of
    ``runjobs --processes`` serves; return the function that stops both."""
    if is_child():
        enable(None)  # into PROMETHEUS_MULTIPROC_DIR, for the parent to read
        return disable
    registry = worker_registry(using)
    try:
        stop = serve(endpoint, registry)
    except BaseException:
        disable()
        raise

    def stop_all() -> None:
        stop()
        disable()

    return stop_all
