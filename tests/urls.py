"""URLconf for the test suite: the admin, and the REST API once django_durable_jobs.api exists."""

from importlib.util import find_spec

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]

if find_spec("django_durable_jobs.api") is not None:
    from django_durable_jobs.api import api

    urlpatterns.append(path("jobs/api/", api.urls))

if find_spec("django_durable_jobs.api.metrics") is not None:
    from django_durable_jobs.api.metrics import metrics_view

    urlpatterns.append(path("jobs/metrics", metrics_view, name="durable-jobs-metrics"))
