"""The admin alone, so that the admin tests do not depend on other URLconfs being importable."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
