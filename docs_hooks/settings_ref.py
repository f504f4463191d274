"""reference/settings.md: every ``DURABLE_JOBS`` key and quota limit with its default.

Defaults come from ``conf.DEFAULTS`` and ``quotas.BUILTIN``; meanings from the definition lists in
the docstrings of ``conf.py`` and ``quotas.py``. A key without a meaning there stops the build.
"""

from __future__ import annotations

from .text import code, docstring_entries, py_literal, table

# What each key of the django.tasks backend's OPTIONS means (backends.OPTIONS lists the keys).
BACKEND_OPTIONS = {
    "DATABASE": "The database alias of the job tables for `@task` jobs and their results; "
    'defaults to `DURABLE_JOBS["DATABASE"]`.',
}


def _described(defaults: dict, doc: str, where: str) -> list[tuple[str, str, str]]:
    meanings = docstring_entries(doc)
    missing = sorted(set(defaults) - set(meanings))
    if missing:
        raise ValueError(f"{where} documents no meaning for: {', '.join(missing)}.")
    return [(name, py_literal(default), meanings[name]) for name, default in defaults.items()]


def durable_jobs_rows() -> list[tuple[str, str, str]]:
    """Return (key, default as Python source, meaning) for every ``DURABLE_JOBS`` key."""
    from django_durable_jobs.rules import conf

    return _described(conf.DEFAULTS, conf.__doc__ or "", "django_durable_jobs/rules/conf.py")


def quota_rows() -> list[tuple[str, str, str]]:
    """Return (key, built-in default, meaning) for every quota limit."""
    from django_durable_jobs.rules import quotas

    return _described(quotas.BUILTIN, quotas.__doc__ or "", "django_durable_jobs/rules/quotas.py")


def backend_options() -> list[str] | None:
    """Return the keys ``DurableJobsBackend`` accepts in ``OPTIONS`` (None before Django 6)."""
    try:
        from django_durable_jobs.backends import OPTIONS
    except ImportError:  # Django 5.2 has no django.tasks
        return None
    return sorted(OPTIONS)


def settings_markdown() -> str:
    """Return the settings tables of reference/settings.md."""
    parts = [
        "## `DURABLE_JOBS`\n",
        "Every key is optional; a missing key takes the default shown.\n",
        table(
            ["Key", "Default", "Meaning"],
            [(code(k), code(d), m) for k, d, m in durable_jobs_rows()],
        ),
        "\n## Quota limits\n",
        'The keys of `DURABLE_JOBS["QUOTAS"]` (every scope) and of '
        '`DURABLE_JOBS["SCOPE_QUOTAS"]["<scope>"]` (one scope, over `QUOTAS`). '
        "A limit left out keeps its built-in default.\n",
        table(
            ["Key", "Built-in default", "Meaning"],
            [(code(k), code(d), m) for k, d, m in quota_rows()],
        ),
    ]
    options = backend_options()
    if options is not None:
        missing = sorted(set(options) - set(BACKEND_OPTIONS))
        if missing:
            raise ValueError(f"docs_hooks.settings_ref describes no backend OPTIONS {missing}.")
        parts += [
            '\n## `TASKS[...]["OPTIONS"]` of `DurableJobsBackend`\n',
            "`manage.py check` refuses any other key (`durable_jobs.E011`).\n",
            table(
                ["Key", "Default", "Meaning"], [(code(k), "—", BACKEND_OPTIONS[k]) for k in options]
            ),
        ]
    return "\n".join(parts)
