from django.contrib import admin
from django.urls import path

from django_durable_jobs.api import api
from django_durable_jobs.api.metrics import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("jobs/api/", api.urls),
    # Prometheus: the job table's gauges (a bearer token with view_job); docs/metrics.md
    path("jobs/metrics", metrics_view, name="durable-jobs-metrics"),
]
