"""Every error of the REST API is ``{"code", "message"}`` JSON, with DEBUG off and on.

404 (an unknown job, and a path under the mount point that names no endpoint), 405 (with
``Allow``), 413, 422, 429 (``Retry-After`` from ``CapacityReached.retry_after``) and 500 (an
unexpected exception: logged with its traceback, never shown). Each refusal leaves the database
as it was. The ready ``api`` and a host's own ``NinjaAPI`` (with ``install_error_handlers`` and
``json_error_urls``) are both checked.

This module is also the URLconf of its tests.
"""

from __future__ import annotations

import logging
import uuid

import pytest
from django.test import Client, override_settings
from django.urls import path
from ninja import NinjaAPI

from django_durable_jobs.api import api as ready_api
from django_durable_jobs.api import (
    install_error_handlers,
    json_error_urls,
    non_atomic_urls,
    router,
)
from django_durable_jobs.api.errors import INTERNAL_MESSAGE
from django_durable_jobs.rules.errors import CapacityReached
from django_durable_jobs.store import DurableJobStore
from tests.api.support import BASE, OP, Api, refused
from tests.support import db_state, submission

host_api = NinjaAPI(urls_namespace="host_error_shapes_tests")
install_error_handlers(host_api)
host_api.add_router("/durable/", router)
_patterns, _app, _namespace = host_api.urls
urlpatterns = [
    path("jobs/api/", ready_api.urls),
    path("host/", (non_atomic_urls(json_error_urls(_patterns)), _app, _namespace)),
]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls(__name__)]

LEAKS = ("Traceback", "RuntimeError", "a secret detail", 'File "', "<html", "<!DOCTYPE")


@pytest.fixture(params=[False, True], ids=["debug-off", "debug-on"])
def debug(request):
    with override_settings(DEBUG=request.param):
        yield request.param


@pytest.fixture
def quiet(token) -> Api:
    """A token client that answers a 500 instead of re-raising the view's exception."""
    return Api(token, Client(raise_request_exception=False))


def _json(response) -> None:
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    text = response.content.decode()
    assert not any(leak in text for leak in LEAKS), text


# -- 404 ------------------------------------------------------------------------------------------


def test_unknown_job_is_a_json_404(api, debug):
    before = db_state()
    for response in (
        api.get(f"/jobs/{uuid.uuid4()}"),
        api.get(f"/jobs/{uuid.uuid4()}/attempts"),
        api.post(f"/jobs/{uuid.uuid4()}/cancel"),
    ):
        refused(response, 404, "E_JOB_NOT_FOUND", before)
        _json(response)


@pytest.mark.parametrize(
    "url",
    [
        "/nothing",
        "/jobs/",  # Django's APPEND_SLASH never redirects inside the API
        f"/jobs/{uuid.uuid4()}/nothing",
        "/jobs/x/y/z",
        "/",  # ninja's own root view raises Http404
        "/%00",
    ],
)
def test_unmatched_path_under_the_mount_point_is_a_json_404(api, debug, url):
    before = db_state()
    for response in (
        api.client.get(BASE + url, headers=api.headers),
        api.client.get(BASE + url),  # anonymous: the same 404, no login page
        api.client.post(BASE + url, "{}", content_type="application/json", headers=api.headers),
        api.client.delete(BASE + url),
    ):
        body = refused(response, 404, "E_API_NOT_FOUND", before)
        assert "docs" in body["message"]
        _json(response)


# -- 405 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "url", "allowed"),
    [
        ("delete", "/jobs", {"GET", "POST"}),
        ("put", "/jobs", {"GET", "POST"}),
        ("patch", "/jobs/{id}", {"GET"}),
        ("delete", "/jobs/{id}", {"GET"}),
        ("get", "/jobs/{id}/cancel", {"POST"}),
        ("put", "/jobs/{id}/retry", {"POST"}),
        ("post", "/jobs/{id}/attempts", {"GET"}),
    ],
)
def test_method_not_served_is_a_json_405_with_allow(api, red, debug, method, url, allowed):
    job = red.defer(OP, submission())
    before = db_state()
    response = getattr(api.client, method)(
        BASE + url.format(id=job.pk), content_type="application/json", headers=api.headers
    )
    body = refused(response, 405, "E_API_METHOD", before)
    assert {m.strip() for m in response["Allow"].split(",")} == allowed
    assert all(m in body["message"] for m in allowed)
    _json(response)


def test_405_needs_no_authentication_and_says_the_same(debug):
    before = db_state()
    response = Client().delete(BASE + "/jobs")
    refused(response, 405, "E_API_METHOD", before)
    _json(response)


# -- 401, 413, 422 --------------------------------------------------------------------------------


def test_401_413_and_422_are_json_with_debug_on_and_off(api, debug):
    before = db_state()
    response = Client().get(BASE + "/jobs")
    refused(response, 401, "E_API_UNAUTHENTICATED", before)
    _json(response)
    with override_settings(DURABLE_JOBS={"MAX_PAYLOAD_BYTES": 64}):
        response = api.post("/jobs", {"operation": OP, "payload": {"x": "y" * 100}})
    refused(response, 413, "E_JOB_INPUT_INVALID", before)
    _json(response)
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=100):
        response = api.post("/jobs", {"operation": OP, "payload": {"x": "y" * 200}})
    refused(response, 413, "E_JOB_INPUT_INVALID", before)
    _json(response)
    for response in (
        api.post("/jobs", raw="{not json"),
        api.post("/jobs", {"payload": {}}),
        api.get("/jobs/not-a-uuid"),
        api.get("/jobs", limit="many"),
    ):
        if response.status_code == 404:  # a path converter may refuse a malformed id first
            refused(response, 404, "E_API_NOT_FOUND", before)
        else:
            refused(response, 422, "E_JOB_INPUT_INVALID", before)
        _json(response)


