"""Django settings for the worker benchmark (``python -m benchmarks.worker_latency``).

``DURABLE_JOBS_WORKER_BENCH_DB`` (sqlite, postgresql or mariadb) picks the database. Each database
is one of the benchmark's own, ``bench_worker_<db>`` (for SQLite a file under test-output/), dropped
and recreated by the benchmark, so it never touches the test suite's or another benchmark's data.
"""

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

REPO_ROOT = Path(__file__).resolve().parent.parent
OUTPUT_DIR = REPO_ROOT / "test-output"

BENCH_DB = os.environ.get("DURABLE_JOBS_WORKER_BENCH_DB", "sqlite").strip().lower() or "sqlite"
BENCH_DB_NAME = f"bench_worker_{BENCH_DB}"
SQLITE_PATH = OUTPUT_DIR / f"{BENCH_DB_NAME}.sqlite3"

if BENCH_DB == "sqlite":
    _db = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(SQLITE_PATH),
        "OPTIONS": {
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
    }
elif BENCH_DB == "postgresql":
    _db = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": BENCH_DB_NAME,
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": "127.0.0.1",
        "PORT": "5432",
    }
elif BENCH_DB == "mariadb":
    _db = {
        "ENGINE": "django.db.backends.mysql",
        "NAME": BENCH_DB_NAME,
        "USER": "root",
        "PASSWORD": "",
        "HOST": "127.0.0.1",
        "PORT": "3306",
        "OPTIONS": {"charset": "utf8mb4"},
    }
else:
    raise ImproperlyConfigured(
        f"DURABLE_JOBS_WORKER_BENCH_DB={BENCH_DB!r} is not supported; use sqlite, postgresql or "
        f"mariadb."
    )

DATABASES = {"default": _db}

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_durable_jobs",
    "benchmarks.benchapp",
]

SECRET_KEY = "django-durable-jobs-worker-benchmark-not-a-secret"
DEBUG = False  # DEBUG=True would keep every query in memory
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
