"""The claim of one operation's pending work: an index in claim order per operation.

Flow control claims a rate-limited operation's work on its own (``store.limits``), and so does a
worker started with ``--operations``. Without this index the claim walked the scope's whole
pending range in claim order and filtered out every other operation's row: with 5,000 other jobs
pending, 8 ms a claim, while holding the operation's rate-limit bucket.

Only a query that names an operation may use it, so the scope claim keeps the scope claim index.
On PostgreSQL it is partial (pending rows only: a claim or an ending never adds an entry), and
``operation IS NOT NULL`` (always true) keeps other queries off it. Elsewhere it is a plain index
led by the status, like the scope claim index. SQLite skip-scans only an index's leading
columns, never one after a column it has an equality for, so the scope claim is never read
through it (led by the operation, it was once ANALYZE had found a single operation in the table,
and the backlog was sorted; led by the scope, the choice of the scope whose turn it is walked
every other operation's pending row ahead of its own, 22 ms a claim with 19,000 of them). Not
partial there: with a partial index SQLite's claim statement, which moves rows out of
``pending``, took 0.31 ms instead of 0.07, and an unlimited drain lost a fifth. MariaDB and
MySQL have no partial indexes. Made here rather than declared in
``Job.Meta.indexes`` for the reason given in migration 0015.
"""

from django.db import migrations

NAME = "durable_jobs_operation_claim_idx"
ORDER = "scope, priority DESC, run_after, created_at, id"


def create_index(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor in ("mysql", "sqlite"):
        sql = f"CREATE INDEX {NAME} ON durable_jobs_job (status, operation, {ORDER})"
    else:
        sql = (
            f"CREATE INDEX {NAME} ON durable_jobs_job (operation, {ORDER})"
            " WHERE status = 'pending' AND operation IS NOT NULL"
        )
    schema_editor.execute(sql)


def drop_index(apps, schema_editor):
    on = " ON durable_jobs_job" if schema_editor.connection.vendor == "mysql" else ""
    schema_editor.execute(f"DROP INDEX {NAME}{on}")


class Migration(migrations.Migration):
    dependencies = [
        ("durable_jobs", "0017_flow_control"),
    ]

    operations = [
        migrations.RunPython(create_index, drop_index, atomic=False, elidable=False),
    ]
