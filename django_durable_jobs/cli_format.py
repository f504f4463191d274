"""Formatting for ``manage.py jobs``: plain rows for tables and JSON, ages, pretty JSON.

Pure functions over rows already read; nothing here queries or writes the database.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

from .humanize import relative as age
from .models import Job, JobAttempt

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
)


def list_row(job: Job, ownership: str, now: datetime) -> dict[str, Any]:
    """Return the JSON-ready summary of one job for ``jobs list``."""
    return {
        "id": str(job.pk),
        "operation": job.operation,
        "status": job.status,
        "ownership": ownership,
        "attempts": job.attempts,
        "epoch": job.fencing_epoch,
        "progress": job.progress,
        "claimed_by": job.claimed_by,
        "scope": job.scope,
        "queue": job.queue,
        "created_at": _iso(job.created_at),
        "heartbeat_at": _iso(job.heartbeat_at),
        "heartbeat_age_seconds": _seconds_since(job.heartbeat_at, now),
        "lease_expires_at": _iso(job.lease_expires_at),
        "cancellation_requested_at": _iso(job.cancellation_requested_at),
        "retry_requested_at": _iso(job.retry_requested_at),
    }


def table(rows: Sequence[dict[str, Any]], now: datetime) -> str:
    """Return ``rows`` (from :func:`list_row`) as an aligned text table."""
    cells = [[title for _, title in LIST_COLUMNS]]
    for row in rows:
        cells.append([_cell(row, key, now) for key, _ in LIST_COLUMNS])
    widths = [max(len(line[i]) for line in cells) for i in range(len(LIST_COLUMNS))]
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
    value = row[key]
    return "-" if value in (None, "") else str(value)


def detail(job: Job, attempts: Iterable[JobAttempt], now: datetime) -> dict[str, Any]:
    """Return every column of ``job`` (stored text kept exact), its assessment and attempts."""
    data = {f.attname: getattr(job, f.attname) for f in Job._meta.concrete_fields}
    data = json.loads(json.dumps(data, cls=DjangoJSONEncoder))
    data["ownership"] = job.ownership
    data["diagnostic_error"] = job.diagnostic_error
    data["heartbeat_age_seconds"] = _seconds_since(job.heartbeat_at, now)
    data["attempt_history"] = [
        {
            "epoch": a.epoch,
            "outcome": a.outcome,
            "owner_id": a.owner_id,
            "claimed_by": a.claimed_by,
            "started_at": _iso(a.started_at),
            "ended_at": _iso(a.ended_at),
            "error": a.error,
        }
        for a in attempts
    ]
    return data


def detail_text(data: dict[str, Any], now: datetime) -> str:
    """Return :func:`detail` as text for people: fields, pretty JSON blocks, attempts."""
    blocks = ("proposal", "checkpoint", "result", "error", "attempt_history")
    width = max(len(k) for k in data)
    lines = [
        f"{key.ljust(width)}  {_scalar(value)}" for key, value in data.items() if key not in blocks
    ]
    for key in ("proposal", "checkpoint", "result"):
        lines += ["", f"{key}:", _indent(pretty_json(data[key]))]
    if data["error"] is not None:
        lines += ["", "error:", _indent(data["error"])]
    lines += ["", f"attempts ({len(data['attempt_history'])}, newest first):"]
    for a in data["attempt_history"]:
        ended = age(datetime.fromisoformat(a["ended_at"]), now)
        lines.append(
            f"  epoch {a['epoch']}  {a['outcome']}  by {a['claimed_by'] or '-'}  ended {ended}"
        )
        if a["error"]:
            lines.append(_indent(a["error"], "      "))
    return "\n".join(lines)


def pretty_json(text: str | None) -> str:
    """Return stored JSON text indented, or the exact text when it does not parse."""
    if text is None:
        return "(none)"
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False, sort_keys=True)
    except ValueError:
        return f"(not valid JSON; stored text follows)\n{text}"


def dumps(value: Any) -> str:
    return json.dumps(value, cls=DjangoJSONEncoder, indent=2, ensure_ascii=False)


def _scalar(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line for line in str(text).splitlines() or [""])


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _seconds_since(moment: datetime | None, now: datetime) -> float | None:
    return None if moment is None else round((now - moment).total_seconds(), 3)
