"""A paginator for the admin's big tables: no ``COUNT(*)`` over a million rows."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.db import connections
from django.utils.functional import cached_property


class EstimatedCountPaginator(Paginator):
    """A paginator that does not ``COUNT(*)`` a whole big table on PostgreSQL.

    For an unfiltered queryset on PostgreSQL it counts at most ``exact_below`` rows (a bounded
    subquery); past that it uses the planner's estimate (``pg_class.reltuples``). A filtered
    queryset, or any other database, gets the exact count.
    """

    exact_below = 10_000

    @cached_property
    def count(self) -> int:
        qs = self.object_list
        query = getattr(qs, "query", None)
        if query is None or query.where or getattr(qs, "db", None) is None:
            return super().count
        connection = connections[qs.db]
        if connection.vendor != "postgresql":
            return super().count
        table = qs.model._base_manager.using(qs.db).order_by().values("pk")
        bounded = table[: self.exact_below + 1].count()
        if bounded <= self.exact_below:
            return bounded
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                [qs.model._meta.db_table],
            )
            row = cursor.fetchone()
        estimate = int(row[0]) if row and row[0] is not None else -1
        return max(estimate, bounded)
