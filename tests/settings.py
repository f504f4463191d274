"""
Django settings for the test suite.

The database is chosen by the environment variable DURABLE_JOBS_TEST_DB:
"sqlite" (default), "postgresql" or "mariadb". Subprocesses started by tests
(workers, racing clients, `runjobs`) also set DURABLE_JOBS_DB_NAME, the name
of the *test* database the pytest run created, so they open it directly
instead of the base database; see the `db_settings_env` fixture in conftest.py.
"""

import os
from pathlib import Path

import django
from django.core.exceptions import ImproperlyConfigured

REPO_ROOT = Path(__file__).resolve().parent.parent
TEST_OUTPUT_DIR = REPO_ROOT / "test-output"
os.makedirs(TEST_OUTPUT_DIR, exist_ok=True)

TEST_DB = os.environ.get("DURABLE_JOBS_TEST_DB", "sqlite").strip().lower() or "sqlite"
DB_NAME_OVERRIDE = os.environ.get("DURABLE_JOBS_DB_NAME") or None
# Lets several pytest runs share one machine without sharing test databases.
TEST_DB_SUFFIX = "".join(
    c for c in os.environ.get("DURABLE_JOBS_TEST_DB_SUFFIX", "") if c.isalnum()
)
TEST_DB_NAME = f"test_durable_jobs{'_' + TEST_DB_SUFFIX if TEST_DB_SUFFIX else ''}"

if TEST_DB == "sqlite":
    _default_db = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(TEST_OUTPUT_DIR / "durable_jobs.sqlite3"),
        "OPTIONS": {
            # Writers take the lock at BEGIN, so a fenced write never fails late on upgrade.
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
        "TEST": {
            # A file, not :memory:, so that separate OS processes open the same test database.
            "NAME": str(TEST_OUTPUT_DIR / f"{TEST_DB_NAME}.sqlite3"),
        },
    }
elif TEST_DB == "postgresql":
    _default_db = {
        "ENGINE": "tests.backends.postgresql",  # Django's, flushed faster (see there)
        "NAME": "postgres",
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": "127.0.0.1",
        "PORT": "5432",
        "TEST": {"NAME": TEST_DB_NAME},
    }
elif TEST_DB == "mariadb":
    _default_db = {
        "ENGINE": "django.db.backends.mysql",
        "NAME": "test",
        "USER": "root",
        "PASSWORD": "",
        "HOST": "127.0.0.1",
        "PORT": "3306",
        "OPTIONS": {"charset": "utf8mb4"},
        "TEST": {
            "NAME": TEST_DB_NAME,
            "CHARSET": "utf8mb4",
            "COLLATION": "utf8mb4_unicode_ci",
        },
    }
else:
    raise ImproperlyConfigured(
        f"DURABLE_JOBS_TEST_DB={TEST_DB!r} is not supported; use sqlite, postgresql or mariadb."
    )

if DB_NAME_OVERRIDE:
    # A subprocess started by a test: open the test database the parent run created.
    _default_db["NAME"] = DB_NAME_OVERRIDE
if TEST_DB != "sqlite" and os.environ.get("DURABLE_JOBS_DB_HOST"):
    # A worker in a network namespace of tests/proof/netns.py reaches the server through a
    # relay on its veth link, not on loopback.
    _default_db["HOST"] = os.environ["DURABLE_JOBS_DB_HOST"]
    _default_db["PORT"] = os.environ.get("DURABLE_JOBS_DB_PORT", _default_db["PORT"])

DATABASES = {"default": _default_db}

SECRET_KEY = "django-durable-jobs-tests-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.admin",
    "django.contrib.staticfiles",  # live_server serves the admin CSS to the browser test
    "django_durable_jobs",
    "tests.testapp",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

ROOT_URLCONF = "tests.urls"

USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "/static/"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Django 6 has django.tasks: run @task functions through this app's backend. Any queue name is
# allowed (an empty QUEUES list turns Django's queue check off).
if django.VERSION >= (6, 0):
    TASKS = {
        "default": {"BACKEND": "django_durable_jobs.backends.DurableJobsBackend", "QUEUES": []}
    }
