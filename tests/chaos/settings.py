"""Settings of the chaos run's processes: ``tests.settings`` plus the run's schedule and history.

* ``DURABLE_JOBS`` comes from ``DURABLE_JOBS_TEST_SETTINGS`` (JSON), as in
  ``tests/settings_schedules.py``: the harness declares the run's schedule there;
* with ``DURABLE_JOBS_CHAOS_DIR`` set (the run's folder under ``test-output/chaos/``), the
  history of fenced writes (``django_durable_jobs.history``, DEBUG) is written there as JSON
  lines, one file per process (``tests/chaos/records.py``), and kept out of the worker's log.
"""

import json
import os

from tests.settings import *  # noqa: F403

DURABLE_JOBS = json.loads(os.environ.get("DURABLE_JOBS_TEST_SETTINGS") or "{}")

CHAOS_DIR = os.environ.get("DURABLE_JOBS_CHAOS_DIR")

if CHAOS_DIR:
    LOGGING = {
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {
            "history": {"()": "tests.chaos.records.JsonLinesHandler", "folder": CHAOS_DIR},
        },
        "loggers": {
            "django_durable_jobs.history": {
                "handlers": ["history"],
                "level": "DEBUG",
                "propagate": False,
            },
        },
    }
