"""``DurableJobsBackend``: Django's own Tasks API (``@task``, ``.enqueue()``), run durably.

Name it in ``settings.TASKS`` and every ``@task`` function becomes a durable job: its operation
is the task's module path, its input the task's arguments, and ``manage.py runjobs`` runs it under
a lease like any ``@operation`` — with heartbeats, fencing, cancellation, retries and history::

    TASKS = {"default": {"BACKEND": "django_durable_jobs.backends.DurableJobsBackend"}}

This module is the only one that imports ``django.tasks`` (Django 6.0 or newer). Building the
backend touches no database and no model: Django builds it when ``@task`` runs, at import time.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import django
from asgiref.sync import sync_to_async

try:
    from django.tasks import TaskContext, TaskResult, TaskResultStatus
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError as exc:  # Django 5.2 has no django.tasks
    raise ImportError(
        f"django_durable_jobs.backends needs Django 6.0 or newer (django.tasks); this is Django "
        f"{django.get_version()}. Upgrade Django, or enqueue work with "
        f"django_durable_jobs.submit() and @operation, which work on Django 5.2."
    ) from exc

from django.apps import apps
from django.core import checks
from django.db import connections
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import autodiscover_modules, import_string

from .rules import registry
from .rules.conf import jobs_settings
from .rules.errors import InputInvalid
from .rules.flow import declare
from .rules.jsontext import MAX_JSON_DEPTH, object_depth_exceeds
from .rules.retry import RetryPolicy
from .rules.validation import loads_strict
from .rules.values import Submission
from .rules.vocabulary import AttemptOutcomeChoice, JobStatus

__all__ = ["DurableJobsBackend", "DurableTask", "OperationTask", "discover_tasks"]

OPTIONS = frozenset({"DATABASE"})


@dataclass(frozen=True, slots=True, kw_only=True)
class DurableTask(Task):
    """A ``Task`` with this backend's own options, given to ``@task(...)``.

    ``max_attempts`` (attempts in all, the first included) or ``retry`` (a ``RetryPolicy``):
    automatic retries;
    ``timeout``: seconds an attempt may run; ``on_expired``: ``"hold"`` or ``"resume"`` an
    expired lease; ``max_running``: jobs of this task running at once; ``idempotency_key``: a
    string, or a callable of the task's arguments returning one, so that the same logical task
    enqueued twice runs once.

    Flow control (see the flow control page of the documentation): ``rate_limit="N/s|m|h"``
    with an optional ``rate_key``; ``max_running_per_key=N`` with ``concurrency_key``;
    ``unique_while="active"`` or ``unique_for=timedelta(...)``. The key functions are called
    with the task's arguments, like a callable ``idempotency_key``. A bad declaration is
    reported by ``manage.py check`` (``durable_jobs.E017``) and refuses every ``enqueue()``.
    """

    max_attempts: int | None = None
    retry: Any = None
    timeout: float | None = None
    on_expired: str = "hold"
    max_running: int | None = None
    idempotency_key: str | Callable[..., str] | None = None
    rate_limit: str | None = None
    rate_key: Callable[..., Any] | None = None
    max_running_per_key: int | None = None
    concurrency_key: Callable[..., Any] | None = None
    unique_while: str | None = None
    unique_for: timedelta | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationTask(DurableTask):
    """The ``Task`` of a workflow's job of an ``@operation`` (not a ``@task``).

    A workflow's jobs are usually operations; ``get_result`` of such a job returns a
    ``TaskResult`` whose ``task`` is this: ``module_path`` is the operation's name, ``func`` its
    function, ``args`` the job's input (one value) and ``kwargs`` empty. It reads results only:
    submit an operation with ``django_durable_jobs.submit()`` or a ``Workflow``, not
    ``enqueue()``.
    """

    operation: str = ""

    def __post_init__(self) -> None:
        pass  # read back from a row: nothing to check or register

    @property
    def module_path(self) -> str:
        return self.operation

    def enqueue(self, *args: Any, **kwargs: Any) -> TaskResult:
        raise InvalidTask(
            f"{self.operation!r} is an @operation, not a @task: submit it with "
            f"django_durable_jobs.submit() or in a Workflow."
        )

    async def aenqueue(self, *args: Any, **kwargs: Any) -> TaskResult:
        return self.enqueue(*args, **kwargs)


class DurableJobsBackend(BaseTaskBackend):
    """Enqueue ``@task`` calls as durable jobs; read their results back from the job table."""

    task_class = DurableTask
    supports_defer = True
    supports_priority = True
    supports_get_result = True
    supports_async_task = True

    @property
    def using(self) -> str:
        """Return the database alias of the job table (``OPTIONS["DATABASE"]`` or the setting)."""
        return jobs_settings.database(self.options.get("DATABASE"))

    # -- tasks ------------------------------------------------------------------------------------

    def validate_task(self, task: Task) -> None:
        """Check ``task`` as Django does (a ``timedelta`` ``run_after`` too) and register it.

        Registering makes the task path an operation, so workers of this process claim its jobs
        and ``max_running``, ``on_expired`` and retries apply per task.
        """
        if isinstance(task.run_after, timedelta):
            if task.run_after < timedelta(0):
                raise InvalidTask("run_after must not be a negative timedelta.")
            super().validate_task(replace(task, run_after=None))
        else:
            super().validate_task(task)
        try:
            registry.register_task(
                task.module_path, _executor_of(task), task_func=task.func, **_spec_options(task)
            )
        except InputInvalid as exc:
            raise InvalidTask(exc.message) from exc

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Store a pending job for ``task(*args, **kwargs)`` and return its result.

        Inside ``transaction.atomic()`` the job is written in your transaction: it exists only
        if you commit. The same idempotency key with the same arguments returns the earlier job.
        """
        from .store import DurableJobStore

        self.validate_task(task)
        payload = _arguments(args, kwargs)
        store = DurableJobStore(using=self.using)
        job = store.defer(
            task.module_path,
            Submission.of(None, _key_of(task, payload), payload),
            queue=task.queue_name,
            priority=task.priority,
            run_after=_due(task.run_after, store.clock()),
            in_caller_transaction=connections[self.using].in_atomic_block,
        )
        result = self._result(task, job, [])
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: Any) -> TaskResult:
        """Return the result of the job ``result_id`` as it is now: a ``@task``'s job, or any job
        of a workflow (its ``task`` is then an :class:`OperationTask`)."""
        from .models import JobAttempt
        from .store import DurableJobStore

        try:
            job = DurableJobStore(using=self.using).get(uuid.UUID(str(result_id)))
        except (ValueError, InputInvalid):
            job = None
        task = self._task_of(job) if job is not None else None
        if task is None:
            raise TaskResultDoesNotExist(f"There is no task result {result_id}.")
        attempts = list(
            JobAttempt.objects.using(self.using).filter(job_id=job.pk).order_by("epoch", "id")
        )
        return self._result(task, job, attempts)

    def workflow_result(self, workflow_id: Any) -> TaskResult:
        """Return the ``TaskResult`` of a workflow's final job (the one nothing waits for,
        declared last): the workflow's result, ``SUCCESSFUL`` once it completed."""
        from .store import DurableJobStore

        store = DurableJobStore(using=self.using)
        try:
            workflow = store.workflows.get(workflow_id)
        except InputInvalid:
            workflow = None
        if workflow is None:
            raise TaskResultDoesNotExist(f"There is no workflow {workflow_id}.")
        parents = {parent for parent, _child in store.workflows.edges(workflow.pk)}
        final = [job for job in store.workflows.jobs(workflow.pk) if job.pk not in parents]
        return self.get_result(str(final[-1].pk))

    def _task_of(self, job: Any) -> Task | None:
        """Return the ``Task`` of a job: its ``@task``; for a workflow's job, else its
        ``@operation``; else None (a lone operation's job is no task result)."""
        task = _task_at(job.operation)
        if task is not None or job.workflow_id is None:
            return task
        spec = registry.get(job.operation)
        if spec is None:
            return None
        return OperationTask(
            func=spec.func,
            operation=job.operation,
            priority=job.priority,
            queue_name=job.queue,
            backend=self.alias,
        )

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """Report an app that is not installed and options this backend does not know."""
        errors = []
        if not apps.is_installed("django_durable_jobs"):
            errors.append(
                checks.Error(
                    f"TASKS[{self.alias!r}] uses DurableJobsBackend, but django_durable_jobs is "
                    f"not in INSTALLED_APPS.",
                    hint='Add "django_durable_jobs" to INSTALLED_APPS and run migrate.',
                    id="durable_jobs.E010",
                )
            )
        unknown = sorted(set(self.options) - OPTIONS)
        if unknown:
            errors.append(
                checks.Error(
                    f"TASKS[{self.alias!r}]['OPTIONS'] has unknown keys: {', '.join(unknown)}.",
                    hint=f"DurableJobsBackend knows: {', '.join(sorted(OPTIONS))}.",
                    id="durable_jobs.E011",
                )
            )
        alias = self.options.get("DATABASE")
        if alias is not None and alias not in connections.databases:
            errors.append(
                checks.Error(
                    f"TASKS[{self.alias!r}]['OPTIONS']['DATABASE'] names {alias!r}, which is not "
                    f"in settings.DATABASES.",
                    id="durable_jobs.E012",
                )
            )
        return errors

    # -- results ----------------------------------------------------------------------------------

    def _result(self, task: Task, job: Any, attempts: list) -> TaskResult:
        if isinstance(task, OperationTask):
            stored = None if job.proposal is None else _stored_value(job.proposal)
            payload = {"args": [stored], "kwargs": {}}
        else:
            payload = _stored_arguments(job.proposal)
        ended = [a for a in attempts if a.outcome != AttemptOutcomeChoice.RELEASED]
        worker_ids = [a.claimed_by or a.owner_id or "" for a in ended]
        if job.status == JobStatus.RUNNING:
            worker_ids.append(job.claimed_by or job.owner_id or "")
        status = _status_of(job)
        started = ended[0].started_at if ended else None
        result = TaskResult(
            task=task,
            id=str(job.pk),
            status=status,
            enqueued_at=job.created_at,
            started_at=started or (job.claimed_at if worker_ids else None),
            last_attempted_at=job.claimed_at if worker_ids else None,
            finished_at=job.completed_at if status in FINAL else None,
            args=payload.get("args", []),
            kwargs=payload.get("kwargs", {}),
            backend=self.alias,
            errors=_errors_of(job, ended),
            worker_ids=worker_ids,
        )
        if status == TaskResultStatus.SUCCESSFUL and job.result is not None:
            object.__setattr__(result, "_return_value", _stored_value(job.result))
        return result


