"""No-op jobs for the worker benchmarks: ``bench.noop`` for ours, ``tasks.noop`` for django-tasks-db."""
