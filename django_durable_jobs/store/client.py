"""The store client: who is asking, for which scope, on which database, by which clock.

Every room of the store takes a :class:`Client` as its first argument. It is a small frozen value;
nothing in a room keeps state of its own. The client imports no other module of the store, so
any room may use it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connections
from django.utils import timezone

from ..database.dbvendor import lock_for_update
from ..models import Job
from ..rules import validation
from ..rules.conf import jobs_settings
from ..rules.errors import InputInvalid, ScopeMismatch
from ..rules.execution import Execution
from ..rules.vocabulary import assess_ownership


@dataclass(frozen=True)
class Client:
    """Who asks the store, and where: one owner id, one scope, one database, one clock.

    ``memo`` is the one mutable part: what the client remembers between calls for speed or
    fairness (compiled claim statements, the scope the last claim served). It never decides
    whether a write is allowed.
    """

    using: str
    scope: str | None
    actor: str | None
    owner_id: str
    lease_seconds: float
    clock: Callable[[], datetime]
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def build(
        cls,
        *,
        scope: str | None = None,
        actor: str | None = None,
        lease_seconds: float = 30.0,
        using: str | None = None,
        clock: Callable[[], datetime] | None = None,
        lease: float | None = None,
    ) -> Client:
        """Return a new client with a fresh owner id, refusing what is not valid.

        ``using=None`` is the ``DATABASE`` setting's alias (``"default"`` unless set).
        """
        if using is None:
            using = jobs_settings.DATABASE
        if not isinstance(using, str) or using not in connections.databases:
            raise InputInvalid(f"No database alias {using!r} in settings.DATABASES.")
        if clock is not None and not callable(clock):
            raise InputInvalid(
                f"clock is a zero-argument callable returning an aware datetime (or None for "
                f"django.utils.timezone.now); got {clock!r}."
            )
        return cls(
            using=using,
            scope=None if scope is None else validation.scope(scope),
            actor=None if actor is None else validation.name(actor, "actor"),
            owner_id=str(uuid.uuid4()),
            lease_seconds=validation.lease_seconds(lease_seconds, lease),
            clock=clock or timezone.now,
        )


def now(client: Client) -> datetime:
    """Return the client's clock reading, refused unless it is an aware datetime."""
    return validation.aware(client.clock(), "The store clock's value")


def jobs(client: Client):
    """Return the job rows this client may see: its database, its scope."""
    return Job.objects.using(client.using).in_scope(client.scope)


def annotate(client: Client, job: Job | None, at: datetime | None = None) -> Job | None:
    """Attach the ownership assessment to ``job`` (as seen at ``at``, default now)."""
    if job is not None:
        job.ownership = assess_ownership(job, at or now(client))
    return job


def resolve_scope(client: Client, scope: str | None) -> str:
    """Return the scope a call acts for: ``scope``, else the client's, else the default.

    A scoped client refuses to act for another scope (``ScopeMismatch``).
    """
    resolved = scope if scope is not None else client.scope or jobs_settings.DEFAULT_SCOPE
    validation.scope(resolved)
    if client.scope is not None and resolved != client.scope:
        raise ScopeMismatch(
            f"This store is scoped to {client.scope!r} and cannot act for scope {resolved!r}; "
            f"use a store of that scope."
        )
    return resolved


def check_identity(client: Client, execution: Execution) -> None:
    """Refuse what is not an Execution, and an execution of a scope this client may not serve."""
    if not isinstance(execution, Execution):
        raise InputInvalid("This call needs an Execution (Execution.start(identity, ...)).")
    if client.scope is not None and execution.identity.scope != client.scope:
        raise ScopeMismatch(
            f"The execution acts for scope {execution.identity.scope!r} but this store is "
            f"scoped to {client.scope!r}."
        )


def locked_row(client: Client, job_id: Any) -> Job | None:
    """Return job ``job_id`` of this client's scope, locked for update, or None."""
    pk = validation.job_id(job_id)
    return lock_for_update(jobs(client).filter(pk=pk)).first()


def require_caller_transaction(client: Client, method: str) -> None:
    """Refuse ``in_caller_transaction=True`` outside an atomic block on the client's database."""
    if not connections[client.using].in_atomic_block:
        raise InputInvalid(
            "in_caller_transaction=True needs an open transaction.atomic() on "
            f"{client.using!r}; call {method}() inside it, or drop the flag."
        )