def _stored_value(text: str) -> Any:
    """Return stored JSON parsed; None for text changed outside the app (too deep, not JSON)."""
    try:
        return loads_strict(text)
    except ValueError:
        return None


def _stored_arguments(text: str | None) -> dict[str, Any]:
    """Return a task job's stored arguments; none when the row holds no such JSON object."""
    payload = None if text is None else _stored_value(text)
    return payload if isinstance(payload, dict) else {}


FINAL = frozenset({TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED})
CANCELLED_CLASS = "django_durable_jobs.errors.JobCancelled"


def _status_of(job: Any) -> TaskResultStatus:
    """Map a job's status; a failure with an automatic retry still to come is not final, nor
    is a workflow job that waits for its parents or a job that sleeps."""
    if job.status in (JobStatus.PENDING, JobStatus.WAITING, JobStatus.SLEEPING):
        return TaskResultStatus.READY  # waiting for its parents, or for its sleep to end
    if job.status == JobStatus.RUNNING:
        return TaskResultStatus.RUNNING
    if job.status == JobStatus.COMPLETE:
        return TaskResultStatus.SUCCESSFUL
    if job.status == JobStatus.FAILED and job.retry_requested_at is not None:
        return TaskResultStatus.READY
    return TaskResultStatus.FAILED


