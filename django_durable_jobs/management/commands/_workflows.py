"""``manage.py jobs workflow list|show|cancel|retry``: workflows from a shell.

Reads go through ``store.workflows`` (unscoped: the CLI sees every scope); cancel and retry are
the store's, and the report words its typed answer (``WorkflowAnswer``). An id that is no UUID
or names no workflow is a ``CommandError`` (exit 1), as it is for ``jobs show``. Django ignores
command modules whose name starts with ``_``, so this one is no command.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db.models import Count, Q
from django.utils import timezone

from ...formatting.humanize import relative as age
from ...models import Job, Workflow
from ...rules import validation
from ...rules.errors import InputInvalid
from ...rules.vocabulary import JobStatus
from ...stats.workflows import progress, state_of, workflow_state
from ...store import DurableJobStore, WorkflowNotFound
from . import _jobs_format as fmt

LIST_LIMIT_MAX = 1_000
JOB_COLUMNS = (
    ("name", "NAME"),
    ("id", "ID"),
    ("operation", "OPERATION"),
    ("status", "STATUS"),
    ("attempts", "ATTEMPTS"),
    ("parents", "AFTER"),
)
LIST_COLUMNS = (
    ("id", "ID"),
    ("name", "NAME"),
    ("scope", "SCOPE"),
    ("state", "STATE"),
    ("progress", "COMPLETE"),
    ("created_at", "CREATED"),
)
# What ``jobs workflow cancel|retry`` says of each group of jobs the store changed.
CANCEL_SAYS = {
    "cancelled": "cancelled (not running)",
    "requested": "running: cancellation requested, their owners stop at the next check",
}
RETRY_SAYS = {
    "retried": "ran before: retry requested, a worker will claim them",
    "pending": "never ran: pending again",
    "waiting": "waiting again for upstream jobs that will run again",
}


def add_workflow_parser(sub: Any, common: CommandParser) -> None:
    """Add ``jobs workflow list|show|cancel|retry`` to the ``jobs`` command's subparsers."""
    workflow = sub.add_parser(
        "workflow",
        parents=[common],
        help="list workflows; show, cancel or retry one (every job of it at once)",
    )
    actions = workflow.add_subparsers(
        dest="workflow_command", metavar="{list,show,cancel,retry}", required=True
    )
    ls = actions.add_parser("list", parents=[common], help="workflows, newest first")
    ls.add_argument("--scope", help="only workflows of this scope")
    ls.add_argument("--name", help="only workflows of this name")
    ls.add_argument(
        "--limit", type=int, default=50, help=f"most rows, 1-{LIST_LIMIT_MAX} (default 50)"
    )
    for verb, what in (
        ("show", "a workflow: its state, progress and each job with its parents"),
        ("cancel", "cancel every job of a workflow not yet ended"),
        ("retry", "run again the failed and cancelled jobs of a workflow"),
    ):
        action = actions.add_parser(verb, parents=[common], help=what)
        action.add_argument("workflow_id", metavar="ID", help="the workflow's id (a UUID)")


def handle_workflow(store: DurableJobStore, options: dict[str, Any], out: Any) -> None:
    """Run one ``jobs workflow`` action and write its report to ``out``."""
    verb = options["workflow_command"]
    if verb == "list":
        _list(store, options, out)
        return
    raw = options["workflow_id"]
    if verb == "show":
        workflow = _get(store, raw)
        data = workflow_data(store, workflow)
        out.write(fmt.dumps(data) if options["json"] else workflow_text(data, timezone.now()))
        return
    act = store.workflows.cancel if verb == "cancel" else store.workflows.retry
    try:
        answer = act(_workflow_id(raw), by=store.actor or "")
    except WorkflowNotFound as exc:
        raise CommandError(f"No workflow {fmt._scalar(raw)}.") from exc
    says = CANCEL_SAYS if verb == "cancel" else RETRY_SAYS
    report = action_report(verb, answer.workflow, answer.changed, says)
    report["state"] = state_of(store.workflows.jobs(answer.workflow.pk))
    out.write(fmt.dumps(report) if options["json"] else report["message"])


