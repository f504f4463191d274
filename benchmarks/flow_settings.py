"""Django settings for the flow benchmark (``python -m benchmarks.flow``).

``DURABLE_JOBS_FLOW_BENCH_DB`` (sqlite, postgresql or mariadb) picks the database, one of the
benchmark's own (``bench_flow_<db>``, plus ``_<suffix>`` with
``DURABLE_JOBS_FLOW_BENCH_SUFFIX``), dropped and recreated by it.
"""

import os

from benchmarks.databases import database

BENCH_DB = os.environ.get("DURABLE_JOBS_FLOW_BENCH_DB", "sqlite").strip().lower() or "sqlite"
SUFFIX = os.environ.get("DURABLE_JOBS_FLOW_BENCH_SUFFIX", "")  # the smoke test's own database
NAME = f"bench_flow_{BENCH_DB}" + (f"_{SUFFIX}" if SUFFIX else "")

DATABASES = {"default": database(BENCH_DB, NAME, "DURABLE_JOBS_FLOW_BENCH_DB")}

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_durable_jobs",
    "benchmarks.flowapp",
]

SECRET_KEY = "django-durable-jobs-flow-benchmark-not-a-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
