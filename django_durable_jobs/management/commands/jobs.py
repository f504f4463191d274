"""``manage.py jobs``: triage from a shell — list, show, cancel, retry (and API tokens).

Reads use the job queryset's vocabulary; every write goes through :class:`DurableJobStore`
(unscoped, actor ``cli:<login>``). Every subcommand takes ``--json`` for scripts. A refused
request, an unknown or malformed id exits 1 after reporting each id.
"""

from __future__ import annotations

import argparse
import getpass
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from ... import cli_format
from ...conf import jobs_settings
from ...errors import InputInvalid, NotReclaimable
from ...models import Job, JobAttempt
from ...store import DurableJobStore
from ...validation import NAME_MAX
from ...vocabulary import OWNERSHIP_STATES, JobStatus

API_MISSING = "the REST API is not installed (django_durable_jobs.api.cli is missing)"


class Command(BaseCommand):
    help = "Triage durable jobs: list, show, cancel, retry. Add --json for machine output."

    def add_arguments(self, parser: CommandParser) -> None:
        common = CommandParser(add_help=False)
        common.add_argument("--json", action="store_true", help="print JSON for scripts")
        common.add_argument("--database", help="database alias (default: DURABLE_JOBS DATABASE)")
        sub = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")

        ls = sub.add_parser("list", parents=[common], help="list jobs, newest first")
        ls.add_argument("--status", choices=JobStatus.values)
        ls.add_argument("--ownership", choices=OWNERSHIP_STATES)
        ls.add_argument("--operation")
        ls.add_argument("--scope")
        ls.add_argument("--queue")
        ls.add_argument("--limit", type=int, default=50, help="most rows to show (default 50)")

        show = sub.add_parser("show", parents=[common], help="every field and attempt of a job")
        show.add_argument("job_id", metavar="ID")
        for name, what in (("cancel", "cancellation"), ("retry", "a retry")):
            request = sub.add_parser(name, parents=[common], help=f"request {what} of jobs")
            request.add_argument("job_ids", metavar="ID", nargs="+")

        api_cli = _api_cli()
        if api_cli is not None:
            api_cli.add_token_parser(sub)
        else:
            token = sub.add_parser("token", help="manage REST API tokens (needs the API)")
            token.add_argument("rest", nargs=argparse.REMAINDER)

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["subcommand"]
        if name == "token":
            api_cli = _api_cli()
            if api_cli is None:
                raise CommandError(API_MISSING)
            code = api_cli.handle_token(options, self.stdout)
            if code:
                raise CommandError(f"jobs token exited with status {code}.", returncode=code)
            return
        try:
            using = jobs_settings.database(options["database"])
            store = DurableJobStore(actor=_actor(), using=using)
        except InputInvalid as exc:
            raise CommandError(exc.message) from exc
        getattr(self, f"do_{name}")(store, options)

    # -- subcommands -----------------------------------------------------------------------------

    def do_list(self, store: DurableJobStore, options: dict[str, Any]) -> None:
        if options["limit"] < 1:
            raise CommandError("--limit must be at least 1.")
        now = timezone.now()
        rows = Job.objects.using(store.using)
        if options["ownership"]:
            rows = rows.with_ownership_state(options["ownership"], now)
        else:
            rows = rows.with_ownership(now)
        for field in ("status", "operation", "scope", "queue"):
            if options[field]:
                rows = rows.filter(**{field: options[field]})
        jobs = rows.order_by("-created_at", "-id")[: options["limit"]]
        data = [cli_format.list_row(job, job.ownership_sql, now) for job in jobs]
        if options["json"]:
            self.stdout.write(cli_format.dumps(data))
        elif data:
            self.stdout.write(cli_format.table(data, now))
        else:
            self.stdout.write("No jobs match.")

    def do_show(self, store: DurableJobStore, options: dict[str, Any]) -> None:
        job = _get(store, options["job_id"])
        now = timezone.now()
        attempts = JobAttempt.objects.using(store.using).filter(job=job).order_by("-epoch", "-id")
        data = cli_format.detail(job, attempts, now)
        if options["json"]:
            self.stdout.write(cli_format.dumps(data))
        else:
            self.stdout.write(cli_format.detail_text(data, now))

    def do_cancel(self, store: DurableJobStore, options: dict[str, Any]) -> None:
        self._report(options, [_cancel(store, raw) for raw in options["job_ids"]])

    def do_retry(self, store: DurableJobStore, options: dict[str, Any]) -> None:
        self._report(options, [_retry(store, raw) for raw in options["job_ids"]])

    def _report(self, options: dict[str, Any], results: list[dict[str, Any]]) -> None:
        if options["json"]:
            self.stdout.write(cli_format.dumps(results))
        else:
            for result in results:
                self.stdout.write(f"{result['id']}: {result['message']}")
        refused = [r for r in results if not r["ok"]]
        if refused:
            raise CommandError(
                f"{len(refused)} of {len(results)} request(s) refused: "
                + "; ".join(f"{r['id']}: {r['message']}" for r in refused)
            )


