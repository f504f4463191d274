from django.db import models


class Report(models.Model):
    """Domain data the demo job writes, in the same transaction as its completion."""

    job_id = models.UUIDField(unique=True)
    rows = models.PositiveIntegerField()
    built_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"report of job {self.job_id}: {self.rows} rows"