def _errors_of(job: Any, attempts: list) -> list[TaskError]:
    """Return one ``TaskError`` per failed attempt, and one for a cancellation."""
    errors = [
        TaskError(
            exception_class_path=a.error_class or "builtins.Exception",
            traceback=a.traceback or a.error or "",
        )
        for a in attempts
        if a.outcome == AttemptOutcomeChoice.FAILED
    ]
    if job.status == JobStatus.CANCELLED:
        errors.append(
            TaskError(
                exception_class_path=CANCELLED_CLASS,
                traceback=f"The job was cancelled on request: {job.error or 'no message'}",
            )
        )
    return errors


# -- running a task -------------------------------------------------------------------------------


def _executor_of(task: Task) -> Callable[[Any, Any], Any]:
    """Return the executor that runs ``task`` for a worker: ``executor(ctx, payload)``.

    For an ``async def`` task it is a coroutine function, which a worker runs on its event loop
    (``runjobs --async-slots``); the result's read and the signals run in a thread.
    """
    if inspect.iscoroutinefunction(task.func):

        async def run_async(ctx: Any, payload: Any) -> Any:
            result = await sync_to_async(_task_started)(task, ctx)
            try:
                args, kwargs = _call_args(task, result, payload)
                value = _returned(await task.func(*args, **kwargs))
            except BaseException:
                await sync_to_async(_task_finished)(task, result, failed=True)
                raise
            await sync_to_async(_task_finished)(task, result, value=value)
            return value

        return run_async

    def run(ctx: Any, payload: Any) -> Any:
        result = _task_started(task, ctx)
        args, kwargs = _call_args(task, result, payload)
        try:
            value = _returned(task.call(*args, **kwargs))
        except BaseException:
            _task_finished(task, result, failed=True)
            raise
        _task_finished(task, result, value=value)
        return value

    return run


def _task_started(task: Task, ctx: Any) -> TaskResult:
    """Return the running task's result (status ``RUNNING``), ``task_started`` sent."""
    backend = task.get_backend()
    result = backend.get_result(ctx.job_id)
    object.__setattr__(result, "status", TaskResultStatus.RUNNING)
    task_started.send(type(backend), task_result=result)
    return result


