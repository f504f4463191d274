"""``manage.py jobs``: triage from a shell — list, show, cancel, retry (and workflows, schedules,
API tokens).

Reads use the job queryset's vocabulary; every write goes through :class:`DurableJobStore`
(unscoped, actor ``cli:<login>``), whose typed answer (a ``RequestResult``) the report only words
(``_jobs_format``). Every subcommand takes ``--json`` for scripts. A refused request, an unknown
or malformed id exits 1 after reporting each id.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import F
from django.utils import timezone

from ... import stats
from ...formatting.terminal import printable
from ...models import Job, JobAttempt, JobDependency, JobStep, Schedule
from ...rules import validation
from ...rules.conf import jobs_settings
from ...rules.errors import InputInvalid, JobError, NotReclaimable
from ...rules.vocabulary import OWNERSHIP_STATES, JobStatus, RequestAnswer
from ...store import DurableJobStore, RequestResult, ScheduleNotFound
from . import _jobs_format as fmt
from ._pauses import add_pause_parsers, handle_pause, handle_pauses
from ._stats_format import stats_text
from ._tokens import add_token_parser, handle_token
from ._workflows import add_workflow_parser, handle_workflow

RAW_FIELDS = ("proposal", "checkpoint", "result")  # what ``jobs show ID --raw`` prints
LIMIT_MAX = 10_000  # rows of one ``jobs list``; page with --status/--operation/... for more
# ``jobs list --order``: newest first for triage; oldest first is the REST API's page order.
ORDERS = {"newest": ("-created_at", "-id"), "oldest": ("created_at", "id")}


class Command(BaseCommand):
    help = (
        "Triage durable jobs: list, show, cancel, retry; pause and resume queues and operations; "
        "list, pause and resume schedules. "
        "Add --json for machine output."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        common = CommandParser(add_help=False)
        common.add_argument("--json", action="store_true", help="print JSON for scripts")
        common.add_argument("--database", help="database alias (default: DURABLE_JOBS DATABASE)")
        sub = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")

        ls = sub.add_parser("list", parents=[common], help="list jobs, newest first (see --order)")
        ls.add_argument("--status", choices=JobStatus.values, help="only jobs in this status")
        ls.add_argument(
            "--ownership", choices=OWNERSHIP_STATES, help="only jobs whose lease is in this state"
        )
        ls.add_argument("--operation", help="only jobs of this operation")
        ls.add_argument("--scope", help="only jobs of this scope")
        ls.add_argument("--queue", help="only jobs of this queue")
        ls.add_argument("--workflow", metavar="ID", help="only the jobs of this workflow")
        ls.add_argument(
            "--limit",
            type=int,
            default=50,
            help=f"most rows to show, 1-{LIMIT_MAX} (default 50)",
        )
        ls.add_argument(
            "--order",
            choices=ORDERS,
            default="newest",
            help="newest first (the default, for triage) or oldest first (the REST API's order)",
        )

        stats = sub.add_parser(
            "stats",
            parents=[common],
            help="the overview: queues and lag, jobs by ownership, workers, what needs attention",
        )
        stats.add_argument("--scope", help="only this scope's jobs and schedules (workers: all)")

        show = sub.add_parser("show", parents=[common], help="every field and attempt of a job")
        show.add_argument("job_id", metavar="ID", help="the job's id (a UUID)")
        show.add_argument(
            "--raw",
            choices=RAW_FIELDS,
            help="print only this stored value, exactly as stored (escaped on a terminal)",
        )
        for name, what in (("cancel", "cancellation"), ("retry", "a retry")):
            request = sub.add_parser(name, parents=[common], help=f"request {what} of jobs")
            request.add_argument("job_ids", metavar="ID", nargs="+", help="job ids (UUIDs)")

        schedules = sub.add_parser(
            "schedules",
            parents=[common],
            help="list the recurring jobs declared in code; pause or resume one",
        )
        actions = schedules.add_subparsers(dest="schedule_command", metavar="{pause,resume}")
        for verb, what in (("pause", "stop enqueueing"), ("resume", "enqueue again")):
            action = actions.add_parser(
                verb, parents=[common], help=f"{verb} a schedule: {what} its ticks"
            )
            action.add_argument("schedule_name", metavar="NAME", help="the schedule's name")

        add_workflow_parser(sub, common)
        add_pause_parsers(sub, common)
        add_token_parser(sub)

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["subcommand"]
        if name == "token":
            handle_token(options, self.stdout)  # a refusal is a CommandError
            return
        try:
            using = jobs_settings.database(options["database"])
            store = DurableJobStore(actor=_actor(), using=using)
        except InputInvalid as exc:
            named = "--database: " if options["database"] is not None else ""
            raise CommandError(f"{named}{exc.message}") from exc
        getattr(self, f"do_{name}")(store, options)

    # -- subcommands -----------------------------------------------------------------------------

    def do_list(self, store: DurableJobStore, options: dict[str, Any]) -> None:
        filters = _list_filters(options)
        now = timezone.now()
        rows = Job.objects.using(store.using)
        if options["ownership"]:
            rows = rows.with_ownership_state(options["ownership"], now)
        else:
            rows = rows.with_ownership(now)
        rows = rows.filter(**filters)
        data = []
        for job in rows.order_by(*ORDERS[options["order"]])[: options["limit"]]:
            job.ownership = job.ownership_sql  # the database's assessment at ``now``
            data.append(fmt.list_row(job, now))
        if options["json"]:
            self.stdout.write(fmt.dumps(data))
        elif data:
            self.stdout.write(fmt.table(data, now))
        else:
            self.stdout.write("No jobs match.")

    def do_stats(self, store: DurableJobStore, options: dict[str, Any]) -> None:
        scope = options.get("scope")
        try:
            snap = stats.snapshot(scope=scope, using=store.using)
        except InputInvalid as exc:
            raise CommandError(
                f"--scope must be 1-{validation.NAME_MAX} characters of text without control "
                f"characters; got {scope!r}."
            ) from exc
        if options["json"]:
            self.stdout.write(fmt.dumps(snap.as_dict()))
        else:
            self.stdout.write(stats_text(snap))

    def do_show(self, store: DurableJobStore, options: dict[str, Any]) -> None:
        job = _get(store, options["job_id"])
        if options.get("raw"):
            self._raw(job, options["raw"])
            return
        now = timezone.now()
        attempts = JobAttempt.objects.using(store.using).filter(job=job).order_by("-epoch", "-id")
        data = fmt.detail(job, attempts, now)
        data.update(_links(store, job))
        if options["json"]:
            self.stdout.write(fmt.dumps(data))
        else:
            self.stdout.write(fmt.detail_text(data, now))

    def _raw(self, job: Job, field: str) -> None:
        """Print the job's stored ``field`` whole, byte for byte when piped.

        A terminal gets it with its control characters escaped (the exact bytes could steer
        it): redirect to a file or a pipe for the exact text.
        """
        text = getattr(job, field)
        if text is None:
            raise CommandError(f"Job {job.pk} has no stored {field}.")
        if self.stdout.isatty():
            text = printable(text)
        self.stdout.write(text, ending="")

    def do_workflow(self, store: DurableJobStore, options: dict[str, Any]) -> None:
        handle_workflow(store, options, self.stdout)

    def do_pause(self, store: DurableJobStore, options: dict[str, Any]) -> None:
        handle_pause(store, options, self.stdout)

    do_resume = do_pause

    def do_pauses(self, store: DurableJobStore, options: dict[str, Any]) -> None:
        handle_pauses(store, options, self.stdout)

    def do_schedules(self, store: DurableJobStore, options: dict[str, Any]) -> None:
        verb = options.get("schedule_command")
        if verb in ("pause", "resume"):
            self._pause(store, options["schedule_name"], pause=verb == "pause", options=options)
            return
        now = timezone.now()
        found = Schedule.objects.using(store.using).annotate(last_job_status=F("last_job__status"))
        data = [fmt.schedule_row(row, now) for row in found.order_by("name")]
        if options["json"]:
            self.stdout.write(fmt.dumps(data))
        elif data:
            self.stdout.write(fmt.schedule_table(data, now))
        else:
            self.stdout.write("No schedules: none is declared in code, or no worker started yet.")

    def _pause(
        self, store: DurableJobStore, name: str, *, pause: bool, options: dict[str, Any]
    ) -> None:
        """Pause or resume one schedule through the store; CommandError when it cannot."""
        ask = store.pause_schedule if pause else store.resume_schedule
        try:
            changed = ask(name).changed
        except ScheduleNotFound as exc:
            raise CommandError(_line(exc.message)) from exc
        except JobError as exc:
            raise CommandError(_line(f"Schedule {name!r}: {exc.message}")) from exc
        report = fmt.pause_report(name, pause=pause, changed=changed)
        if options["json"]:
            self.stdout.write(fmt.dumps(report))
        else:
            self.stdout.write(_line(report["message"]))

    def do_cancel(self, store: DurableJobStore, options: dict[str, Any]) -> None:
        self._request(store, store.request_cancel_result, fmt.CANCEL_SAYS, options)

    def do_retry(self, store: DurableJobStore, options: dict[str, Any]) -> None:
        self._request(store, store.request_retry_result, fmt.RETRY_SAYS, options)

    def _request(
        self,
        store: DurableJobStore,
        ask: Callable[[Any], RequestResult],
        says: dict[RequestAnswer, str],
        options: dict[str, Any],
    ) -> None:
        """Make the request of each id, report every answer, then exit 1 if any was refused."""
        results = [_ask(store, ask, says, raw) for raw in options["job_ids"]]
        if options["json"]:
            self.stdout.write(fmt.dumps(results))
        else:
            for result in results:
                self.stdout.write(_line(f"{result['id']}: {result['message']}"))
        refused = [r for r in results if not r["ok"]]
        if refused:
            raise CommandError(
                f"{len(refused)} of {len(results)} request(s) refused: "
                + "; ".join(_line(f"{r['id']}: {r['message']}") for r in refused)
            )


# -- options -------------------------------------------------------------------------------------


def _list_filters(options: dict[str, Any]) -> dict[str, Any]:
    """Return the row filters of ``jobs list``; CommandError names an option that cannot work."""
    limit = options["limit"]
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LIMIT_MAX:
        raise CommandError(
            f"--limit must be a whole number from 1 to {LIMIT_MAX:,}; got {limit!r}."
        )
    # argparse checks the choices of a command line; call_command(status=...) skips argparse.
    for option, allowed in (
        ("status", JobStatus.values),
        ("ownership", OWNERSHIP_STATES),
        ("order", list(ORDERS)),
    ):
        value = options[option]
        if value is not None and value not in allowed:
            raise CommandError(f"--{option} must be one of {', '.join(allowed)}; got {value!r}.")
    filters = {} if options["status"] is None else {"status": options["status"]}
    if options.get("workflow") is not None:
        try:
            filters["workflow_id"] = validation.job_id(options["workflow"])
        except InputInvalid as exc:
            raise CommandError(
                f"--workflow must be a workflow id (a UUID); got {options['workflow']!r}."
            ) from exc
    for field in ("operation", "scope", "queue"):
        value = options[field]
        if value is None:
            continue
        try:
            filters[field] = validation.name(value, field)
        except InputInvalid as exc:
            raise CommandError(
                f"--{field} must be 1-{validation.NAME_MAX} characters of text without control "
                f"characters; got {value!r}."
            ) from exc
    return filters


def _links(store: DurableJobStore, job: Job) -> dict[str, Any]:
    """Return a job's recorded steps counted, and its workflow parents and children by id."""
    steps = JobStep.objects.using(store.using).filter(job_id=job.pk).count()
    if job.workflow_id is None:
        return {"steps": steps, "parents": [], "children": []}
    edges = JobDependency.objects.using(store.using).filter(workflow_id=job.workflow_id)
    parents = edges.filter(child_id=job.pk).order_by("id").values_list("parent_id", flat=True)
    children = edges.filter(parent_id=job.pk).order_by("id").values_list("child_id", flat=True)
    return {
        "steps": steps,
        "parents": [str(pk) for pk in parents],
        "children": [str(pk) for pk in children],
    }


def _line(text: str) -> str:
    """Return ``text`` (which may quote an argument or a stored word) as one printable line."""
    return printable(text, keep_newlines=False)


# -- per-id requests -----------------------------------------------------------------------------


def _ask(
    store: DurableJobStore,
    ask: Callable[[Any], RequestResult],
    says: dict[RequestAnswer, str],
    raw: str,
) -> dict[str, Any]:
    """Return the report of the request of one id: the store's answer, or its refusal."""
    try:
        job_id = validation.job_id(raw)
    except InputInvalid:
        return fmt.malformed_report(raw)
    try:
        return fmt.request_report(raw, ask(job_id), says)
    except NotReclaimable as exc:  # a refusal carries no result: read the row it left alone
        return fmt.refusal_report(raw, store.get(job_id), exc.message)


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
    return f"cli:{login}"[: validation.NAME_MAX]
