"""A paginator for the admin's big tables: no ``COUNT(*)`` over a million rows."""

from __future__ import annotations

import json

from django.core.paginator import Paginator
from django.db import connections
from django.utils.functional import cached_property


class EstimatedCountPaginator(Paginator):
    """A paginator that does not ``COUNT(*)`` a whole big table on PostgreSQL.

    On PostgreSQL it counts at most ``exact_below`` rows (a bounded subquery); past that it
    uses the planner's estimate: ``pg_class.reltuples`` for an unfiltered queryset, the row
    estimate of the filtered query's plan otherwise (the job list always has a condition: it
    hides completed scheduled jobs by default). Other databases get the exact count.
    """

    exact_below = 10_000

    @cached_property
    def count(self) -> int:
        qs = self.object_list
        query = getattr(qs, "query", None)
        if query is None or getattr(qs, "db", None) is None:
            return super().count
        connection = connections[qs.db]
        if connection.vendor != "postgresql":
            return super().count
        rows = qs.order_by().values("pk")
        bounded = rows[: self.exact_below + 1].count()
        if bounded <= self.exact_below:
            return bounded
        with connection.cursor() as cursor:
            if query.where:
                sql, params = rows.query.sql_with_params()
                cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
                plan = cursor.fetchone()[0]
                plan = json.loads(plan) if isinstance(plan, str) else plan
                return max(int(plan[0]["Plan"]["Plan Rows"]), bounded)
            cursor.execute(
                "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                [qs.model._meta.db_table],
            )
            row = cursor.fetchone()
        estimate = int(row[0]) if row and row[0] is not None else -1
        return max(estimate, bounded)
