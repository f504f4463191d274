"""Django settings of the side-by-side benchmark's dj-queue processes.

``BENCH_CMP_DB`` and ``BENCH_CMP_DB_NAME`` pick the database (``bench_cmp_djqueue_<db>``), as for
ours. dj-queue runs with its own defaults (one worker process of three threads polling every
0.1 s, LISTEN/NOTIFY on PostgreSQL, a dispatcher, finished jobs kept); only the connections are
persistent (``CONN_MAX_AGE = None``), as for every system of the side-by-side run.
"""

import os

from benchmarks.databases import database

BENCH_DB = os.environ.get("BENCH_CMP_DB", "sqlite")
_db = database(BENCH_DB, os.environ.get("BENCH_CMP_DB_NAME", "bench_cmp_djqueue"), "BENCH_CMP_DB")
_db["CONN_MAX_AGE"] = None
DATABASES = {"default": _db}
DATABASE_ROUTERS = ["dj_queue.routers.DjQueueRouter"]

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "dj_queue",
]

TASKS = {"default": {"BACKEND": "dj_queue.backend.DjQueueBackend", "QUEUES": [], "OPTIONS": {}}}

SECRET_KEY = "django-durable-jobs-side-by-side-benchmark-not-a-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