# -- reading ----------------------------------------------------------------------------------------


def _workflow_id(raw: str) -> Any:
    try:
        return validation.job_id(raw)
    except InputInvalid as exc:
        raise CommandError(
            f"{fmt._scalar(raw)!r} is not a workflow id; workflow ids are UUIDs."
        ) from exc


def _get(store: DurableJobStore, raw: str) -> Workflow:
    workflow = store.workflows.get(_workflow_id(raw))
    if workflow is None:
        raise CommandError(f"No workflow {fmt._scalar(raw)}.")
    return workflow


def workflow_data(store: DurableJobStore, workflow: Workflow) -> dict[str, Any]:
    """Return a workflow as JSON-ready data: its row, state, progress and jobs with parents."""
    jobs = store.workflows.jobs(workflow.pk)
    parents: dict[Any, list[Any]] = {}
    for parent, child in store.workflows.edges(workflow.pk):
        parents.setdefault(child, []).append(parent)
    label = {job.pk: job.node or f"#{index}" for index, job in enumerate(jobs)}
    order = {job.pk: index for index, job in enumerate(jobs)}
    rows = []
    for index, job in enumerate(jobs):
        mine = sorted(parents.get(job.pk, []), key=order.__getitem__)
        rows.append(
            {
                "index": index,
                "name": job.node or None,
                "id": str(job.pk),
                "operation": job.operation,
                "status": job.status,
                "attempts": job.attempts,
                "waiting_on": job.waiting_on,
                "on_upstream_failure": job.on_upstream_failure,
                "sleep_until": fmt._iso(job.sleep_until),
                "completed_at": fmt._iso(job.completed_at),
                "error": job.error,
                "parents": [str(p) for p in mine],
                "parent_names": [label[p] for p in mine],
            }
        )
    return {
        "id": str(workflow.pk),
        "name": workflow.name,
        "scope": workflow.scope,
        "idempotency_key": workflow.idempotency_key,
        "state": state_of(jobs),
        "progress": progress(job.status for job in jobs),
        "created_at": fmt._iso(workflow.created_at),
        "cancel_requested_at": fmt._iso(workflow.cancel_requested_at),
        "retry_requested_at": fmt._iso(workflow.retry_requested_at),
        "requested_by": workflow.requested_by or None,
        "jobs": rows,
    }


def workflow_text(data: dict[str, Any], now: datetime) -> str:
    """Return :func:`workflow_data` as text: the workflow's fields, then a table of its jobs."""
    p = data["progress"]
    share = f"{p['complete'] / p['total']:.0%}" if p["total"] else "-"
    counts = ", ".join(f"{n} {status}" for status, n in p["by_status"].items())
    fields = [
        ("workflow", data["id"]),
        ("name", data["name"]),
        ("scope", data["scope"]),
        ("idempotency_key", data["idempotency_key"]),
        ("state", data["state"]),
        ("progress", f"{p['complete']} of {p['total']} complete ({share}): {counts}"),
        ("created_at", _when(data["created_at"], now)),
    ]
    for key in ("cancel_requested_at", "retry_requested_at"):
        if data[key] is not None:
            fields.append((key, _when(data[key], now)))
    if data["requested_by"]:
        fields.append(("requested_by", data["requested_by"]))
    width = max(len(key) for key, _ in fields)
    lines = [f"{key.ljust(width)}  {fmt._scalar(value)}" for key, value in fields]
    table = [[_cell(row, key, now) for key, _ in JOB_COLUMNS] for row in data["jobs"]]
    lines += ["", f"jobs ({len(data['jobs'])}, in declaration order):"]
    lines.append(fmt.aligned([title for _, title in JOB_COLUMNS], table))
    ended = [row for row in data["jobs"] if row["error"] and row["status"] != "complete"]
    if ended:
        lines += ["", "errors:"]
        for row in ended:
            name = row["name"] or f"#{row['index']}"
            lines.append(f"  {fmt._scalar(name)}: {fmt._scalar(row['error'])}")
    return "\n".join(lines)


