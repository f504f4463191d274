"""System checks: misconfiguration is reported before anything runs.

Not tagged "database": they read settings only, so a plain ``manage.py check`` runs them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

from . import schedules
from .database.dbvendor import has_immediate_transactions
from .rules import conf, flow, quotas, registry, validation
from .rules.conf import jobs_settings

# False while ``runjobs --no-schedules`` runs the checks: a worker that runs no scheduler reads no
# schedule declaration, so a bad one (durable_jobs.E014) must not keep it from starting.
_schedules_checked: ContextVar[bool] = ContextVar("durable_jobs_schedules_checked", default=True)


@contextmanager
def schedules_unchecked() -> Iterator[None]:
    """Leave the declared schedules out of the checks run inside the block.

    ``runjobs --no-schedules`` runs its system checks this way: the advice a bad schedule's
    refusal gives ("use --no-schedules") then works, while ``manage.py check``, ``migrate`` and
    every other command still report the schedule.
    """
    token = _schedules_checked.set(False)
    try:
        yield
    finally:
        _schedules_checked.reset(token)


@register(Tags.compatibility)
def check_settings(app_configs=None, **kwargs) -> list:
    """Report a ``DURABLE_JOBS`` setting that is not a dict, has unknown keys or bad values."""
    raw = getattr(settings, "DURABLE_JOBS", {})
    if not isinstance(raw, dict):
        return [
            Error(
                "settings.DURABLE_JOBS must be a dict.",
                hint="Set DURABLE_JOBS = {} or remove it to use the defaults.",
                id="durable_jobs.E001",
            )
        ]
    errors = []
    unknown = sorted(set(raw) - set(conf.DEFAULTS))
    if unknown:
        errors.append(
            Error(
                f"Unknown DURABLE_JOBS keys: {', '.join(unknown)}.",
                hint=f"Known keys: {', '.join(sorted(conf.DEFAULTS))}.",
                id="durable_jobs.E002",
            )
        )
    cap = raw.get("MAX_PAYLOAD_BYTES", conf.DEFAULTS["MAX_PAYLOAD_BYTES"])
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        errors.append(
            Error(
                "DURABLE_JOBS['MAX_PAYLOAD_BYTES'] must be a positive integer.",
                id="durable_jobs.E003",
            )
        )
    scope = raw.get("DEFAULT_SCOPE", conf.DEFAULTS["DEFAULT_SCOPE"])
    named = [scope] if isinstance(scope, str) and scope.strip() else []
    if not named:
        errors.append(
            Error(
                "DURABLE_JOBS['DEFAULT_SCOPE'] must be a non-empty string.", id="durable_jobs.E004"
            )
        )
    lease = raw.get("LEASE_SECONDS", conf.DEFAULTS["LEASE_SECONDS"])
    if isinstance(lease, bool) or not isinstance(lease, (int, float)) or not lease > 0:
        errors.append(
            Error(
                "DURABLE_JOBS['LEASE_SECONDS'] must be a positive number.", id="durable_jobs.E005"
            )
        )
    most = raw.get("WORKFLOW_MAX_JOBS", conf.DEFAULTS["WORKFLOW_MAX_JOBS"])
    if isinstance(most, bool) or not isinstance(most, int) or not 1 <= most <= 100_000:
        errors.append(
            Error(
                "DURABLE_JOBS['WORKFLOW_MAX_JOBS'] must be a whole number from 1 to 100000.",
                hint="It bounds the jobs of one workflow; the default is 5000.",
                id="durable_jobs.E016",
            )
        )
    for problem in validation.scope_problems([*named, *jobs_settings.SCOPE_QUOTAS]):
        errors.append(
            Error(
                problem,
                hint="Scope names are compared exactly: a look-alike is another tenant.",
                id="durable_jobs.E015",
            )
        )
    for problem in quotas.settings_problems():
        errors.append(
            Error(
                problem,
                hint="See the quotas page of the documentation for the keys and their values.",
                id="durable_jobs.E013",
            )
        )
    for problem in schedules.problems() if _schedules_checked.get() else ():
        errors.append(
            Error(
                problem,
                hint="See the schedules page of the documentation for the keys and their values. "
                "Until it is fixed, runjobs --no-schedules runs jobs without the scheduler.",
                id="durable_jobs.E014",
            )
        )
    for name, spec in sorted(registry.all_operations().items()):
        for problem in spec.flow.problems:
            errors.append(
                Error(
                    f"Operation {name!r}: {problem}",
                    hint="Fix its @operation(...) or @task(...) options; until then every "
                    "submission of it is refused. See the flow control page of the documentation.",
                    id="durable_jobs.E017",
                )
            )
    for problem in flow.queue_flows(raw.get("QUEUES"))[1]:
        errors.append(
            Error(
                problem,
                hint='Write {"queue name": {"rate_limit": "10/s"}}; periods are s, m and h.',
                id="durable_jobs.E018",
            )
        )
    resolver = raw.get("SCOPE_RESOLVER")
    if resolver is not None and (not isinstance(resolver, str) or not resolver.strip()):
        errors.append(
            Error(
                "DURABLE_JOBS['SCOPE_RESOLVER'] must be None or the dotted path of a callable "
                "(request) -> scope.",
                id="durable_jobs.E007",
            )
        )
    return errors


@register(Tags.compatibility)
def check_database(app_configs=None, **kwargs) -> list:
    """Report an unknown database alias, and SQLite that does not lock writers at BEGIN."""
    alias = jobs_settings.DATABASE
    if alias not in settings.DATABASES:
        return [
            Error(
                f"DURABLE_JOBS['DATABASE'] names {alias!r}, which is not in settings.DATABASES.",
                hint="Use one of: " + ", ".join(sorted(settings.DATABASES)) + ".",
                id="durable_jobs.E006",
            )
        ]
    warnings = []
    for name, db in settings.DATABASES.items():
        if db.get("ENGINE", "").endswith("sqlite3") and not has_immediate_transactions(db):
            warnings.append(
                Warning(
                    f"SQLite database {name!r} does not use IMMEDIATE transactions, so two "
                    f"writers can both read a job before either locks it.",
                    hint=f'Add "OPTIONS": {{"transaction_mode": "IMMEDIATE"}} to DATABASES[{name!r}].',
                    id="durable_jobs.W001",
                )
            )
    return warnings
