"""Create the demo superuser and submit sample jobs for the worker to run."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from django_durable_jobs import submit

USERNAME = "demo"
PASSWORD = "demo"


class Command(BaseCommand):
    help = "Create the demo superuser (demo/demo) and submit a few sample jobs."

    def handle(self, *args, **options) -> None:
        users = get_user_model().objects
        if not users.filter(username=USERNAME).exists():
            users.create_superuser(USERNAME, "demo@example.com", PASSWORD)
        jobs = [
            submit("reports.rebuild", {"rows": 2000, "step": 100, "delay": 1.0}, priority=5),
            submit("reports.rebuild", {"rows": 500, "step": 50, "delay": 0.5}),
            submit("demo.wait_for_cancel", {"seconds": 3600}),
            submit("demo.flaky", {"message": "the upstream service answered 503"}),
        ]
        for job in jobs:
            self.stdout.write(f"submitted {job.operation:<22} {job.pk}")
