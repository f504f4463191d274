"""The router mounted in a host's own NinjaAPI: same endpoints, auth, JSON errors and transactions.

This module is also the URLconf of its tests (``ROOT_URLCONF`` is switched to it).
"""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.test import Client
from django.urls import path
from ninja import NinjaAPI

from django_durable_jobs.api import install_error_handlers, non_atomic_urls, router
from django_durable_jobs.models import Job
from tests.api.support import OP, refused
from tests.support import db_state

host_api = NinjaAPI(urls_namespace="host_api_tests")
install_error_handlers(host_api)
host_api.add_router("/durable/", router)
_patterns, _app, _namespace = host_api.urls
urlpatterns = [path("host/", (non_atomic_urls(_patterns), _app, _namespace))]

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls(__name__),
]


def _client(token: str | None = None) -> tuple[Client, dict]:
    return Client(), ({"Authorization": f"Bearer {token}"} if token else {})


def test_the_router_works_inside_a_host_api_under_atomic_requests(token, red, monkeypatch):
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    client, headers = _client(token)
    response = client.post(
        "/host/durable/jobs",
        {"operation": OP, "payload": {"n": 1}},
        content_type="application/json",
        headers=headers,
    )
    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])
    assert job.scope == "red"
    listed = client.get("/host/durable/jobs", headers=headers).json()["items"]
    assert [item["id"] for item in listed] == [str(job.pk)]


def test_host_api_refusals_keep_the_json_shape(token, red):
    client, headers = _client(token)
    before = db_state()
    refused(
        client.get(f"/host/durable/jobs/{uuid.uuid4()}", headers=headers),
        404,
        "E_JOB_NOT_FOUND",
        before,
    )
    refused(
        client.get("/host/durable/jobs/nope", headers=headers), 422, "E_JOB_INPUT_INVALID", before
    )
    refused(client.get("/host/durable/jobs"), 401, "E_API_UNAUTHENTICATED", before)


def test_the_ready_api_is_not_mounted_in_this_urlconf(token):
    client, headers = _client(token)
    assert client.get("/jobs/api/jobs", headers=headers).status_code == 404
