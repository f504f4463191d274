"""The REST API's OpenAPI document and a bounded schemathesis run against the live schema.

Proves: the served document is valid OpenAPI 3 and lists every endpoint with its error responses;
property-based requests generated from it (valid and invalid ones, authenticated with a bearer
token, over the Django WSGI app) never get a 5xx and never a response that breaks the schema.
"""

from __future__ import annotations

import json
import re

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode, checks

from tests.api.support import OP
from tests.support import submission

pytestmark = pytest.mark.django_db(transaction=True)

EXPECTED = {
    ("/jobs/api/jobs", "post"): {"200", "201", "401", "403", "404", "409", "413", "422", "429"},
    ("/jobs/api/jobs", "get"): {"200", "401", "403", "404", "422"},
    ("/jobs/api/jobs/stats", "get"): {"200", "401", "403", "404", "422"},
    ("/jobs/api/jobs/{job_id}", "get"): {"200", "401", "403", "404", "422"},
    ("/jobs/api/jobs/{job_id}/attempts", "get"): {"200", "401", "403", "404", "422"},
    ("/jobs/api/jobs/{job_id}/cancel", "post"): {"200", "401", "403", "404", "409", "422"},
    ("/jobs/api/jobs/{job_id}/retry", "post"): {"200", "401", "403", "404", "409", "422"},
    ("/jobs/api/schedules", "get"): {"200", "401", "403", "404", "422"},
    ("/jobs/api/schedules/{name}", "get"): {"200", "401", "403", "404", "422"},
    ("/jobs/api/schedules/{name}/pause", "post"): {"200", "401", "403", "404", "422"},
    ("/jobs/api/schedules/{name}/resume", "post"): {"200", "401", "403", "404", "422"},
    ("/jobs/api/pauses", "get"): {"200", "401", "403", "404", "422"},
    ("/jobs/api/pauses", "post"): {"200", "201", "401", "403", "404", "422"},
    ("/jobs/api/pauses/{pause_id}/resume", "post"): {"200", "401", "403", "404", "422"},
    ("/jobs/api/workflows", "post"): {
        "200",
        "201",
        "401",
        "403",
        "404",
        "409",
        "413",
        "422",
        "429",
    },
    ("/jobs/api/workflows/{workflow_id}", "get"): {"200", "401", "403", "404", "422"},
    ("/jobs/api/workflows/{workflow_id}/cancel", "post"): {
        "200",
        "401",
        "403",
        "404",
        "409",
        "422",
    },
    ("/jobs/api/workflows/{workflow_id}/retry", "post"): {"200", "401", "403", "404", "409", "422"},
}


@pytest.fixture
def document(api) -> dict:
    response = api.get("/openapi.json")
    assert response.status_code == 200
    return response.json()


def test_the_openapi_document_lists_every_endpoint_with_its_error_responses(document):
    assert document["openapi"].startswith("3.")
    operations = {
        (path, method): spec
        for path, item in document["paths"].items()
        for method, spec in item.items()
    }
    assert set(operations) == set(EXPECTED)
    schemas = document["components"]["schemas"]
    for key, codes in EXPECTED.items():
        responses = operations[key]["responses"]
        assert set(responses) == codes, key
        for code in codes - {"200", "201"}:
            ref = responses[code]["content"]["application/json"]["schema"]["$ref"]
            assert ref == "#/components/schemas/ErrorOut", (key, code)
        assert operations[key]["security"] == [{"BearerToken": []}, {"SessionAuth": []}]
    assert set(schemas["ErrorOut"]["required"]) == {"code", "message"}
    job = schemas["JobOut"]["properties"]
    for field in ("ownership", "lease", "epoch", "attempts", "progress", "checkpoint", "result"):
        assert field in job
    assert {"error", "requests"} <= set(job)


def _refs(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def test_the_openapi_document_is_valid_openapi(document):
    schema = schemathesis.openapi.from_dict(document)
    operations = [result.ok() for result in schema.get_all_operations()]  # raises when invalid
    assert len(operations) == len(EXPECTED)
    # Structural rules of OpenAPI 3 (openapi-spec-validator is not installed here).
    assert {"openapi", "info", "paths", "components"} <= set(document)
    assert document["info"]["title"] and document["info"]["version"]
    for ref in _refs(document):
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.rsplit("/", 1)[1] in document["components"]["schemas"], ref
    operation_ids = []
    for path, item in document["paths"].items():
        templated = set(re.findall(r"{(\w+)}", path))
        for spec in item.values():
            operation_ids.append(spec["operationId"])
            declared = {p["name"] for p in spec.get("parameters", []) if p["in"] == "path"}
            assert declared == templated, path
            assert all(p["required"] for p in spec.get("parameters", []) if p["in"] == "path")
            assert all(r["description"] for r in spec["responses"].values())
    assert len(operation_ids) == len(set(operation_ids))
    schemes = document["components"]["securitySchemes"]
    assert schemes["BearerToken"] == {"type": "http", "scheme": "bearer"}
    assert schemes["SessionAuth"]["type"] == "apiKey"


def test_schemathesis_finds_no_server_error_and_no_schema_violation(token, red):
    jobs = [red.defer(OP, submission({"n": i}, key=f"s{i}")) for i in range(3)]
    red.fail(red.claim(jobs[1].pk), "boom")
    headers = {"Authorization": f"Bearer {token}"}
    app = WSGIHandler()
    schema = schemathesis.openapi.from_wsgi("/jobs/api/openapi.json", app, headers=headers)
    calls = []
    for result in schema.get_all_operations():
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _fuzz(result.ok(), mode, jobs, headers, app, calls)
    assert calls and all(status < 500 for _, _, status in calls)
    statuses = {(method, path, status) for method, path, status in calls}
    assert ("post", "/jobs/api/jobs", 201) in statuses  # the success paths were reached
    assert ("get", "/jobs/api/jobs/{job_id}", 200) in statuses


def _fuzz(operation, mode, jobs, headers, app, calls) -> None:
    """Run a bounded hypothesis search over one operation; about half of the examples name an
    existing job or the registered operation, so the success paths are reached too."""

    @settings(
        max_examples=20,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(mode), known=st.sampled_from(jobs), use_known=st.booleans())
    def check(case, known, use_known):
        positive = mode is GenerationMode.POSITIVE
        if positive and use_known and "job_id" in (case.path_parameters or {}):
            case.path_parameters["job_id"] = str(known.pk)
        if positive and use_known and isinstance(case.body, dict):
            case.body["operation"] = OP
            case.body.pop("run_after", None)  # the schema cannot say "with a UTC offset"
            if "payload" in case.body:
                case.body.pop("proposal", None)
            elif isinstance(case.body.get("proposal"), str):
                case.body["proposal"] = json.dumps(case.body["proposal"])
        # A negative case may carry a deliberately broken Authorization header: keep it then.
        sent = headers if positive else {**headers, **(case.headers or {})}
        response = case.call(headers=sent, app=app)
        calls.append((operation.method, operation.path, response.status_code))
        # Positive-data acceptance is left out: a schema-valid body may still name an
        # unregistered operation or hold a naive run_after, which the API rightly refuses (422).
        case.validate_response(
            response,
            excluded_checks=[checks.positive_data_acceptance],
            headers=sent,
            transport_kwargs={"headers": sent, "app": app},
        )

    check()
