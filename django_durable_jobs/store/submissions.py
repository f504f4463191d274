"""Former home of the submitting room, now :mod:`.submitting`; these names moved there.

Kept only so that modules converted on other branches (``claims.py``, ``batches.py``,
``django_durable_jobs.submission``) import while the branches merge; import from
``django_durable_jobs.store.submitting`` instead.
"""

from .submitting import MAX_SUBMISSIONS, listed

__all__ = ["MAX_SUBMISSIONS", "listed"]
