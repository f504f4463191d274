"""Django settings of the side-by-side benchmark's django-durable-jobs processes.

The parent process sets ``BENCH_CMP_DB`` (sqlite, postgresql or mariadb) and ``BENCH_CMP_DB_NAME``
(``bench_cmp_ours_<db>[_<suffix>]``, dropped and recreated by the benchmark). Everything else is
Django's and the app's defaults: the worker is benchmarked as a project would run it.
"""

import os

from benchmarks.databases import database

BENCH_DB = os.environ.get("BENCH_CMP_DB", "sqlite")
DATABASES = {
    "default": database(
        BENCH_DB, os.environ.get("BENCH_CMP_DB_NAME", "bench_cmp_ours"), "BENCH_CMP_DB"
    )
}

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_durable_jobs",
    "benchmarks.benchapp",
]

SECRET_KEY = "django-durable-jobs-side-by-side-benchmark-not-a-secret"
DEBUG = False  # DEBUG=True would keep every query in memory
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
