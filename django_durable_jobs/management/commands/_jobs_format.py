"""What ``manage.py jobs`` prints: list rows and tables, a job in detail, the report of requests,
schedules.

Pure functions over rows and answers already read; nothing here queries or writes the database.
The rows' contents come from :mod:`django_durable_jobs.rows` (shared with the REST API); this
module writes their times as ISO 8601 text and words each
:class:`~django_durable_jobs.vocabulary.RequestAnswer` for a shell. Stored words reach the
terminal through :func:`~django_durable_jobs.terminal.printable` (a cell or a field as one line,
a block with its newlines) and JSON through ``printable_json``. Django ignores command modules
whose name starts with ``_``, so this one is no command.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from django.core.serializers.json import DjangoJSONEncoder

from ...formatting.humanize import relative as age
from ...formatting.terminal import printable, printable_json
from ...models import Job, JobAttempt, Schedule, rows
from ...rules.jsontext import JsonTooDeep, excerpt, pretty
from ...rules.validation import loads_strict
from ...rules.values import RequestResult
from ...rules.vocabulary import JobStatus, RequestAnswer

LIST_COLUMNS = (
    ("id", "ID"),
    ("operation", "OPERATION"),
    ("status", "STATUS"),
    ("ownership", "OWNERSHIP"),
    ("attempts", "ATTEMPTS"),
    ("epoch", "EPOCH"),
    ("progress", "PROGRESS"),
    ("claimed_by", "CLAIMED BY"),
    ("heartbeat", "HEARTBEAT"),
    ("workflow", "WORKFLOW"),
)
LIST_FIELDS = (
    "id",
    "operation",
    "status",
    "ownership",
    "attempts",
    "epoch",
    "progress",
    "claimed_by",
    "scope",
    "queue",
    "created_at",
    "heartbeat_at",
    "heartbeat_age_seconds",
    "lease_expires_at",
    "cancellation_requested_at",
    "retry_requested_at",
    "workflow",
    "node",
    "waiting_on",
    "sleep_until",
)

# What ``jobs cancel`` and ``jobs retry`` say of each answer of the store. ``{status}`` and
# ``{ownership}`` are the job's after the request; ``{requested_at}`` is when it was first asked.
CANCEL_SAYS = {
    RequestAnswer.CANCELLED_NOW: "cancelled (it had not started)",
    RequestAnswer.REQUESTED: "cancellation requested; its owner stops at the next check",
    RequestAnswer.ALREADY_REQUESTED: "cancellation was already requested at {requested_at}",
    RequestAnswer.ALREADY_ENDED: "already {status}; nothing to cancel (its result is kept)",
    RequestAnswer.NOT_FOUND: "no such job",
}
RETRY_SAYS = {
    RequestAnswer.REQUESTED: "retry requested; a worker will claim it",
    RequestAnswer.ALREADY_REQUESTED: "retry requested; a worker will claim it",
    RequestAnswer.NOT_ENDED: "{status} ({ownership}) has not ended; there is nothing to retry",
    RequestAnswer.NOT_FOUND: "no such job",
}
# The report's ``outcome`` of each answer; a refusal of the store and an id that is no UUID
# have their own.
OUTCOMES = {
    RequestAnswer.CANCELLED_NOW: "requested",
    RequestAnswer.REQUESTED: "requested",
    RequestAnswer.ALREADY_REQUESTED: "requested",
    RequestAnswer.ALREADY_ENDED: "finished",
    RequestAnswer.NOT_ENDED: "refused",
    RequestAnswer.NOT_FOUND: "unknown",
}
REFUSED = "refused"
MALFORMED = "malformed"


# -- list ------------------------------------------------------------------------------------------


def list_row(job: Job, now: datetime) -> dict[str, Any]:
    """Return the JSON-ready summary of one job for ``jobs list`` (with ``job.ownership`` set)."""
    data = {**rows.job_data(job), **workflow_fields(job)}
    data["heartbeat_age_seconds"] = _seconds_since(job.heartbeat_at, now)
    return _plain({key: data[key] for key in LIST_FIELDS})


def workflow_fields(job: Job) -> dict[str, Any]:
    """Return what a job's row says of its workflow and its sleep: the workflow's id (None
    outside one), its name in it, its parents not yet complete, when a sleep ends."""
    return {
        "workflow": job.workflow_id,
        "node": job.node or None,
        "waiting_on": job.waiting_on,
        "sleep_until": job.sleep_until,
    }


def table(data: Sequence[dict[str, Any]], now: datetime) -> str:
    """Return ``data`` (from :func:`list_row`) as an aligned text table."""
    rows = [[_cell(row, key, now) for key, _ in LIST_COLUMNS] for row in data]
    return aligned([title for _, title in LIST_COLUMNS], rows)


def aligned(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Return ``rows`` under ``header`` as columns padded to their widest cell, two spaces apart.

    Each cell is printed as one line (:func:`~django_durable_jobs.terminal.printable`), ``-``
    when it is None or empty.
    """
    cells = [list(header)]
    cells += [[_scalar(value) for value in row] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(value.ljust(width) for value, width in zip(line, widths, strict=True)).rstrip()
        for line in cells
    )


