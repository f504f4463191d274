"""Install the PostgreSQL function behind ``expressions.IsJson`` (other databases have one)."""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION durable_jobs_is_json(value text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF value IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM value::jsonb;
    RETURN true;
EXCEPTION WHEN others THEN
    RETURN false;
END;
$$;
"""
DROP = "DROP FUNCTION IF EXISTS durable_jobs_is_json(text);"


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("durable_jobs", "0003_retry_index_by_status")]
    operations = [migrations.RunPython(create, drop, elidable=False)]
