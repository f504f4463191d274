"""Test settings plus ``DURABLE_JOBS`` from the environment, for ``runjobs`` children.

A test that starts workers with schedules sets ``DJANGO_SETTINGS_MODULE=tests.settings_schedules``
and ``DURABLE_JOBS_TEST_SETTINGS`` to the JSON of the ``DURABLE_JOBS`` dict they should see
(intervals in seconds, since JSON has no timedelta).
"""

import json
import os

from tests.settings import *  # noqa: F403

DURABLE_JOBS = json.loads(os.environ.get("DURABLE_JOBS_TEST_SETTINGS") or "{}")