def _cell(row: dict[str, Any], key: str, now: datetime) -> str:
    if key == "progress":
        return f"{row['progress']:.0f}%"
    if key == "heartbeat":
        seconds = row["heartbeat_age_seconds"]
        return "-" if seconds is None else age(datetime.fromisoformat(row["heartbeat_at"]), now)
    if key == "status" and row["status"] == JobStatus.SLEEPING and row["sleep_until"]:
        return f"sleeping until {age(datetime.fromisoformat(row['sleep_until']), now)}"
    if key == "status" and row["status"] == JobStatus.WAITING:
        return f"waiting (on {row['waiting_on']})"
    if key == "workflow" and row["workflow"]:
        node = f" {printable(row['node'], keep_newlines=False)}" if row["node"] else ""
        return f"{row['workflow']}{node}"
    value = row[key]
    return "-" if value in (None, "") else printable(value, keep_newlines=False)


# -- show ------------------------------------------------------------------------------------------


def detail(job: Job, attempts: Iterable[JobAttempt], now: datetime) -> dict[str, Any]:
    """Return every column of ``job`` (stored text kept exact), its assessment and attempts."""
    data = json.loads(json.dumps(rows.job_columns(job), cls=DjangoJSONEncoder))
    data["ownership"] = job.ownership
    data["diagnostic_error"] = job.diagnostic_error
    data["heartbeat_age_seconds"] = _seconds_since(job.heartbeat_at, now)
    data["attempt_history"] = [_plain(rows.attempt_data(attempt)) for attempt in attempts]
    return data


def detail_text(data: dict[str, Any], now: datetime) -> str:
    """Return :func:`detail` as text for people: fields, pretty JSON blocks, attempts."""
    blocks = ("proposal", "checkpoint", "result", "error", "attempt_history")
    width = max(len(k) for k in data)
    lines = [f"{key.ljust(width)}  {_field(data, key, now)}" for key in data if key not in blocks]
    for key in ("proposal", "checkpoint", "result"):
        raw = f"manage.py jobs show {data['id']} --raw {key}"
        lines += ["", f"{key}:", _indent(pretty_json(data[key], raw=raw))]
    if data["error"] is not None:
        lines += ["", "error:", _indent(data["error"])]
    lines += ["", f"attempts ({len(data['attempt_history'])}, newest first):"]
    for a in data["attempt_history"]:
        ended = age(datetime.fromisoformat(a["ended_at"]), now)
        raised = f"  raised {_scalar(a['error_class'])}" if a["error_class"] else ""
        lines.append(
            f"  epoch {a['epoch']}  {a['outcome']}  by {_scalar(a['claimed_by'])}  ended {ended}"
            f"{raised}"
        )
        if a["error"]:
            lines.append(_indent(a["error"], "      "))
        if a["traceback"]:
            lines.append(_indent(a["traceback"].rstrip(), "      "))
    return "\n".join(lines)


def _field(data: dict[str, Any], key: str, now: datetime) -> str:
    """Return one field of ``jobs show``; a lease the job no longer holds is said to be so, a
    sleeping job when it wakes, a workflow's job how to see its workflow."""
    value = data[key]
    if isinstance(value, list):  # ids: a job's parents and children
        return ", ".join(_scalar(item) for item in value) or "-"
    text = _scalar(value)
    held = data["status"] == JobStatus.RUNNING
    if key == "lease_expires_at" and value is not None and not held:
        return f"{text} (not held: the job is {_scalar(data['status'])})"
    if key == "status" and value == JobStatus.SLEEPING and data.get("sleep_until"):
        until = datetime.fromisoformat(data["sleep_until"])
        return f"{text} until {data['sleep_until']} ({age(until, now)})"
    if key == "status" and value == JobStatus.WAITING:
        return f"{text} (on {data.get('waiting_on')} upstream job(s) not yet complete)"
    if key == "workflow_id" and value is not None:
        return f"{text} (manage.py jobs workflow show {text})"
    return text


def pretty_json(text: str | None, *, raw: str | None = None) -> str:
    """Return stored JSON text indented, or the stored text when this app cannot read it as JSON.

    At most ``DISPLAY_CAP_BYTES`` of output, built in time linear in it however big or deep the
    value: a longer one ends with a marker saying how much of the stored text it shows, and
    ``raw``, the command that prints all of it.
    """
    if text is None:
        return "(none)"
    try:
        loads_strict(text)
    except JsonTooDeep as exc:
        shown, head = excerpt(text), f"({exc.nesting}; stored text follows)\n"
    except (TypeError, ValueError):
        shown, head = excerpt(text), "(not valid JSON; stored text follows)\n"
    else:
        shown, head = pretty(text), ""
    if not shown.truncated:
        return head + shown.text
    more = f"; all of it: {raw}" if raw else ""
    return f"{head}{shown.text}\n{shown.note()}{more}"


