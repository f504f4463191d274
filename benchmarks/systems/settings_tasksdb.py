"""Django settings of the side-by-side benchmark's django-tasks-db processes.

``BENCH_CMP_DB`` and ``BENCH_CMP_DB_NAME`` pick the database (``bench_cmp_tasksdb_<db>``), as for
ours. ``BENCH_CMP_CONN_MAX_AGE`` is ``0`` (Django's default: ``db_worker`` then opens a new
connection for every task) or ``none`` (persistent connections, ``CONN_MAX_AGE = None``).
"""

import os

from benchmarks.databases import database

BENCH_DB = os.environ.get("BENCH_CMP_DB", "sqlite")
_db = database(BENCH_DB, os.environ.get("BENCH_CMP_DB_NAME", "bench_cmp_tasksdb"), "BENCH_CMP_DB")
_max_age = os.environ.get("BENCH_CMP_CONN_MAX_AGE", "0").strip().lower()
_db["CONN_MAX_AGE"] = None if _max_age == "none" else int(_max_age)
DATABASES = {"default": _db}

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django_tasks_db",
]

TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}

SECRET_KEY = "django-durable-jobs-side-by-side-benchmark-not-a-secret"
DEBUG = False  # also keeps db_worker's autoreloader off (its --reload defaults to DEBUG)
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