def _cell(row: dict[str, Any], key: str, now: datetime) -> Any:
    if key == "name":
        return row["name"] or f"#{row['index']}"
    if key == "parents":
        return ", ".join(row["parent_names"]) or "-"
    if key == "status" and row["status"] == "waiting":
        return f"waiting (on {row['waiting_on']})"
    if key == "status" and row["status"] == "sleeping" and row["sleep_until"]:
        return f"sleeping until {_when(row['sleep_until'], now)}"
    return row[key]


def _when(text: str, now: datetime) -> str:
    moment = datetime.fromisoformat(text)
    return f"{moment.strftime('%Y-%m-%d %H:%M:%S')}Z ({age(moment, now)})"


# -- list -------------------------------------------------------------------------------------------


def _list(store: DurableJobStore, options: dict[str, Any], out: Any) -> None:
    limit = options["limit"]
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LIST_LIMIT_MAX:
        raise CommandError(
            f"--limit must be a whole number from 1 to {LIST_LIMIT_MAX:,}; got {limit!r}."
        )
    found = Workflow.objects.using(store.using)
    for field in ("scope", "name"):
        value = options.get(field)
        if value is None:
            continue
        try:
            found = found.filter(**{field: validation.name(value, field)})
        except InputInvalid as exc:
            raise CommandError(
                f"--{field} must be 1-{validation.NAME_MAX} characters of text without control "
                f"characters; got {value!r}."
            ) from exc
    workflows = list(found.order_by("-created_at", "-id")[:limit])
    statuses: dict[Any, list[str]] = {}
    counted = (
        Job.objects.using(store.using)
        .filter(workflow_id__in=[w.pk for w in workflows])
        .values("workflow_id", "status")
        .annotate(n=Count("pk"), again=Count("pk", filter=Q(retry_requested_at__isnull=False)))
        .order_by()
    )
    retrying: set[Any] = set()
    for row in counted:  # one row per workflow and status: enough for its state and progress
        statuses.setdefault(row["workflow_id"], []).extend([row["status"]] * row["n"])
        if row["again"] and row["status"] in (JobStatus.FAILED, JobStatus.CANCELLED):
            retrying.add(row["workflow_id"])
    data = []
    for w in workflows:
        mine = statuses.get(w.pk, [])
        data.append(
            {
                "id": str(w.pk),
                "name": w.name,
                "scope": w.scope,
                "state": workflow_state(mine, retries_to_come=w.pk in retrying),
                "progress": progress(mine),
                "created_at": fmt._iso(w.created_at),
            }
        )
    if options["json"]:
        out.write(fmt.dumps(data))
        return
    if not data:
        out.write("No workflows match.")
        return
    now = timezone.now()
    rows = []
    for row in data:
        p = row["progress"]
        cells = dict(row, progress=f"{p['complete']}/{p['total']}")
        cells["created_at"] = age(datetime.fromisoformat(row["created_at"]), now)
        rows.append([cells[key] for key, _ in LIST_COLUMNS])
    out.write(fmt.aligned([title for _, title in LIST_COLUMNS], rows))


# -- cancel and retry -------------------------------------------------------------------------------


def action_report(
    verb: str, workflow: Workflow, changed: dict[str, list[Any]], says: dict[str, str]
) -> dict[str, Any]:
    """Return what ``jobs workflow cancel|retry`` did: the jobs changed, by what happened."""
    parts = [f"{len(ids)} {says[kind]}" for kind, ids in changed.items() if ids]
    count = sum(len(ids) for ids in changed.values())
    if parts:
        message = f"Workflow {workflow.pk} ({workflow.name}): " + "; ".join(parts) + "."
    elif verb == "cancel":
        message = (
            f"Workflow {workflow.pk} ({workflow.name}): nothing to cancel; every job has ended "
            f"or was already asked to stop."
        )
    else:
        message = (
            f"Workflow {workflow.pk} ({workflow.name}): no job failed or was cancelled; nothing "
            f"to retry."
        )
    return {
        "id": str(workflow.pk),
        "name": workflow.name,
        "changed": {kind: [str(pk) for pk in ids] for kind, ids in changed.items()},
        "count": count,
        "message": fmt._scalar(message),
    }
