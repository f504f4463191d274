"""Django tasks (``@task``, Django 6) with flow-control options, for tests/flow.

The task functions are defined at module level (Django requires it); ``keyed`` and
``unique`` are declared here; the declaration tests build tasks with bad options from
``bare`` themselves (and unregister them).
"""

from __future__ import annotations

from django.tasks import task


def _provider(provider, customer, n=0):
    return provider


def _customer(provider, customer, n=0):
    return customer


@task(
    rate_limit="10/s",
    rate_key=_provider,
    max_running_per_key=1,
    concurrency_key=_customer,
)
def keyed(provider, customer, n=0):
    return n


@task(unique_while="active")
def unique(n):
    return n


def bare(n=0):
    return n
