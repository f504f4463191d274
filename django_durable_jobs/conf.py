"""Settings of django_durable_jobs: one dict, ``settings.DURABLE_JOBS``, read at call time.

Defaults:

``DEFAULT_SCOPE``       ``"default"`` — the scope of rows written without an explicit scope.
``MAX_PAYLOAD_BYTES``   ``1_048_576`` — cap on proposals, checkpoints and results, in UTF-8 bytes.
``DATABASE``            ``"default"`` — the alias the worker, admin and API use for the job tables.
``LEASE_SECONDS``       ``30.0`` — lease length used by workers unless told otherwise.
``SCOPE_RESOLVER``      ``None`` — dotted path to ``callable(request) -> scope`` that gives a REST API
                        caller's scope; ``None`` uses the bearer token's scope, or ``DEFAULT_SCOPE``
                        for a session user (``django_durable_jobs.api.auth.default_scope``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    "DEFAULT_SCOPE": "default",
    "MAX_PAYLOAD_BYTES": 1_048_576,
    "DATABASE": "default",
    "LEASE_SECONDS": 30.0,
    "SCOPE_RESOLVER": None,
}


def user_settings() -> dict[str, Any]:
    """Return the raw ``DURABLE_JOBS`` dict (empty when unset)."""
    value = getattr(settings, "DURABLE_JOBS", None)
    return value if isinstance(value, dict) else {}


def get(name: str) -> Any:
    """Return one setting, falling back to its documented default."""
    if name not in DEFAULTS:
        raise KeyError(f"DURABLE_JOBS has no setting {name!r}")
    return user_settings().get(name, DEFAULTS[name])
