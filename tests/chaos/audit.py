"""The database's side of the chaos run's history: triggers that audit the job table.

:func:`install` creates the table ``chaos_audit`` (raw SQL, not a model) and AFTER INSERT and
AFTER UPDATE triggers on ``durable_jobs_job`` that append, for every row written: the job id,
the old and new epoch, owner and status, whether a result was present before and after, and the
database's own clock as seconds since the epoch (PostgreSQL ``clock_timestamp()``, MariaDB
``SYSDATE(6)``, SQLite ``strftime('%Y-%m-%d %H:%M:%f','now')``). ``seq`` orders the rows; the
changes to one job are in the order the database applied them (each holds the row's lock).
:func:`remove` drops all of it again.
"""

from __future__ import annotations

from django.db import connections

TABLE = "chaos_audit"
JOB_TABLE = "durable_jobs_job"
COLUMNS = (
    "job_id, old_epoch, new_epoch, old_owner, new_owner, old_status, new_status, "
    "old_result, new_result, db_at"
)
# The database's clock, in seconds since the epoch, per vendor.
CLOCK = {
    "postgresql": "extract(epoch from clock_timestamp())",
    "mysql": "UNIX_TIMESTAMP(SYSDATE(6))",
    "sqlite": "(julianday(strftime('%Y-%m-%d %H:%M:%f','now')) - 2440587.5) * 86400.0",
}
# How much coarser than a microsecond that clock is (SQLite keeps milliseconds).
CLOCK_SLACK = {"postgresql": 0.0, "mysql": 0.0, "sqlite": 0.002}


def _values(vendor: str, kind: str) -> str:
    """Return the VALUES of the audit row a trigger of ``kind`` (INSERT or UPDATE) appends."""
    job_id = "NEW.id::text" if vendor == "postgresql" else "NEW.id"
    if kind == "INSERT":
        old = ("NULL", "NULL", "NULL", "NULL")
    else:
        old = ("OLD.fencing_epoch", "OLD.owner_id", "OLD.status", "OLD.result IS NOT NULL")
    return (
        f"{job_id}, {old[0]}, NEW.fencing_epoch, {old[1]}, NEW.owner_id, {old[2]}, "
        f"NEW.status, {old[3]}, NEW.result IS NOT NULL, {CLOCK[vendor]}"
    )


def statements(vendor: str) -> list[str]:
    """Return the SQL that creates the audit table and its triggers on ``vendor``."""
    insert = f"INSERT INTO {TABLE} ({COLUMNS}) VALUES"
    if vendor == "postgresql":
        return [
            f"CREATE TABLE {TABLE} (seq bigserial PRIMARY KEY, job_id text NOT NULL, "
            "old_epoch bigint, new_epoch bigint, old_owner text, new_owner text, "
            "old_status text, new_status text, old_result boolean, new_result boolean, "
            "db_at double precision NOT NULL)",
            f"CREATE FUNCTION {TABLE}_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF TG_OP = 'INSERT' THEN {insert} ({_values(vendor, 'INSERT')}); "
            f"ELSE {insert} ({_values(vendor, 'UPDATE')}); END IF; RETURN NULL; END $$",
            f"CREATE TRIGGER {TABLE}_insert AFTER INSERT ON {JOB_TABLE} "
            f"FOR EACH ROW EXECUTE FUNCTION {TABLE}_row()",
            f"CREATE TRIGGER {TABLE}_update AFTER UPDATE ON {JOB_TABLE} "
            f"FOR EACH ROW EXECUTE FUNCTION {TABLE}_row()",
        ]
    if vendor == "mysql":
        return [
            f"CREATE TABLE {TABLE} (seq bigint AUTO_INCREMENT PRIMARY KEY, "
            "job_id varchar(64) NOT NULL, old_epoch bigint, new_epoch bigint, "
            "old_owner varchar(64), new_owner varchar(64), old_status varchar(32), "
            "new_status varchar(32), old_result bool, new_result bool, "
            "db_at decimal(20, 6) NOT NULL) ENGINE=InnoDB",
            f"CREATE TRIGGER {TABLE}_insert AFTER INSERT ON {JOB_TABLE} FOR EACH ROW "
            f"{insert} ({_values(vendor, 'INSERT')})",
            f"CREATE TRIGGER {TABLE}_update AFTER UPDATE ON {JOB_TABLE} FOR EACH ROW "
            f"{insert} ({_values(vendor, 'UPDATE')})",
        ]
    return [
        f"CREATE TABLE {TABLE} (seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id text NOT NULL, "
        "old_epoch integer, new_epoch integer, old_owner text, new_owner text, "
        "old_status text, new_status text, old_result integer, new_result integer, "
        "db_at real NOT NULL)",
        f"CREATE TRIGGER {TABLE}_insert AFTER INSERT ON {JOB_TABLE} BEGIN "
        f"{insert} ({_values(vendor, 'INSERT')}); END",
        f"CREATE TRIGGER {TABLE}_update AFTER UPDATE ON {JOB_TABLE} BEGIN "
        f"{insert} ({_values(vendor, 'UPDATE')}); END",
    ]


def install(using: str = "default") -> None:
    """Create the audit table and its triggers (after removing any left by an earlier run)."""
    remove(using)
    vendor = connections[using].vendor
    with connections[using].cursor() as cursor:
        for sql in statements(vendor):
            cursor.execute(sql)


def remove(using: str = "default") -> None:
    """Drop the triggers, the trigger function and the audit table, where they exist."""
    vendor = connections[using].vendor
    drops = [f"DROP TRIGGER IF EXISTS {TABLE}_{kind}" for kind in ("insert", "update")]
    if vendor == "postgresql":
        drops = [f"{sql} ON {JOB_TABLE}" for sql in drops]
        drops.append(f"DROP FUNCTION IF EXISTS {TABLE}_row()")
    drops.append(f"DROP TABLE IF EXISTS {TABLE}")
    with connections[using].cursor() as cursor:
        for sql in drops:
            cursor.execute(sql)
