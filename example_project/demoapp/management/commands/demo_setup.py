"""Create the demo superuser and submit sample jobs for the worker to run."""

from __future__ import annotations

import django
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from django_durable_jobs import Workflow, submit

USERNAME = "demo"
PASSWORD = "demo"


class Command(BaseCommand):
    help = (
        "Create the demo superuser (demo/demo), submit a few sample jobs and, on Django 6, "
        "enqueue a Django task."
    )

    def handle(self, *args, **options) -> None:
        users = get_user_model().objects
        user = users.filter(username=USERNAME).first()
        if user is None:
            user = users.create_superuser(USERNAME, "demo@example.com", PASSWORD)
        jobs = [
            submit("reports.rebuild", {"rows": 2000, "step": 100, "delay": 1.0}, priority=5),
            submit("reports.rebuild", {"rows": 500, "step": 50, "delay": 0.5}),
            submit("demo.wait_for_cancel", {"seconds": 3600}),
            submit("demo.flaky", {"message": "the upstream service answered 503"}),
        ]
        for job in jobs:
            self.stdout.write(f"submitted {job.operation:<22} {job.pk}")
        self.submit_flow_controlled()
        self.submit_workflow()
        if django.VERSION >= (6, 0):
            self.enqueue_task(user.pk)
        else:
            self.stdout.write(
                f"Django {django.get_version()} has no django.tasks: no @task sample enqueued"
            )

    def submit_flow_controlled(self) -> None:
        """Submit work that flow control holds back: a rate limit and one sync per customer."""
        for n in range(10):
            submit("payments.charge", {"customer": f"c-{n % 3}", "amount": 10 + n})
        for n in range(4):
            submit("crm.sync_customer", {"customer": "acme" if n % 2 else "globex", "n": n})
        self.stdout.write("submitted 10 payments.charge (2/s) and 4 crm.sync_customer (1 per key)")

    def submit_workflow(self) -> None:
        """Submit a fan-out/fan-in import; its key makes a rerun return the same workflow."""
        wf = Workflow("imports.nightly", idempotency_key="demo-nightly")
        fetch = wf.job("imports.fetch", {"day": "2026-12-01", "parts": 6}, name="fetch")
        parts = [
            wf.job("imports.parse", {"part": i}, after=[fetch], name=f"parse-{i}") for i in range(6)
        ]
        wf.job("imports.merge", {}, after=parts, name="merge")
        wf.job("imports.wait_a_little", {"seconds": 20}, after=[fetch], name="wait")
        handle = wf.submit()
        self.stdout.write(f"submitted workflow {handle.workflow.name:<13} {handle.id}")

    def enqueue_task(self, user_id: int) -> None:
        """Enqueue the ``@task`` sample; its idempotency key makes a rerun return the same job."""
        from demoapp.tasks import send_welcome_email

        result = send_welcome_email.enqueue(user_id)
        self.stdout.write(
            f"enqueued  {send_welcome_email.module_path} {result.id} ({result.status})"
        )
