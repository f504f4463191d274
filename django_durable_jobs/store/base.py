"""A shim until the submitting, reads, schedules, worker-rows and clock rooms are plain functions.

``StoreBase`` gives the mixins still built on it (``submissions.py``, ``reads.py``,
``schedule_ticks.py``, ``workers.py``, ``clock.py``) the client helpers they call through
``self``; each one only forwards to :mod:`.client`. Delete it when none inherits it.
"""

from __future__ import annotations

from datetime import datetime

from ..execution import Execution
from ..models import Job
from . import client as client_room
from .client import Client


class StoreBase:
    """The client helpers, as methods of the store (each reads ``self._client``)."""

    _client: Client

    def _now(self) -> datetime:
        return client_room.now(self._client)

    def _jobs(self):
        return client_room.jobs(self._client)

    def _annotate(self, job: Job | None, now: datetime | None = None) -> Job | None:
        return client_room.annotate(self._client, job, now)

    def _resolve_scope(self, scope: str | None) -> str:
        return client_room.resolve_scope(self._client, scope)

    def _check_identity(self, execution: Execution) -> None:
        client_room.check_identity(self._client, execution)