def _call_args(task: Task, result: TaskResult, payload: Any) -> tuple[list, dict]:
    """Return the arguments to call ``task.func`` with: a ``TaskContext`` first if it takes one."""
    args, kwargs = list(payload.get("args", [])), payload.get("kwargs", {})
    if task.takes_context:
        args.insert(0, TaskContext(task_result=result))
    return args, kwargs


def _task_finished(task: Task, result: TaskResult, *, failed: bool = False, value: Any = None):
    """Mark ``result`` ended (its value kept when it succeeded) and send ``task_finished``."""
    status = TaskResultStatus.FAILED if failed else TaskResultStatus.SUCCESSFUL
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", timezone.now())
    if not failed:
        object.__setattr__(result, "_return_value", value)
    task_finished.send(type(task.get_backend()), task_result=result)


def _returned(value: Any) -> Any:
    if object_depth_exceeds(value):
        raise ValueError(
            f"The task returned a value nested deeper than the {MAX_JSON_DEPTH} levels a result "
            f"may have; return a flatter value."
        )
    try:
        return normalize_json(value)
    except TypeError as exc:
        raise TypeError(
            f"The task returned {type(value).__name__}, which cannot be stored as JSON; return "
            f"JSON-serialisable values (dicts, lists, strings, numbers, booleans, None)."
        ) from exc


def discover_tasks(using: str | None = None) -> list[str]:
    """Import the ``tasks`` modules of installed apps, and the tasks of pending jobs by path.

    ``runjobs`` calls it before claiming, so it claims every task job it can import; a job whose
    task cannot be imported stays pending, as a job of an unregistered operation does. Return
    the task paths now registered.
    """
    from .models import Job

    autodiscover_modules("tasks")
    waiting = (
        Job.objects.using(jobs_settings.database(using))
        .filter(
            status__in=[
                JobStatus.PENDING,
                JobStatus.RUNNING,
                JobStatus.FAILED,
                JobStatus.WAITING,
                JobStatus.SLEEPING,
            ]
        )
        .exclude(operation__in=list(registry.all_operations()))
        .values_list("operation", flat=True)
        .distinct()
    )
    for path in waiting:
        _task_at(path)
    return registry.task_paths()


def _task_at(path: str) -> Task | None:
    """Return the task at ``path`` (importing it registers it), or None when there is none."""
    if "." not in path:
        return None
    try:
        found = import_string(path)
    except (ImportError, AttributeError, ValueError):
        return None
    return found if isinstance(found, Task) else None


# -- helpers --------------------------------------------------------------------------------------


def _spec_options(task: Task) -> dict[str, Any]:
    if not isinstance(task, DurableTask):
        return {}
    retry = RetryPolicy.from_options(task.max_attempts, task.retry)
    return {
        "on_expired": task.on_expired,
        "max_running": task.max_running,
        "timeout": task.timeout,
        "retry": retry,
        "flow": declare(
            rate_limit=task.rate_limit,
            rate_key=_of_arguments(task.rate_key),
            max_running_per_key=task.max_running_per_key,
            concurrency_key=_of_arguments(task.concurrency_key),
            unique_while=task.unique_while,
            unique_for=task.unique_for,
        ),
    }


def _of_arguments(function: Any) -> Any:
    """Return a key function of the stored input that calls ``function`` with the arguments.

    Anything not callable is returned as it is, for the declaration to report.
    """
    if not callable(function):
        return function

    def of_input(payload: dict[str, Any]) -> Any:
        return function(*payload["args"], **payload["kwargs"])

    return of_input


def _arguments(args: Any, kwargs: Any) -> dict[str, Any]:
    # Stored as {"args": [...], "kwargs": {...}}, as deep as [args, kwargs] is.
    if object_depth_exceeds([args, kwargs]):
        raise InputInvalid(
            f"Task arguments are stored as the job's input, which may nest at most "
            f"{MAX_JSON_DEPTH} levels (two of them are the args list and kwargs dict); these "
            f"nest deeper. Pass flatter arguments, or store the data and pass a reference."
        )
    try:
        return {"args": normalize_json(list(args)), "kwargs": normalize_json(dict(kwargs))}
    except TypeError as exc:
        raise InputInvalid(
            f"Task arguments must be JSON-serialisable (they are stored as the job's input): {exc}."
        ) from exc


def _key_of(task: Task, payload: dict[str, Any]) -> str | None:
    key = task.idempotency_key if isinstance(task, DurableTask) else None
    if callable(key):
        key = key(*payload["args"], **payload["kwargs"])
    if key is not None and not isinstance(key, str):
        raise InputInvalid(f"A task's idempotency key must be a string; got {key!r}.")
    return key


def _due(run_after: datetime | timedelta | None, now: datetime) -> datetime | None:
    return now + run_after if isinstance(run_after, timedelta) else run_after
