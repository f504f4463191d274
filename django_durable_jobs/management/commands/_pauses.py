"""``manage.py jobs pause|resume|pauses``: hold a queue or an operation back, from a shell.

``jobs pause (--queue Q | --operation O) [--scope S] --reason R`` pauses it (in every scope,
unless ``--scope``); ``jobs resume`` the same way, or ``jobs resume --id N``; ``jobs pauses``
lists the pauses in force (``--all``: with the ended ones). The store does the work and records
who: the OS login (``cli:<login>``) unless ``--by`` names someone. The shell has no permission
check: whoever runs ``manage.py`` is an operator. A refusal is a ``CommandError`` (exit 1).
Django ignores command modules whose name starts with ``_``, so this one is no command.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils import timezone

from ...formatting.humanize import relative as age
from ...formatting.terminal import printable
from ...models import JobPause
from ...rules.errors import JobError
from ...store import DurableJobStore, PauseChange, PauseNotFound
from . import _jobs_format as fmt

COLUMNS = (
    ("id", "ID"),
    ("target", "TARGET"),
    ("name", "NAME"),
    ("scope", "SCOPE"),
    ("since", "PAUSED"),
    ("paused_by", "BY"),
    ("state", "STATE"),
    ("reason", "REASON"),
)


def add_pause_parsers(sub: Any, common: CommandParser) -> None:
    """Add ``jobs pause``, ``jobs resume`` and ``jobs pauses`` to the ``jobs`` subparsers."""
    for verb, what in (
        ("pause", "pause a queue or an operation: workers stop claiming its pending jobs"),
        ("resume", "resume a paused queue or operation: its pending jobs are claimed again"),
    ):
        parser = sub.add_parser(verb, parents=[common], help=what)
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--queue", metavar="Q", help="the queue")
        which.add_argument("--operation", metavar="O", help="the operation")
        if verb == "resume":
            which.add_argument("--id", type=int, metavar="N", help="the pause's id (jobs pauses)")
        parser.add_argument(
            "--scope", metavar="S", help="only in this scope (default: in every scope)"
        )
        parser.add_argument(
            "--by", metavar="WHO", help="who to record (default: cli:<your OS login>)"
        )
        if verb == "pause":
            parser.add_argument(
                "--reason", required=True, help="why: kept with the pause as evidence"
            )
    listing = sub.add_parser(
        "pauses", parents=[common], help="list the pauses in force (--all: the ended ones too)"
    )
    listing.add_argument("--all", action="store_true", help="include resumed pauses")


def handle_pause(store: DurableJobStore, options: dict[str, Any], out: Any) -> None:
    """Pause or resume (``options["subcommand"]``) through the store; report what it did."""
    verb = options["subcommand"]
    target, name = _target(options)
    try:
        if verb == "pause":
            change = store.pause(
                target,
                name,
                scope=options.get("scope"),
                reason=options.get("reason") or "",
                by=options.get("by"),
            )
        else:
            change = store.resume(
                target,
                name,
                scope=options.get("scope"),
                pause_id=options.get("id"),
                by=options.get("by"),
            )
    except PauseNotFound as exc:
        raise CommandError(_line(exc.message)) from exc
    except JobError as exc:
        raise CommandError(_line(f"Cannot {verb}: {exc.message}")) from exc
    report = _report(change, verb)
    out.write(fmt.dumps(report) if options["json"] else _line(report["message"]))


def handle_pauses(store: DurableJobStore, options: dict[str, Any], out: Any) -> None:
    """List the pauses in force (or all, newest first)."""
    rows = [_row(p) for p in store.pauses(active=None if options.get("all") else True)]
    if options["json"]:
        out.write(fmt.dumps([{k: v for k, v in r.items() if k != "paused_at_value"} for r in rows]))
        return
    if not rows:
        out.write("Nothing is paused." if not options.get("all") else "No pauses yet.")
        return
    now = timezone.now()
    shown = [
        {**row, "since": age(row["paused_at_value"], now), "scope": row["scope"] or "(every)"}
        for row in rows
    ]
    widths = {k: max(len(h), *(len(_line(str(r[k]))) for r in shown)) for k, h in COLUMNS}
    lines = ["  ".join(h.ljust(widths[k]) for k, h in COLUMNS).rstrip()]
    for row in shown:
        lines.append("  ".join(_line(str(row[k])).ljust(widths[k]) for k, _ in COLUMNS).rstrip())
    out.write("\n".join(lines))


def _target(options: dict[str, Any]) -> tuple[str | None, str | None]:
    if options.get("queue") is not None:
        return JobPause.Target.QUEUE, options["queue"]
    if options.get("operation") is not None:
        return JobPause.Target.OPERATION, options["operation"]
    if options.get("id") is None:  # argparse requires one; call_command(...) may not
        raise CommandError("Name what to pause or resume: --queue Q or --operation O.")
    return None, None


def _row(pause: JobPause) -> dict[str, Any]:
    return {
        "id": pause.pk,
        "target": pause.target,
        "name": pause.name,
        "scope": pause.scope,
        "reason": pause.reason,
        "paused_at": pause.paused_at.isoformat(),
        "paused_at_value": pause.paused_at,
        "paused_by": pause.paused_by,
        "state": "in force" if pause.active else "resumed",
        "resumed_at": pause.resumed_at.isoformat() if pause.resumed_at else None,
        "resumed_by": pause.resumed_by,
    }


def _report(change: PauseChange, verb: str) -> dict[str, Any]:
    pause = change.pause
    where = f" in scope {pause.scope}" if pause.scope else " in every scope"
    what = f"{pause.target} {pause.name}{where}"
    if verb == "pause" and change.changed:
        message = (
            f"Paused {what} (pause {pause.pk}). Workers claim none of its pending jobs until "
            f"`manage.py jobs resume --id {pause.pk}`; running jobs finish."
        )
    elif verb == "pause":
        since = pause.paused_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
        message = (
            f"{what[0].upper()}{what[1:]} was already paused, since {since} UTC by "
            f"{pause.paused_by or 'someone unrecorded'} (pause {pause.pk}); nothing changed."
        )
    elif change.changed:
        message = f"Resumed {what} (pause {pause.pk}): its pending jobs are claimed again."
    else:
        message = f"Pause {pause.pk} of {what} had already ended; nothing changed."
    row = _row(pause)
    row.pop("paused_at_value")
    return {"ok": True, "changed": change.changed, "message": message, "pause": row}


def _line(text: str) -> str:
    return printable(text, keep_newlines=False)
