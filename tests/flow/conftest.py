"""Fixtures shared by tests/flow."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from django_durable_jobs.rules import registry


@pytest.fixture
def flow_tasks() -> Iterator[ModuleType]:
    """``tests.flow.flow_tasks``, with its tasks unregistered afterwards.

    Declaring a ``@task`` registers it (the backend validates it on import), and a limited
    operation left registered would change every later test's claim: its limited pass, and
    claims of every operation (``operations=None``) going row by row past its keyed limit.
    """
    from tests.flow import flow_tasks as module

    try:
        yield module
    finally:
        for built in (module.keyed, module.unique):
            registry.unregister(built.module_path)
