"""Benchmarks for django_durable_jobs; run with ``python -m benchmarks`` (or ``make bench``).

See docs/benchmarks.md for what is measured and the figures of the last run.
"""
