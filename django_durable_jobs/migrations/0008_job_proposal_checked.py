"""Add ``Job.proposal_checked``, and set it on the rows this app wrote before it existed.

The flag says the app checked the proposal as it wrote the row (strict JSON within the depth
limit); the ownership assessment trusts a proposal only with it, in SQL and in Python alike. A
row of a status that can still be claimed or retried (pending, running, failed, cancelled) gets
it when its proposal passes that check now and matches its SHA-256: such a row cannot be told
from one the app wrote. Every other row keeps NULL, as a row written any other way has.
"""

from django.db import migrations, models

CHUNK = 1_000
STATUSES = ("pending", "running", "failed", "cancelled")


def _intact(proposal, proposal_hash) -> bool:
    import hashlib

    from django_durable_jobs.jsontext import is_json

    try:
        digest = hashlib.sha256(proposal.encode("utf-8")).hexdigest()
    except UnicodeEncodeError:
        return False
    return digest == proposal_hash and is_json(proposal)


def mark_checked(apps, schema_editor):
    """Set the flag on intact rows, a chunk of ids at a time (keyset, so no cursor stays open)."""
    job_model = apps.get_model("durable_jobs", "Job")
    rows = job_model.objects.using(schema_editor.connection.alias).filter(
        status__in=STATUSES, proposal__isnull=False, proposal_checked__isnull=True
    )
    last = None
    while True:
        chunk = rows.order_by("pk")
        if last is not None:
            chunk = chunk.filter(pk__gt=last)
        seen, intact = 0, []
        columns = chunk.values_list("pk", "proposal", "proposal_hash")[:CHUNK]
        for pk, proposal, proposal_hash in columns.iterator(chunk_size=CHUNK):
            seen += 1
            last = pk
            if _intact(proposal, proposal_hash):
                intact.append(pk)
        if intact:
            rows.filter(pk__in=intact).update(proposal_checked=True)
        if seen < CHUNK:
            return


class Migration(migrations.Migration):
    dependencies = [("durable_jobs", "0007_attempt_traceback")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="proposal_checked",
            field=models.BooleanField(default=None, null=True),
        ),
        migrations.RunPython(mark_checked, migrations.RunPython.noop, elidable=False),
    ]
