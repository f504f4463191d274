"""The refusals of django_durable_jobs.

Every refusal is a :class:`JobError` with a stable machine-readable ``code`` and a message that says
what to do instead. Callers branch on the subclass or on ``code``; messages are for people.
"""

from __future__ import annotations

__all__ = [
    "CapacityReached",
    "DeadlineExceeded",
    "ExecutionStopped",
    "IdempotencyConflict",
    "InputInvalid",
    "JobCancelled",
    "JobError",
    "LeaseLost",
    "LockPolicyConflict",
    "NotReclaimable",
    "PayloadTooLarge",
    "ScopeMismatch",
    "TransactionOwned",
]


class JobError(Exception):
    """Base class of every refusal; ``code`` is stable across releases."""

    code: str = "E_JOB"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class InputInvalid(JobError):
    """The input is malformed or out of range: an id, operation, scope, queue or key; JSON that is
    not JSON or nested too deeply; a datetime out of range; a bad limit; an option that does not
    apply."""

    code = "E_JOB_INPUT_INVALID"


class PayloadTooLarge(InputInvalid):
    """A proposal, checkpoint, result or message over ``DURABLE_JOBS['MAX_PAYLOAD_BYTES']``.

    Still ``E_JOB_INPUT_INVALID`` (§3); the subclass lets an HTTP API answer 413.
    """


class CapacityReached(JobError):
    """A limit is reached (``max_running``, a scope's pending cap or submission rate); retry later.

    ``retry_after`` is the number of seconds after which trying again can succeed, when known
    (a rate limit's window); None when it depends on other work finishing.
    """

    code = "E_JOB_CAPACITY_REACHED"

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class ScopeMismatch(JobError):
    """A submission, execution, request or page cursor belongs to another scope (or another caller)
    than the store's."""

    code = "E_JOB_SCOPE_MISMATCH"


class IdempotencyConflict(JobError):
    """The same scope, operation and idempotency key were submitted with different input."""

    code = "E_JOB_IDEMPOTENCY_CONFLICT"


class LeaseLost(JobError):
    """The caller no longer holds the job's lease: another owner or epoch, the lease expired, or the
    job is not running. Nothing was written."""

    code = "E_JOB_LEASE_LOST"


class NotReclaimable(JobError):
    """The job cannot be claimed or retried now: it is live, complete, defective, legacy or
    missing."""

    code = "E_JOB_NOT_RECLAIMABLE"


class TransactionOwned(JobError):
    """A store call that commits its own transaction was made inside the caller's
    ``transaction.atomic()``; the caller's transaction is untouched."""

    code = "E_JOB_TRANSACTION_OWNED"


class DeadlineExceeded(JobError):
    """An execution's time budget ran out before BEGIN, while waiting for a lock, or before
    COMMIT."""

    code = "E_JOB_DEADLINE_EXCEEDED"


class LockPolicyConflict(JobError):
    """The lock-wait setting installed for a bounded transaction was changed during it."""

    code = "E_JOB_LOCK_POLICY_CONFLICT"


class JobCancelled(JobError):
    """Raised by an executor (or ``ctx.raise_if_cancelled()``) to acknowledge a cancellation."""

    code = "E_JOB_CANCELLED"

    def __init__(self, message: str = "The job was cancelled on request.", **kwargs) -> None:
        super().__init__(message, **kwargs)


class ExecutionStopped(JobError):
    """Raised by ``Execution.assert_active()`` / ``consume()`` once an execution may not go on."""

    CANCELLED = "E_OPERATION_CANCELLED"
    DEADLINE = "E_OPERATION_DEADLINE"
    CLOSED = "E_OPERATION_CLOSED"
    RESOURCE_LIMIT = "E_OPERATION_RESOURCE_LIMIT"
    CODES = frozenset({CANCELLED, DEADLINE, CLOSED, RESOURCE_LIMIT})

    code = CLOSED

    def __init__(self, code: str, message: str) -> None:
        if code not in self.CODES:
            raise ValueError(f"unknown ExecutionStopped code {code!r}")
        super().__init__(message, code=code)


# The classes keep the home they had before the rules package: stored error class paths
# (attempt rows, django.tasks' exception_class_path), tracing's error.type and tracebacks name
# django_durable_jobs.errors, and the old path imports this very module (see _aliases).
_PUBLIC_HOME = "django_durable_jobs.errors"
for _name in __all__:
    globals()[_name].__module__ = _PUBLIC_HOME
del _name