# -- cancel and retry ------------------------------------------------------------------------------


def request_report(
    raw: str, result: RequestResult, says: dict[RequestAnswer, str]
) -> dict[str, Any]:
    """Return the report of one request: what the store answered, worded by ``says``."""
    job = result.job
    words = {} if job is None else {"status": job.status, "ownership": job.ownership}
    message = says[result.answer].format(requested_at=_iso(result.requested_at), **words)
    return _report(raw, job, OUTCOMES[result.answer], result.accepted, message)


def refusal_report(raw: str, job: Job | None, message: str) -> dict[str, Any]:
    """Return the report of a request the store refused, with its reason."""
    return _report(raw, job, REFUSED, False, message)


def malformed_report(raw: str) -> dict[str, Any]:
    """Return the report of an argument that is not a job id."""
    return _report(raw, None, MALFORMED, False, "not a job id (job ids are UUIDs)")


def _report(raw: str, job: Job | None, outcome: str, ok: bool, message: str) -> dict[str, Any]:
    return {
        "id": str(job.pk) if job is not None else raw,
        "ok": ok,
        "outcome": outcome,
        "status": job.status if job is not None else None,
        "message": message,
    }


# -- schedules -------------------------------------------------------------------------------------

SCHEDULE_COLUMNS = (
    ("name", "NAME"),
    ("operation", "OPERATION"),
    ("when", "CRON OR INTERVAL"),
    ("timezone", "TIME ZONE"),
    ("state", "STATE"),
    ("next_tick", "NEXT TICK"),
    ("last_tick_at", "LAST TICK"),
    ("last_job_id", "LAST JOB"),
    ("last_job_status", "OUTCOME"),
)
SCHEDULE_STATE_WORDS = {rows.SCHEDULE_REMOVED: "removed from code"}


def schedule_row(row: Schedule, now: datetime) -> dict[str, Any]:
    """Return the JSON-ready summary of one schedule (``rows.schedule_data``, times as text)."""
    return _plain(rows.schedule_data(row, now))


def schedule_table(data: Sequence[dict[str, Any]], now: datetime) -> str:
    """Return ``data`` (from :func:`schedule_row`) as an aligned text table; times in UTC with
    their distance from ``now``. Under it, each row this host cannot read, with the reason."""
    table_rows = [[_schedule_cell(row, key, now) for key, _ in SCHEDULE_COLUMNS] for row in data]
    text = aligned([title for _, title in SCHEDULE_COLUMNS], table_rows)
    problems = [row for row in data if row.get("problem")]
    if problems:
        text += "\n\nBroken (not ticking until repaired):"
        for row in problems:
            name = printable(row["name"], keep_newlines=False)
            text += f"\n  {name}: {printable(row['problem'], keep_newlines=False)}"
    return text


def _schedule_cell(row: dict[str, Any], key: str, now: datetime) -> Any:
    if key == "when":
        if row["every_seconds"]:
            return rows.schedule_every(row["every_seconds"])
        return f"cron {row['cron']}"
    if key == "state":
        return SCHEDULE_STATE_WORDS.get(row["state"], row["state"])
    if key in ("next_tick", "last_tick_at") and row[key] is not None:
        moment = datetime.fromisoformat(row[key])
        return f"{moment.strftime('%Y-%m-%d %H:%M:%S')}Z ({age(moment, now)})"
    return row[key]


def pause_report(name: str, *, pause: bool, changed: bool) -> dict[str, Any]:
    """Return what ``jobs schedules pause|resume NAME`` says of the store's answer."""
    if pause:
        message = f"Paused schedule {name}." if changed else f"Schedule {name} was already paused."
    else:
        message = f"Resumed schedule {name}." if changed else f"Schedule {name} was not paused."
    return {"name": name, "paused": pause, "changed": changed, "message": message}


# -- helpers ---------------------------------------------------------------------------------------


def dumps(value: Any) -> str:
    text = json.dumps(value, cls=DjangoJSONEncoder, indent=2, ensure_ascii=False)
    return printable_json(text)


def _plain(data: dict[str, Any]) -> dict[str, Any]:
    """Return ``data`` with ids as text and times as ISO 8601 text."""
    return {key: str(v) if isinstance(v, UUID) else _iso(v) for key, v in data.items()}


def _scalar(value: Any) -> str:
    return "-" if value is None or value == "" else printable(value, keep_newlines=False)


def _indent(text: str, prefix: str = "  ") -> str:
    lines = printable(text).splitlines()  # escaped first: only newlines are left to split on
    return "\n".join(prefix + line for line in lines or [""])


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def _seconds_since(moment: datetime | None, now: datetime) -> float | None:
    return None if moment is None else round((now - moment).total_seconds(), 3)
