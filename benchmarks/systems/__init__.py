"""The job systems the side-by-side benchmark compares, and where each one can run.

Importing this package imports no job system: each one's module is imported only in the child
process that benchmarks it, with that system's own Django settings (or none, for Procrastinate).
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class SystemInfo:
    """What the parent process needs to know about a system before running it."""

    name: str  # as in --systems
    label: str  # as printed
    module: str  # benchmarks.systems.<module> holds make(db, args) -> harness.System
    databases: tuple[str, ...]
    requires: tuple[str, ...]  # importable modules; missing ones mean "not installed"
    settings: str | None  # DJANGO_SETTINGS_MODULE of its processes, None for a non-Django one


SYSTEMS: dict[str, SystemInfo] = {
    info.name: info
    for info in (
        SystemInfo(
            "ours",
            "django-durable-jobs",
            "benchmarks.systems.ours",
            ("postgresql", "sqlite", "mariadb"),
            (),
            "benchmarks.systems.settings_ours",
        ),
        SystemInfo(
            "tasksdb",
            "django-tasks-db",
            "benchmarks.systems.tasksdb",
            ("postgresql", "sqlite"),
            ("django_tasks_db", "django.tasks"),
            "benchmarks.systems.settings_tasksdb",
        ),
        SystemInfo(
            "djqueue",
            "dj-queue",
            "benchmarks.systems.djqueue",
            ("postgresql", "sqlite", "mariadb"),
            ("dj_queue", "django.tasks"),
            "benchmarks.systems.settings_djqueue",
        ),
        SystemInfo(
            "procrastinate",
            "procrastinate",
            "benchmarks.systems.procrastinate_sys",
            ("postgresql",),
            ("procrastinate", "psycopg_pool"),
            None,
        ),
    )
}


def missing_requirements(info: SystemInfo) -> list[str]:
    """Return the modules ``info`` needs that this interpreter cannot import."""
    missing = []
    for module in info.requires:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # the parent package is missing
            found = False
        if not found:
            missing.append(module)
    return missing


def database_name(system: str, db: str, suffix: str = "") -> str:
    """Return ``bench_cmp_<system>_<db>[_<suffix>]``, the only names the benchmark drops."""
    suffix = re.sub(r"[^A-Za-z0-9_]", "", suffix)
    return f"bench_cmp_{system}_{db}" + (f"_{suffix}" if suffix else "")
