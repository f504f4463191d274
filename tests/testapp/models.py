"""Domain models the tests write through fences, as a host project would."""

from django.db import models


class DomainRow(models.Model):
    """A row of domain data written together with a job's completion."""

    job_id = models.UUIDField()
    value = models.CharField(max_length=200)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job_id"], name="testapp_one_row_per_job")]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.value}"


class RetryHistory(models.Model):
    """Bookkeeping written by ``retain_outcome`` in the same transaction as a retry."""

    job_id = models.UUIDField()
    previous_status = models.CharField(max_length=20)
    previous_epoch = models.BigIntegerField()

    def __str__(self) -> str:
        return f"retry of {self.job_id} after {self.previous_status}"


class ChaosRow(models.Model):
    """The domain row a ``chaos.domain`` job writes with its completion (tests/chaos).

    No unique constraint on purpose: a second row for one job, written by a stale attempt or by
    a completion applied twice, must be visible to the chaos checker, not refused by the table.
    """

    job_id = models.UUIDField()
    epoch = models.BigIntegerField()
    owner_id = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"{self.job_id} at epoch {self.epoch}"
