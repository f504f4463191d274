"""Helpers of the pause tests: the whole database (jobs, attempts, pauses) before and after."""

from __future__ import annotations

import json

from django.core.serializers.json import DjangoJSONEncoder

from django_durable_jobs.models import JobPause
from tests.support import db_state


def pause_state() -> str:
    """Return a canonical dump of every job, attempt, gate and pause row."""
    pauses = list(JobPause.objects.order_by("id").values())
    return json.dumps([db_state(), pauses], cls=DjangoJSONEncoder, sort_keys=True)
