"""The overview's indexes: jobs by the time they ended, attempts by the time they ended.

The jobs index is partial where the database has partial indexes (PostgreSQL, SQLite): ended
rows only, so claiming a job never writes to it (a full one cost the worker's drain about 8 %).
MariaDB and MySQL have none, so they get the same columns in a plain index, which InnoDB, like
SQLite, touches only when one of its own columns changes. It is made here rather than declared in
``Job.Meta.indexes``: Django would warn on every command on MariaDB that it leaves a partial index
out (models.W037).
"""

from django.db import migrations, models

NAME = "durable_jobs_completed_idx"
COLUMNS = "(completed_at, status, operation, queue)"


def create_completed_index(apps, schema_editor):
    where = "" if schema_editor.connection.vendor == "mysql" else " WHERE completed_at IS NOT NULL"
    schema_editor.execute(f"CREATE INDEX {NAME} ON durable_jobs_job {COLUMNS}{where}")


def drop_completed_index(apps, schema_editor):
    on = " ON durable_jobs_job" if schema_editor.connection.vendor == "mysql" else ""
    schema_editor.execute(f"DROP INDEX {NAME}{on}")


class Migration(migrations.Migration):
    dependencies = [
        ("durable_jobs", "0014_dashboard_trace_context"),
    ]

    operations = [
        migrations.RunPython(
            create_completed_index, drop_completed_index, atomic=False, elidable=False
        ),
        migrations.AddIndex(
            model_name="jobattempt",
            index=models.Index(fields=["ended_at"], name="durable_jobs_attempt_ended_idx"),
        ),
    ]
