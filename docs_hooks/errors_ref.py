"""reference/errors.md: every error code, its class, its HTTP status in the REST API, its meaning.

The ``JobError`` codes come from walking the subclasses of ``JobError`` (the API's own
``JobNotFound`` included) and ``ExecutionStopped.CODES``; each status from the API's own
``status_for()``; each meaning from the first paragraph of the class's docstring. The API's own
``E_API_*`` codes, found by reading the API's source, take theirs from ``API_CODES``. A code with no
meaning stops the build.
"""

from __future__ import annotations

import re
from pathlib import Path

from .text import cell, code, first_paragraph, table

# What ExecutionStopped's codes mean (``Execution.assert_active()`` / ``consume()``).
STOPPED = {
    "E_OPERATION_CANCELLED": "The execution was cancelled; stop and roll back.",
    "E_OPERATION_DEADLINE": "The execution's time budget is spent.",
    "E_OPERATION_CLOSED": "The execution is closed; start a new one.",
    "E_OPERATION_RESOURCE_LIMIT": "The execution used more bytes or items than its limits.",
}

# The REST API's own codes: status, meaning.
API_CODES = {
    "E_API_UNAUTHENTICATED": (
        "401",
        "No credentials, or a bad, revoked or expired token. The answer carries "
        "`WWW-Authenticate: Bearer`.",
    ),
    "E_API_FORBIDDEN": (
        "403",
        "Authenticated, but not allowed: a missing permission, a failed CSRF check for a "
        "session, or an operation the token may not submit.",
    ),
    "E_API_NOT_FOUND": ("404", "There is no endpoint at this path."),
    "E_API_METHOD": ("405", "The path does not serve this method; `Allow` lists those it does."),
    "E_API_BAD_REQUEST": (
        "400",
        "The request was refused as malformed (for example too many fields).",
    ),
    "E_API_HTTP": ("the error's", "Any other HTTP error raised inside the API."),
    "E_API_INTERNAL": (
        "500",
        "An unexpected error; it was logged with its traceback and the answer says nothing "
        "about it.",
    ),
}
RETRY_AFTER_STATUSES = (429, 503)  # django_durable_jobs.api.errors.error_response
API_CODE_RE = re.compile(r"\bE_API_[A-Z_]+\b")


def job_error_classes() -> list[type]:
    """Return ``JobError`` and every subclass, the REST API's included, in definition order."""
    from django_durable_jobs.api import errors as api_errors  # noqa: F401 - defines JobNotFound
    from django_durable_jobs.rules.errors import JobError

    found, todo = [], [JobError]
    while todo:  # depth first, so a subclass follows its base
        kind = todo.pop()
        if kind.__module__.startswith("django_durable_jobs"):
            found.append(kind)
            todo.extend(reversed(kind.__subclasses__()))
    return found


def http_status(kind: type) -> str:
    """Return the REST API's status for a refusal of class ``kind``."""
    from django_durable_jobs.api.errors import status_for

    status = status_for(kind.__new__(kind))
    return f"{status}, with `Retry-After`" if status in RETRY_AFTER_STATUSES else str(status)


def meaning(kind: type) -> str:
    """Return what a refusal of class ``kind`` means."""
    text = first_paragraph(kind.__dict__.get("__doc__"))
    if not text:
        raise ValueError(f"{kind.__module__}.{kind.__name__} has no docstring.")
    return text


def api_codes_in_source() -> set[str]:
    """Return every ``E_API_*`` code the REST API's source spells."""
    from django_durable_jobs import api

    folder = Path(api.__file__).parent
    return {m for path in folder.glob("*.py") for m in API_CODE_RE.findall(path.read_text())}


def error_rows() -> list[tuple[str, str, str, str]]:
    """Return (code, class, HTTP status, meaning), one row per code."""
    from django_durable_jobs.rules.errors import ExecutionStopped

    rows = []
    for kind in job_error_classes():
        name = f"{kind.__module__}.{kind.__name__}"
        if kind is ExecutionStopped:
            missing = sorted(kind.CODES - set(STOPPED))
            if missing:
                raise ValueError(f"docs_hooks.errors_ref.STOPPED has no meaning for {missing}.")
            status = http_status(kind)
            rows += [(c, name, status, STOPPED[c]) for c in sorted(kind.CODES)]
            continue
        rows.append((kind.code, name, http_status(kind), meaning(kind)))
    missing = sorted(api_codes_in_source() - set(API_CODES))
    if missing:
        raise ValueError(f"docs_hooks.errors_ref.API_CODES has no meaning for {missing}.")
    rows += [(c, "—", status, text) for c, (status, text) in API_CODES.items()]
    return rows


def class_link(path: str) -> str:
    """Return a class path as a link to its entry in the Python API page, when it has one."""
    if path == "—":
        return path
    module, name = path.rsplit(".", 1)
    if module == "django_durable_jobs.errors":
        return f"[{code(name)}](python.md#{path})"
    return code(path.removeprefix("django_durable_jobs."))


def errors_markdown() -> str:
    """Return the table of reference/errors.md."""
    return table(
        ["Code", "Class", "HTTP status", "Meaning"],
        [(code(c), class_link(k), s, cell(m)) for c, k, s, m in error_rows()],
    )
