"""The admin, for the dashboard that ``python -m benchmarks.stats`` times."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
