"""``tests.settings_schedules`` plus the app of limited operations, for ``runjobs`` children.

A test whose workers run ``tests.worker.limited``'s operations sets
``DJANGO_SETTINGS_MODULE=tests.settings_limited`` (and, as for ``settings_schedules``,
``DURABLE_JOBS_TEST_SETTINGS`` to the JSON of the ``DURABLE_JOBS`` dict, e.g. scope quotas).
"""

from tests.settings_schedules import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.worker.limited"]  # noqa: F405
