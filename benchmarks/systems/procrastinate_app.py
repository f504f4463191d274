"""The Procrastinate app of the side-by-side benchmark: one no-op task, no Django.

Workers start as ``python -m procrastinate --app=benchmarks.systems.procrastinate_app.app worker``;
``BENCH_CMP_PROCRASTINATE_DSN`` is the libpq connection string of ``bench_cmp_procrastinate_<db>``.
"""

from __future__ import annotations

import os
import time

from procrastinate import App, JobContext, PsycopgConnector

STARTED_TABLE = "bench_cmp_started"

app = App(connector=PsycopgConnector(conninfo=os.environ.get("BENCH_CMP_PROCRASTINATE_DSN", "")))


@app.task(name="bench.noop", pass_context=True)
async def noop(context: JobContext, record: bool = False, **payload: object) -> None:
    """Do nothing; with ``record``, store when it started (Unix time) for the latency figures.

    Procrastinate keeps no return values, so the start time goes into a table of the benchmark's
    own. The task is ``async`` because Procrastinate's concurrency is asyncio's: a sync task would
    run in a thread of ``sync_to_async`` instead.
    """
    started = time.time()
    if record:
        await context.app.connector.execute_query_async(
            f"INSERT INTO {STARTED_TABLE} (job_id, started) VALUES (%(job_id)s, %(started)s)",
            job_id=context.job.id,
            started=started,
        )
