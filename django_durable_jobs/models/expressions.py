"""Database expressions the ownership assessment needs, per vendor.

``Utf8Sha256`` agrees with ``vocabulary.proposal_sha256``: the hex SHA-256 of the text's UTF-8
bytes. No JSON check is done in SQL: each database's has its own limits (MariaDB's ``JSON_VALID``
gives up at depth 32), so the ownership assessment reads the ``proposal_checked`` flag the store
sets instead. (The PostgreSQL function ``durable_jobs_is_json`` that migration 0004 installed for
an earlier JSON check stays installed, unused: migrations only add.)
"""

from __future__ import annotations

from django.db.models.functions import SHA256


class Utf8Sha256(SHA256):
    """SHA256 that needs no pgcrypto: PostgreSQL ≥ 11 has ``sha256(bytea)`` built in."""

    def as_postgresql(self, compiler, connection, **extra_context):
        return self.as_sql(
            compiler,
            connection,
            template="encode(sha256(convert_to(%(expressions)s, 'UTF8')), 'hex')",
            **extra_context,
        )
