"""The operation registry: ``@operation(...)``, Django tasks by path, and lookups by name."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import validation
from .errors import InputInvalid
from .flow import NO_FLOW, Flow, declare
from .retry import RetryPolicy

ON_EXPIRED_CHOICES = ("resume", "hold")


@dataclass(frozen=True)
class OperationSpec:
    name: str
    func: Callable[..., Any]
    on_expired: str = "hold"
    max_running: int | None = None
    timeout: float | None = None
    retry: RetryPolicy | None = None
    schedule: Any = None  # as declared; ``django_durable_jobs.schedules`` validates it
    flow: Flow = NO_FLOW  # rate limit, concurrency per key, uniqueness (``rules.flow``)


_registry: dict[str, OperationSpec] = {}
_task_funcs: dict[str, Callable[..., Any]] = {}  # task path -> the function @task decorated
_lock = threading.Lock()


def operation(
    name: str,
    *,
    on_expired: str = "hold",
    max_running: int | None = None,
    timeout: float | None = None,
    max_attempts: int | None = None,
    retry: Any = None,
    schedule: Any = None,
    rate_limit: str | None = None,
    rate_key: Callable[[Any], Any] | None = None,
    max_running_per_key: int | None = None,
    concurrency_key: Callable[[Any], Any] | None = None,
    unique_while: str | None = None,
    unique_for: Any = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the executor of operation ``name``.

    ``max_attempts`` retries a failed attempt automatically, with exponential backoff, until
    the job has run this many times in all: ``max_attempts=3`` is the first attempt and at most
    two retries. ``retry`` takes a ``RetryPolicy`` to tune the backoff as well; ``retry=3``, the
    older spelling, also means three attempts in all. Give one of the two, not both.

    ``schedule`` submits the operation on a schedule named ``name``: a cron expression, a
    ``timedelta`` (``every(seconds=30)``) or a dict of the keys of a ``DURABLE_JOBS["SCHEDULES"]``
    entry (``operation`` excepted). It is validated with the other declared schedules, by
    ``manage.py check`` (``durable_jobs.E014``) and when ``runjobs`` starts; see
    ``django_durable_jobs.schedules``.

    Flow control (docs/flow-control.md): ``rate_limit="N/s|m|h"`` (per key of the input with
    ``rate_key=callable``), ``max_running_per_key=N`` with ``concurrency_key=callable``, and
    ``unique_while="active"`` or ``unique_for=timedelta``. A bad one is reported by
    ``manage.py check`` (``durable_jobs.E017``) and refuses every submission; it does not fail
    the import.
    """
    validation.operation(name)
    _check_options(on_expired, max_running, timeout)
    policy = RetryPolicy.from_options(max_attempts, retry)
    flow = declare(
        rate_limit=rate_limit,
        rate_key=rate_key,
        max_running_per_key=max_running_per_key,
        concurrency_key=concurrency_key,
        unique_while=unique_while,
        unique_for=unique_for,
    )

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(func):
            raise InputInvalid(f"@operation({name!r}) decorates a function; got {func!r}.")
        spec = OperationSpec(name, func, on_expired, max_running, timeout, policy, schedule, flow)
        with _lock:
            existing = _registry.get(name)
            if existing is not None and existing.func is not func:
                qualname = getattr(existing.func, "__qualname__", existing.func)
                raise InputInvalid(f"Operation {name!r} is already registered by {qualname}.")
            _registry[name] = spec
        return func

    return register


def register_task(
    path: str,
    executor: Callable[..., Any],
    *,
    task_func: Callable[..., Any],
    on_expired: str = "hold",
    max_running: int | None = None,
    timeout: float | None = None,
    retry: Any = None,
    flow: Flow = NO_FLOW,
) -> None:
    """Register a Django task (by its module path) as an operation run by ``executor``.

    Called each time Django builds the task (``@task``, ``.using()``): the same task function
    registers again with its latest options; another function under the same name is refused.
    """
    validation.operation(path)
    _check_options(on_expired, max_running, timeout)
    policy = RetryPolicy.of(retry)
    spec = OperationSpec(path, executor, on_expired, max_running, timeout, policy, flow=flow)
    with _lock:
        existing = _registry.get(path)
        if existing is not None and _task_funcs.get(path) is not task_func:
            raise InputInvalid(f"Operation {path!r} is already registered by another function.")
        _registry[path] = spec
        _task_funcs[path] = task_func


def task_paths() -> list[str]:
    """Return the module paths of the Django tasks registered as operations."""
    return sorted(_task_funcs)


def _check_options(on_expired: str, max_running: int | None, timeout: float | None) -> None:
    if on_expired not in ON_EXPIRED_CHOICES:
        raise InputInvalid(f"on_expired must be one of {ON_EXPIRED_CHOICES}; got {on_expired!r}.")
    if max_running is not None and (
        isinstance(max_running, bool) or not isinstance(max_running, int) or max_running < 1
    ):
        raise InputInvalid(f"max_running must be a positive integer or None; got {max_running!r}.")
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise InputInvalid(
            f"timeout must be a positive number of seconds or None; got {timeout!r}."
        )


def get(name: str) -> OperationSpec | None:
    return _registry.get(name)


def all_operations() -> dict[str, OperationSpec]:
    return dict(_registry)


def resumable_operations() -> frozenset[str]:
    """Return the operations whose expired leases workers may reclaim on their own."""
    return frozenset(n for n, spec in _registry.items() if spec.on_expired == "resume")


def unregister(name: str) -> None:
    """Remove an operation (for tests)."""
    with _lock:
        _registry.pop(name, None)
        _task_funcs.pop(name, None)
