"""Settings of django_durable_jobs: one dict, ``settings.DURABLE_JOBS``, read at call time.

Code reads them through ``jobs_settings`` (the way Django REST framework's ``api_settings``
works): each attribute is typed and resolved — defaults filled in, numbers converted, the scope
resolver imported — at every access. The ``DURABLE_JOBS`` dict itself is looked up once and
again whenever Django says it changed (``setting_changed``: ``override_settings``,
pytest-django's ``settings`` fixture), so those just work. A project without the setting paid
6-9 µs for every read otherwise (the lookup of a setting Django does not have raises inside
``LazySettings``), seven times a ``submit()``.

Defaults:

``DEFAULT_SCOPE``       ``"default"`` — the scope of rows written without an explicit scope.
``MAX_PAYLOAD_BYTES``   ``1_048_576`` — cap on proposals, checkpoints and results, in UTF-8 bytes.
``DATABASE``            ``"default"`` — the alias the worker, admin, CLI and API use for the job
                        tables.
``LEASE_SECONDS``       ``30.0`` — lease length used by workers unless told otherwise.
``SCOPE_RESOLVER``      ``None`` — dotted path to ``callable(request) -> scope`` that gives a REST API
                        caller's scope; ``None`` uses the bearer token's scope, or ``DEFAULT_SCOPE``
                        for a session user (``django_durable_jobs.api.auth.default_scope``).
``QUOTAS``              ``{}`` — limits every scope gets, over the built-in defaults
                        (``MAX_PENDING`` 100,000; no rate limits, priority ceiling or running
                        limit); see ``django_durable_jobs.quotas``.
``SCOPE_QUOTAS``        ``{}`` — scope name → limits that replace ``QUOTAS``' for that scope.
``RATE_LIMIT_CACHE``    ``"default"`` — the Django cache alias the submission rate limits count in.
``SCHEDULES``           ``{}`` — schedule name → recurring job (``operation``, ``cron`` or ``every``,
                        ``payload``, ``timezone``…) that every ``runjobs`` process submits; see
                        ``django_durable_jobs.schedules``.
``WORKFLOW_MAX_JOBS``   ``5_000`` — the most jobs one workflow may hold (``Workflow.submit()``
                        refuses more); from 1 to 100,000.
``QUEUES``              ``{}`` — queue name → flow control of the whole queue:
                        ``{"rate_limit": "N/s|m|h"}``; see ``django_durable_jobs.rules.flow``.

``manage.py check`` reports unknown keys and values of the wrong type (``durable_jobs.E00x``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

__all__ = ["DEFAULTS", "JobsSettings", "jobs_settings", "user_settings"]

DEFAULTS: dict[str, Any] = {
    "DEFAULT_SCOPE": "default",
    "MAX_PAYLOAD_BYTES": 1_048_576,
    "DATABASE": "default",
    "LEASE_SECONDS": 30.0,
    "SCOPE_RESOLVER": None,
    "QUOTAS": {},
    "SCOPE_QUOTAS": {},
    "RATE_LIMIT_CACHE": "default",
    "SCHEDULES": {},
    "WORKFLOW_MAX_JOBS": 5_000,
    "QUEUES": {},
}


_looked_up: dict[str, dict[str, Any]] = {}  # "DURABLE_JOBS": what the setting was, once read


def user_settings() -> dict[str, Any]:
    """Return the raw ``DURABLE_JOBS`` dict (empty when unset or not a dict).

    The dict is the setting's own object, so a change made to it in place is seen at once.
    """
    try:
        return _looked_up["DURABLE_JOBS"]
    except KeyError:
        value = getattr(settings, "DURABLE_JOBS", None)
        _looked_up["DURABLE_JOBS"] = value = value if isinstance(value, dict) else {}
        return value


@receiver(setting_changed)
def _setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == "DURABLE_JOBS":
        _looked_up.clear()


def _raw(name: str) -> Any:
    return user_settings().get(name, DEFAULTS[name])


class JobsSettings:
    """The ``DURABLE_JOBS`` settings, typed and resolved, read at each access."""

    @property
    def DEFAULT_SCOPE(self) -> str:  # noqa: N802 - named like the setting
        return str(_raw("DEFAULT_SCOPE"))

    @property
    def MAX_PAYLOAD_BYTES(self) -> int:  # noqa: N802
        return int(_raw("MAX_PAYLOAD_BYTES"))

    @property
    def DATABASE(self) -> str:  # noqa: N802
        return str(_raw("DATABASE"))

    @property
    def LEASE_SECONDS(self) -> float:  # noqa: N802
        return float(_raw("LEASE_SECONDS"))

    @property
    def SCOPE_RESOLVER(self) -> Callable[[Any], str] | None:  # noqa: N802
        """Return the imported scope resolver, or None for the default one."""
        path = _raw("SCOPE_RESOLVER")
        return None if path is None else import_string(path)

    @property
    def QUOTAS(self) -> dict[str, Any]:  # noqa: N802
        value = _raw("QUOTAS")
        return value if isinstance(value, dict) else {}

    @property
    def SCOPE_QUOTAS(self) -> dict[str, dict[str, Any]]:  # noqa: N802
        value = _raw("SCOPE_QUOTAS")
        return value if isinstance(value, dict) else {}

    @property
    def RATE_LIMIT_CACHE(self) -> str:  # noqa: N802
        return str(_raw("RATE_LIMIT_CACHE"))

    @property
    def SCHEDULES(self) -> dict[str, Any]:  # noqa: N802
        """Return the schedules as written; ``schedules.settings_schedules()`` checks them."""
        value = _raw("SCHEDULES")
        return value if isinstance(value, dict) else {}

    @property
    def QUEUES(self) -> dict[str, Any]:  # noqa: N802
        value = _raw("QUEUES")
        return value if isinstance(value, dict) else {}

    @property
    def WORKFLOW_MAX_JOBS(self) -> int:  # noqa: N802
        return int(_raw("WORKFLOW_MAX_JOBS"))

    def database(self, using: str | None = None) -> str:
        """Return ``using`` when given, else the ``DATABASE`` alias of the job tables."""
        return using or self.DATABASE

    def __repr__(self) -> str:
        return f"<JobsSettings {', '.join(f'{k}={_raw(k)!r}' for k in DEFAULTS)}>"


jobs_settings = JobsSettings()
