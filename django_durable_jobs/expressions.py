"""Database expressions the ownership assessment needs, per vendor.

Both agree with the Python side in ``models``: ``Utf8Sha256`` is the hex SHA-256 of the text's UTF-8
bytes, ``IsJson`` is true only for text that strict JSON (no NaN/Infinity) accepts.
"""

from __future__ import annotations

from django.db.models import BooleanField, Func
from django.db.models.functions import SHA256

PG_IS_JSON_FUNCTION = "durable_jobs_is_json"


class Utf8Sha256(SHA256):
    """SHA256 that needs no pgcrypto: PostgreSQL ≥ 11 has ``sha256(bytea)`` built in."""

    def as_postgresql(self, compiler, connection, **extra_context):
        return self.as_sql(
            compiler,
            connection,
            template="encode(sha256(convert_to(%(expressions)s, 'UTF8')), 'hex')",
            **extra_context,
        )


class IsJson(Func):
    """True when the text is valid JSON (NULL for NULL text)."""

    output_field = BooleanField()

    def as_sqlite(self, compiler, connection, **extra_context):
        return self.as_sql(compiler, connection, function="json_valid", **extra_context)

    def as_mysql(self, compiler, connection, **extra_context):
        return self.as_sql(compiler, connection, function="JSON_VALID", **extra_context)

    def as_postgresql(self, compiler, connection, **extra_context):
        # PostgreSQL 15 has no non-raising JSON check; migration 0004 installs this function.
        return self.as_sql(compiler, connection, function=PG_IS_JSON_FUNCTION, **extra_context)
