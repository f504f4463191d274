from django.contrib import admin
from django.urls import path

from django_durable_jobs.api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("jobs/api/", api.urls),
]