# -- per-id requests -----------------------------------------------------------------------------


def _cancel(store: DurableJobStore, raw: str) -> dict[str, Any]:
    job, error = _lookup(store, raw)
    if error:
        return error
    before = job.cancellation_requested_at
    if not store.request_cancel(job.pk):
        job = store.get(job.pk) or job
        message = f"already {job.status}; nothing to cancel (its result is kept)"
        return _result(raw, False, "finished", job, message)
    job = store.get(job.pk)
    if job.status == JobStatus.CANCELLED:
        message = "cancelled (it had not started)"
    elif before is not None:
        message = f"cancellation was already requested at {before.isoformat()}"
    else:
        message = "cancellation requested; its owner stops at the next check"
    return _result(raw, True, "requested", job, message)


def _retry(store: DurableJobStore, raw: str) -> dict[str, Any]:
    job, error = _lookup(store, raw)
    if error:
        return error
    try:
        accepted = store.request_retry(job.pk)
    except NotReclaimable as exc:
        return _result(raw, False, "refused", job, exc.message)
    job = store.get(job.pk) or job
    if not accepted:
        message = f"{job.status} ({job.ownership}) has not ended; there is nothing to retry"
        return _result(raw, False, "refused", job, message)
    return _result(raw, True, "requested", job, "retry requested; a worker will claim it")


def _lookup(store: DurableJobStore, raw: str) -> tuple[Job | None, dict[str, Any] | None]:
    try:
        job = store.get(raw)
    except InputInvalid:
        return None, _result(raw, False, "malformed", None, "not a job id (job ids are UUIDs)")
    if job is None:
        return None, _result(raw, False, "unknown", None, "no such job")
    return job, None


def _result(raw: str, ok: bool, outcome: str, job: Job | None, message: str) -> dict[str, Any]:
    return {
        "id": str(job.pk) if job is not None else raw,
        "ok": ok,
        "outcome": outcome,
        "status": job.status if job is not None else None,
        "message": message,
    }


def _get(store: DurableJobStore, raw: str) -> Job:
    try:
        job = store.get(raw)
    except InputInvalid as exc:
        raise CommandError(f"{raw!r} is not a job id; job ids are UUIDs.") from exc
    if job is None:
        raise CommandError(f"No job {raw}.")
    return job


def _actor() -> str:
    try:
        login = getpass.getuser()
    except (KeyError, OSError):
        login = os.environ.get("USER") or "unknown"
    return f"cli:{login}"[:NAME_MAX]


def _api_cli():
    """Return ``django_durable_jobs.api.cli``, or None when the REST API is not installed."""
    try:
        from ...api import cli
    except ImportError as exc:
        if (exc.name or "").startswith(("django_durable_jobs.api", "ninja")):
            return None
        raise
    return cli
