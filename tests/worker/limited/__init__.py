"""An app of capacity-limited no-op operations, installed only in the workers that need it.

``tests/settings_limited.py`` adds it to ``INSTALLED_APPS``, so its ``ready()`` registers the
operations in those ``runjobs`` children only; the test process registers them for its tests
with ``registered()``. Registered everywhere, a limited operation would change every claim (the
limited pass), which other tests' statement counts would see.
"""