# -- 429 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("retry_after", "header"), [(2.3, "3"), (7, "7"), (0.01, "1"), (None, "5")]
)
def test_capacity_reached_is_429_with_retry_after_rounded_up(
    api, debug, monkeypatch, retry_after, header
):
    def full(self, *args, **kwargs):
        raise CapacityReached("Scope 'red' is full; try later.", retry_after=retry_after)

    monkeypatch.setattr(DurableJobStore, "defer", full)
    before = db_state()
    response = api.post("/jobs", {"operation": OP, "payload": {"n": 1}})
    body = refused(response, 429, "E_JOB_CAPACITY_REACHED", before)
    assert body["message"] == "Scope 'red' is full; try later."
    assert response["Retry-After"] == header
    _json(response)


# -- 500 ------------------------------------------------------------------------------------------


def _boom(*args, **kwargs):
    raise RuntimeError("a secret detail: password=hunter2")


def _logged_500(caplog) -> logging.LogRecord:
    records = [r for r in caplog.records if r.name == "django.request" and r.levelno >= 40]
    assert len(records) == 1, [r.getMessage() for r in caplog.records]
    record = records[0]
    assert record.exc_info is not None and record.exc_info[0] is RuntimeError
    assert "a secret detail" in str(record.exc_info[1])
    assert record.status_code == 500
    return record


def _internal(response, before: str) -> None:
    body = refused(response, 500, "E_API_INTERNAL", before)
    assert body["message"] == INTERNAL_MESSAGE
    _json(response)


@pytest.mark.parametrize(
    ("method", "url", "target"),
    [
        ("get", "/jobs/{id}", "get"),
        ("get", "/jobs", "page"),
        ("post", "/jobs", "defer"),
        ("post", "/jobs/{id}/cancel", "request_cancel_result"),
    ],
)
def test_unexpected_exception_in_a_view_is_a_logged_json_500(
    quiet, red, debug, monkeypatch, caplog, method, url, target
):
    job = red.defer(OP, submission())
    monkeypatch.setattr(DurableJobStore, target, _boom)
    before = db_state()
    with caplog.at_level(logging.ERROR, logger="django.request"):
        if method == "get":
            response = quiet.get(url.format(id=job.pk))
        else:
            response = quiet.post(url.format(id=job.pk), {"operation": OP, "payload": {}})
    _internal(response, before)
    record = _logged_500(caplog)
    assert record.getMessage() == f"Internal Server Error: {BASE}{url.format(id=job.pk)}"


def test_unexpected_exception_outside_the_view_is_a_logged_json_500(
    quiet, debug, monkeypatch, caplog
):
    """Authentication runs before the view: ninja hands its exception to the API's handlers."""
    monkeypatch.setattr("django_durable_jobs.api.auth.authenticate_token", _boom)
    before = db_state()
    with caplog.at_level(logging.ERROR, logger="django.request"):
        response = quiet.get("/jobs")
    _internal(response, before)
    _logged_500(caplog)


def test_unexpected_exception_in_a_non_ninja_view_is_a_logged_json_500(
    quiet, debug, monkeypatch, caplog
):
    """The OpenAPI document is a plain Django view of the API: the URL wrapper answers it."""
    monkeypatch.setattr(type(ready_api), "get_openapi_schema", _boom)
    before = db_state()
    with caplog.at_level(logging.ERROR, logger="django.request"):
        response = quiet.get("/openapi.json")
    _internal(response, before)
    _logged_500(caplog)


def test_a_500_reaches_got_request_exception_like_djangos_own(token, monkeypatch):
    """Error trackers listen to the signal; Django's test client re-raises what it carried."""
    monkeypatch.setattr(DurableJobStore, "get", _boom)
    with pytest.raises(RuntimeError, match="a secret detail"):
        Api(token).get(f"/jobs/{uuid.uuid4()}")


# -- a host's own NinjaAPI ------------------------------------------------------------------------


def test_a_host_api_answers_404_405_and_500_as_json(token, debug, monkeypatch, caplog):
    client = Client(raise_request_exception=False)
    headers = {"Authorization": f"Bearer {token}"}
    before = db_state()
    response = client.get("/host/durable/nothing", headers=headers)
    refused(response, 404, "E_API_NOT_FOUND", before)
    response = client.delete("/host/durable/jobs", headers=headers)
    refused(response, 405, "E_API_METHOD", before)
    assert response["Allow"] == "GET, POST"
    monkeypatch.setattr(DurableJobStore, "get", _boom)
    with caplog.at_level(logging.ERROR, logger="django.request"):
        response = client.get(f"/host/durable/jobs/{uuid.uuid4()}", headers=headers)
    _internal(response, before)
    _logged_500(caplog)
