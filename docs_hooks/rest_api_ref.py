"""reference/rest-api.md: the endpoints, parameters, bodies and responses of the REST API.

Written from the OpenAPI document the API itself serves (``api.get_openapi_schema()``), which
the site also publishes whole as ``reference/openapi.json``.
"""

from __future__ import annotations

import json
from typing import Any

from .text import cell, code, table

OPENAPI_FILE = "openapi.json"  # next to rest-api.md in the built site
METHODS = ("get", "post", "put", "patch", "delete")


def openapi_schema() -> dict[str, Any]:
    """Return the OpenAPI document of ``django_durable_jobs.api.api``, paths relative to its mount."""
    from django_durable_jobs.api import api

    return json.loads(json.dumps(api.get_openapi_schema(path_prefix="")))


def openapi_json() -> str:
    """Return the OpenAPI document as the JSON text the site publishes."""
    return json.dumps(openapi_schema(), indent=2, sort_keys=False) + "\n"


def _anchor(name: str) -> str:
    return f"schema-{name.lower()}"


def operation_anchor(method: str, path: str) -> str:
    """Return the heading id of an endpoint's section, e.g. ``post-jobs-job_id-cancel``."""
    words = "".join(c if c.isalnum() or c == "_" else " " for c in f"{method} {path}")
    return "-".join(words.lower().split())


def type_of(schema: dict[str, Any]) -> str:
    """Return a JSON schema as a short Markdown phrase: ``string (uuid)``, a link to a schema…"""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(name)})"
    if "anyOf" in schema:
        return " or ".join(type_of(s) for s in schema["anyOf"])
    if "enum" in schema:
        return "one of " + ", ".join(code(json.dumps(v)) for v in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        return f"array of {type_of(schema.get('items', {}))}"
    if kind is None:
        return "any JSON"
    return f"{kind} ({schema['format']})" if "format" in schema else str(kind)


def limits_of(schema: dict[str, Any]) -> str:
    """Return a schema's constraints and default, e.g. ``1–200 characters; default 0``."""
    found = []
    for part in [schema, *schema.get("anyOf", [])]:
        if "minLength" in part or "maxLength" in part:
            found.append(f"{part.get('minLength', 0)}–{part.get('maxLength', '…')} characters")
        if "minimum" in part or "maximum" in part:
            found.append(f"{part.get('minimum', '…')} to {part.get('maximum', '…')}")
    if "default" in schema:
        found.append(f"default {code(json.dumps(schema['default']))}")
    return "; ".join(found)


def _body_of(content: dict[str, Any]) -> str:
    media = content.get("application/json")
    return type_of(media["schema"]) if media and "schema" in media else "—"


def _operation(path: str, method: str, op: dict[str, Any]) -> list[str]:
    parts = [f"### `{method.upper()} {path}` {{#{operation_anchor(method, path)}}}\n"]
    if op.get("summary"):
        parts.append(op["summary"].rstrip(".") + ".\n")
    if op.get("description"):
        parts.append(op["description"] + "\n")
    security = [name for entry in op.get("security", []) for name in entry]
    if security:
        parts.append("Authentication: " + " or ".join(f"`{s}`" for s in security) + ".\n")
    params = op.get("parameters", [])
    if params:
        parts.append("**Parameters**\n")
        parts.append(
            table(
                ["Name", "In", "Type", "Required", "Limits", "Description"],
                [
                    (
                        code(p["name"]),
                        p["in"],
                        type_of(p.get("schema", {})),
                        "yes" if p.get("required") else "no",
                        limits_of(p.get("schema", {})),
                        cell(p.get("description") or p.get("schema", {}).get("description", "")),
                    )
                    for p in params
                ],
            )
        )
    body = op.get("requestBody")
    if body:
        required = "required" if body.get("required") else "optional"
        parts.append(f"**Request body** ({required}, JSON): {_body_of(body['content'])}\n")
    parts.append("**Responses**\n")
    parts.append(
        table(
            ["Status", "Meaning", "Body"],
            [
                (
                    code(status),
                    cell(answer.get("description", "")),
                    _body_of(answer.get("content", {})),
                )
                for status, answer in sorted(op.get("responses", {}).items())
            ],
        )
    )
    return parts


def _schema_section(name: str, schema: dict[str, Any]) -> list[str]:
    parts = [f"### {name} {{#{_anchor(name)}}}\n"]
    if schema.get("description"):
        parts.append(schema["description"] + "\n")
    required = set(schema.get("required", []))
    parts.append(
        table(
            ["Field", "Type", "Required", "Limits", "Description"],
            [
                (
                    code(field),
                    type_of(spec),
                    "yes" if field in required else "no",
                    limits_of(spec),
                    cell(spec.get("description", "")),
                )
                for field, spec in schema.get("properties", {}).items()
            ],
        )
    )
    return parts


def rest_api_markdown(schema: dict[str, Any] | None = None) -> str:
    """Return the endpoint and schema sections of reference/rest-api.md."""
    schema = schema if schema is not None else openapi_schema()
    info = schema.get("info", {})
    operations = [
        (path, method, op)
        for path, item in schema.get("paths", {}).items()
        for method, op in item.items()
        if method in METHODS
    ]
    parts = [
        f"OpenAPI {schema.get('openapi', '')} document: **{info.get('title', '')}**, version "
        f"`{info.get('version', '')}` — [download it as JSON]({OPENAPI_FILE}). "
        "Paths are relative to where you mount `api.urls`.\n",
        "## Authentication\n",
        table(
            ["Scheme", "How"],
            [
                (code(name), _scheme(spec))
                for name, spec in schema.get("components", {}).get("securitySchemes", {}).items()
            ],
        ),
        "\n## Endpoints\n",
        table(
            ["Method", "Path", "Summary"],
            [
                (
                    method.upper(),
                    f"[{code(path)}](#{operation_anchor(method, path)})",
                    cell(op.get("summary", "")),
                )
                for path, method, op in operations
            ],
        ),
    ]
    for path, method, op in operations:
        parts += _operation(path, method, op)
    parts.append("## Schemas\n")
    for name, spec in schema.get("components", {}).get("schemas", {}).items():
        parts += _schema_section(name, spec)
    return "\n".join(parts)


def _scheme(spec: dict[str, Any]) -> str:
    if spec.get("type") == "http":
        return f"`Authorization: {spec.get('scheme', '').capitalize()} <token>` header"
    if spec.get("type") == "apiKey":
        return f"the `{spec.get('name')}` {spec.get('in')} of a logged-in Django session"
    return cell(json.dumps(spec))
