"""PostgreSQL for the test suite: Django's own backend, whose test flush deletes instead of truncating.

``TransactionTestCase`` (every ``django_db(transaction=True)`` test) empties every table after the
test with Django's ``flush``, which on PostgreSQL is one ``TRUNCATE`` of all of them. A TRUNCATE
gives each table and index a new file, so it costs the same however few rows there are: about
half a second for this app's tables on a loaded 2-core machine, against a few milliseconds for
``DELETE``, over some 2,500 such tests per run. Everything else is Django's backend unchanged; the
package's code never calls ``sql_flush``.
"""

from __future__ import annotations

from django.db.backends.postgresql import base, operations


class DatabaseOperations(operations.DatabaseOperations):
    def sql_flush(
        self,
        style: object,
        tables: list[str],
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        if not tables or reset_sequences:  # a sequence reset needs TRUNCATE's RESTART IDENTITY
            return super().sql_flush(
                style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        # ``execute_sql_flush`` runs these in one transaction: the foreign keys (Django's are
        # deferrable) are checked at its commit, when every table is empty.
        deletes = [f"DELETE FROM {self.quote_name(table)}" for table in tables]
        return ["SET CONSTRAINTS ALL DEFERRED", *deletes]


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
