"""Deprecated home of the hand-compiled job-row statements: they live in ``store/sql/``.

Kept only so modules not yet moved (``enqueue_sql.py``) still import ``load_job`` from here.
"""

from .sql.rows import load_job

__all__ = ["load_job"]
