"""On Django 5.2 the tasks backend says it needs Django 6; the rest of the app works without it."""

from __future__ import annotations

import importlib

import django
import pytest


@pytest.mark.skipif(django.VERSION >= (6, 0), reason="Django 6 has django.tasks")
def test_importing_the_backend_on_django_5_explains_what_it_needs():
    with pytest.raises(ImportError, match=r"needs Django 6\.0 or newer") as caught:
        importlib.import_module("django_durable_jobs.backends")
    assert "submit()" in str(caught.value)


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks needs Django 6")
def test_importing_the_backend_on_django_6_works():
    module = importlib.import_module("django_durable_jobs.backends")
    assert module.DurableJobsBackend.supports_get_result
