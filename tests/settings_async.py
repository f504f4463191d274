"""``tests.settings_schedules`` plus the app of ``async def`` operations, for ``runjobs`` children.

A test whose workers run ``tests.worker.asyncops``'s operations sets
``DJANGO_SETTINGS_MODULE=tests.settings_async``.
"""

from tests.settings_schedules import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "tests.worker.asyncops"]  # noqa: F405
