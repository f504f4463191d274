"""Django settings for the terminal-rows benchmark (``python -m benchmarks``).

One process benchmarks one database engine; ``DURABLE_JOBS_BENCH_DB`` (sqlite, postgresql or
mariadb) picks it. Two databases of the benchmark's own, both dropped and recreated by it, so it
never touches the test suite's data:

* ``default`` — ``bench_durable_jobs``: phase B, grown to ``--terminal`` terminal rows;
* ``small`` — ``bench_durable_jobs_small``: phase A, 100 terminal rows.
"""

import os

from benchmarks.databases import database

# ``python -m benchmarks.stats`` names a database of its own, so the two can run side by side.
BENCH_DB_NAME = os.environ.get("DURABLE_JOBS_BENCH_DB_NAME") or "bench_durable_jobs"
SMALL_DB_NAME = "bench_durable_jobs_small"

BENCH_DB = os.environ.get("DURABLE_JOBS_BENCH_DB", "sqlite").strip().lower() or "sqlite"

_db = database(BENCH_DB, BENCH_DB_NAME, "DURABLE_JOBS_BENCH_DB")
DATABASES = {
    "default": _db,
    "small": database(BENCH_DB, SMALL_DB_NAME, "DURABLE_JOBS_BENCH_DB"),
}

INSTALLED_APPS = [
    "django.contrib.admin",  # the dashboard, timed by ``python -m benchmarks.stats``
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_durable_jobs",
]
ROOT_URLCONF = "benchmarks.urls"
STATIC_URL = "/static/"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

SECRET_KEY = "django-durable-jobs-benchmark-not-a-secret"
DEBUG = False  # DEBUG=True would keep every query in memory
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
