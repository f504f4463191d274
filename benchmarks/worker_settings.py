"""Django settings for the worker benchmark (``python -m benchmarks.worker_latency``).

``DURABLE_JOBS_WORKER_BENCH_DB`` (sqlite, postgresql or mariadb) picks the database. Each database
is one of the benchmark's own, ``bench_worker_<db>`` (for SQLite a file under test-output/), dropped
and recreated by the benchmark, so it never touches the test suite's or another benchmark's data.
"""

import os

from benchmarks.databases import OUTPUT_DIR, database

BENCH_DB = os.environ.get("DURABLE_JOBS_WORKER_BENCH_DB", "sqlite").strip().lower() or "sqlite"
BENCH_DB_NAME = f"bench_worker_{BENCH_DB}"
SQLITE_PATH = OUTPUT_DIR / f"{BENCH_DB_NAME}.sqlite3"

DATABASES = {"default": database(BENCH_DB, BENCH_DB_NAME, "DURABLE_JOBS_WORKER_BENCH_DB")}

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_durable_jobs",
    "benchmarks.benchapp",
]
if os.environ.get("DURABLE_JOBS_BENCH_ASYNC") == "1":  # the async phase's workers only
    INSTALLED_APPS.append("benchmarks.asyncapp")

SECRET_KEY = "django-durable-jobs-worker-benchmark-not-a-secret"
DEBUG = False  # DEBUG=True would keep every query in memory
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
