"""Django settings for the terminal-rows benchmark (``python -m benchmarks``).

One process benchmarks one database engine; ``DURABLE_JOBS_BENCH_DB`` (sqlite, postgresql or
mariadb) picks it. Two databases of the benchmark's own, both dropped and recreated by it, so it
never touches the test suite's data:

* ``default`` — ``bench_durable_jobs``: phase B, grown to ``--terminal`` terminal rows;
* ``small`` — ``bench_durable_jobs_small``: phase A, 100 terminal rows.
"""

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

REPO_ROOT = Path(__file__).resolve().parent.parent
OUTPUT_DIR = REPO_ROOT / "test-output"
BENCH_DB_NAME = "bench_durable_jobs"
SMALL_DB_NAME = "bench_durable_jobs_small"

BENCH_DB = os.environ.get("DURABLE_JOBS_BENCH_DB", "sqlite").strip().lower() or "sqlite"

if BENCH_DB == "sqlite":
    _db = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(OUTPUT_DIR / f"{BENCH_DB_NAME}.sqlite3"),
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
        f"DURABLE_JOBS_BENCH_DB={BENCH_DB!r} is not supported; use sqlite, postgresql or mariadb."
    )

_small_name = (
    SMALL_DB_NAME if BENCH_DB != "sqlite" else str(OUTPUT_DIR / f"{SMALL_DB_NAME}.sqlite3")
)
DATABASES = {"default": _db, "small": dict(_db, NAME=_small_name)}

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_durable_jobs",
]

SECRET_KEY = "django-durable-jobs-benchmark-not-a-secret"
DEBUG = False  # DEBUG=True would keep every query in memory
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
