"""Create the demo superuser and submit sample jobs for the worker to run."""

from __future__ import annotations

import django
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from django_durable_jobs import submit

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
        if django.VERSION >= (6, 0):
            self.enqueue_task(user.pk)
        else:
            self.stdout.write(
                f"Django {django.get_version()} has no django.tasks: no @task sample enqueued"
            )

    def enqueue_task(self, user_id: int) -> None:
        """Enqueue the ``@task`` sample; its idempotency key makes a rerun return the same job."""
        from demoapp.tasks import send_welcome_email

        result = send_welcome_email.enqueue(user_id)
        self.stdout.write(
            f"enqueued  {send_welcome_email.module_path} {result.id} ({result.status})"
        )
