"""The generated reference pages of the documentation site (docs_hooks/) say everything.

Each generator is called directly, as MkDocs calls it, and checked against the code it reads
independently: every ``DURABLE_JOBS`` key and quota limit with its default, every error code
with its REST API status, every management command option, every OpenAPI path and schema. A
setting, error or option added without documentation fails here (and stops the strict build).
"""

from __future__ import annotations

import argparse
import gc
import json
from pathlib import Path

import django
import pytest

import docs_hooks
from django_durable_jobs import __version__
from django_durable_jobs.api import api
from django_durable_jobs.api.errors import status_for
from django_durable_jobs.rules import conf, quotas
from django_durable_jobs.rules.errors import ExecutionStopped, JobError
from docs_hooks import commands_ref, errors_ref, rest_api_ref, settings_ref
from docs_hooks.text import docstring_entries, py_literal, rst_to_md

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = {
    "settings": "reference/settings.md",
    "errors": "reference/errors.md",
    "commands": "reference/commands.md",
    "rest-api": "reference/rest-api.md",
}


def rendered(page: str) -> str:
    return docs_hooks.render((DOCS / page).read_text())


# -- pages and markers -----------------------------------------------------------------------------


@pytest.mark.parametrize("marker", sorted(PAGES))
def test_each_reference_page_asks_for_its_generated_part(marker):
    text = (DOCS / PAGES[marker]).read_text()
    assert f"<!-- generated: {marker} -->" in text
    assert "<!-- generated:" not in rendered(PAGES[marker])


def test_an_unknown_marker_stops_the_build():
    with pytest.raises(ValueError, match="no-such-thing"):
        docs_hooks.render("<!-- generated: no-such-thing -->")


def test_the_version_marker_is_the_package_version():
    assert docs_hooks.render("v<!-- generated: version -->") == f"v{__version__}"


def test_the_changelog_page_includes_the_repository_changelog():
    assert '--8<-- "CHANGELOG.md"' in (DOCS / "changelog.md").read_text()
    assert (DOCS.parent / "CHANGELOG.md").is_file()


# -- settings --------------------------------------------------------------------------------------


def test_every_durable_jobs_setting_is_on_the_page_with_its_default():
    page = rendered(PAGES["settings"])
    for key, default in conf.DEFAULTS.items():
        assert f"| `{key}` | `{py_literal(default)}` |" in page, key


def test_every_quota_limit_is_on_the_page_with_its_builtin_default():
    page = rendered(PAGES["settings"])
    assert set(quotas.BUILTIN) == set(quotas.QUOTA_KEYS)
    for key, default in quotas.BUILTIN.items():
        assert f"| `{key}` | `{py_literal(default)}` |" in page, key


@pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks needs Django 6")
def test_every_option_of_the_tasks_backend_is_on_the_page():
    from django_durable_jobs.backends import OPTIONS

    page = settings_ref.settings_markdown()
    for key in OPTIONS:
        assert f"| `{key}` |" in page.split("DurableJobsBackend")[-1], key


def test_a_setting_without_a_documented_meaning_stops_the_build(monkeypatch):
    monkeypatch.setitem(conf.DEFAULTS, "NEW_KEY", 1)
    with pytest.raises(ValueError, match="NEW_KEY"):
        settings_ref.settings_markdown()


def test_meanings_come_from_the_definition_lists_of_the_docstrings():
    meanings = docstring_entries(conf.__doc__)
    assert set(meanings) == set(conf.DEFAULTS)
    assert meanings["DATABASE"].endswith("use for the job tables.")  # a continued line
    assert set(docstring_entries(quotas.__doc__)) == set(quotas.BUILTIN)


def test_py_literal_spells_values_as_a_settings_file_would():
    assert py_literal("default") == '"default"'
    assert py_literal(1_048_576) == "1_048_576"
    assert py_literal(100) == "100"
    assert py_literal(None) == "None"
    assert py_literal(30.0) == "30.0"
    assert py_literal({}) == "{}"


def test_rst_to_md_turns_roles_and_double_backticks_into_code():
    assert rst_to_md("see :func:`~a.b.submit` and ``x``") == "see `a.b.submit` and `x`"


# -- errors ----------------------------------------------------------------------------------------


def _subclasses(kind: type) -> list[type]:
    found = [kind]
    for sub in kind.__subclasses__():
        found += _subclasses(sub)
    return found


def path(kind: type) -> str:
    return f"{kind.__module__}.{kind.__name__}"


def test_classes_link_to_the_python_api_page():
    assert errors_ref.class_link("django_durable_jobs.errors.LeaseLost") == (
        "[`LeaseLost`](python.md#django_durable_jobs.errors.LeaseLost)"
    )
    assert errors_ref.class_link("django_durable_jobs.api.errors.JobNotFound") == (
        "`api.errors.JobNotFound`"
    )


def test_every_job_error_code_is_on_the_page_with_its_http_status():
    page = rendered(PAGES["errors"])
    classes = [k for k in _subclasses(JobError) if k.__module__.startswith("django_durable_jobs")]
    assert {"InputInvalid", "PayloadTooLarge", "JobNotFound", "ExecutionStopped"} <= {
        k.__name__ for k in classes
    }
    for kind in classes:
        if kind is ExecutionStopped:
            continue
        status = status_for(kind.__new__(kind))
        assert f"| `{kind.code}` | {errors_ref.class_link(path(kind))} | {status}" in page, kind


def test_every_execution_stopped_code_is_on_the_page():
    page = rendered(PAGES["errors"])
    for code in ExecutionStopped.CODES:
        assert f"| `{code}` | {errors_ref.class_link(path(ExecutionStopped))} | 409" in page


def test_every_code_the_rest_api_spells_is_on_the_page():
    page = rendered(PAGES["errors"])
    codes = errors_ref.api_codes_in_source()
    assert {"E_API_UNAUTHENTICATED", "E_API_FORBIDDEN", "E_API_INTERNAL"} <= codes
    for code in codes:
        assert f"| `{code}` |" in page, code


def test_an_error_class_without_a_meaning_stops_the_build():
    class Undocumented(JobError):
        __module__ = "django_durable_jobs.errors"
        code = "E_JOB_UNDOCUMENTED"

    try:
        with pytest.raises(ValueError, match="Undocumented"):
            errors_ref.errors_markdown()
    finally:
        del Undocumented
        gc.collect()  # forget the subclass, so later walks do not meet it
    assert "E_JOB_UNDOCUMENTED" not in errors_ref.errors_markdown()


def test_statuses_that_wait_say_retry_after():
    page = errors_ref.errors_markdown()
    assert "| 429, with `Retry-After` |" in page
    assert "| 503, with `Retry-After` |" in page


# -- management commands ---------------------------------------------------------------------------


def _parsers(parser: argparse.ArgumentParser, prog: str):
    yield prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, f"{prog} {name}")


def test_the_app_commands_are_runjobs_and_jobs():
    assert commands_ref.app_commands() == ["jobs", "runjobs"]


@pytest.mark.parametrize("name", ["runjobs", "jobs"])
def test_every_subcommand_and_option_is_on_the_page_with_its_help(name):
    page = rendered(PAGES["commands"])
    parser = commands_ref.command_parser(name)
    seen = 0
    for prog, sub in _parsers(parser, f"manage.py {name}"):
        assert f"`{prog}`" in page, prog
        for action in sub._actions:
            if (
                set(action.option_strings) & commands_ref.DJANGO_COMMON
                or "-h" in action.option_strings
            ):
                continue
            if isinstance(action, argparse._SubParsersAction):
                continue
            for spelling in action.option_strings or [action.metavar or action.dest]:
                assert spelling in page, (prog, spelling)
            if action.help:
                assert " ".join(action.help.split()).replace("|", "\\|") in page, (prog, action)
            for choice in action.choices or ():
                assert f"`{choice}`" in page, (prog, choice)
            seen += 1
    assert seen > 5


def test_defaults_of_options_are_on_the_page():
    page = commands_ref.commands_markdown()
    assert "| `--concurrency CONCURRENCY` | `4` |" in page
    assert "| `--poll POLL` | `1.0` |" in page
    assert "| `--limit LIMIT` | `50` |" in page
    assert "| `--user USER` | required |" in page


def test_django_common_options_are_listed_once():
    page = commands_ref.commands_markdown()
    for option in ("--verbosity", "--settings", "--pythonpath", "--traceback", "--skip-checks"):
        assert page.count(f"`{option}") + page.count(f", {option}") == 1, option


# -- REST API --------------------------------------------------------------------------------------


def test_every_openapi_operation_has_a_section():
    page = rendered(PAGES["rest-api"])
    schema = api.get_openapi_schema(path_prefix="")
    assert schema["paths"]
    for path, item in schema["paths"].items():
        for method, op in item.items():
            assert f"### `{method.upper()} {path}`" in page, (method, path)
            for param in op.get("parameters", []):
                assert f"| `{param['name']}` | {param['in']} |" in page
            for status in op["responses"]:
                assert f"| `{status}` |" in page


def test_every_openapi_schema_and_field_is_on_the_page():
    page = rest_api_ref.rest_api_markdown()
    schemas = api.get_openapi_schema(path_prefix="")["components"]["schemas"]
    for name, spec in schemas.items():
        assert f"### {name} {{#schema-{name.lower()}}}" in page
        section = page.split(f"### {name} ")[1].split("\n### ")[0]
        for field in spec.get("properties", {}):
            assert f"| `{field}` |" in section, (name, field)


def test_the_published_openapi_document_is_the_apis_own_with_the_package_version():
    published = json.loads(rest_api_ref.openapi_json())
    assert published == json.loads(json.dumps(api.get_openapi_schema(path_prefix="")))
    assert published["info"]["version"] == __version__
    assert f"]({rest_api_ref.OPENAPI_FILE})" in rest_api_ref.rest_api_markdown()


def test_type_phrases_of_json_schemas():
    type_of = rest_api_ref.type_of
    assert type_of({"$ref": "#/components/schemas/JobOut"}) == "[JobOut](#schema-jobout)"
    assert type_of({"anyOf": [{"type": "string"}, {"type": "null"}]}) == "string or null"
    assert type_of({"type": "array", "items": {"type": "integer"}}) == "array of integer"
    assert type_of({"type": "string", "format": "uuid"}) == "string (uuid)"
    assert type_of({}) == "any JSON"
    assert rest_api_ref.limits_of({"minimum": 1, "maximum": 100, "default": 25}) == (
        "1 to 100; default `25`"
    )


# -- docstrings in the Python API page -------------------------------------------------------------


def test_sphinx_roles_become_code_spans():
    pytest.importorskip("griffe")  # the docs extra; not installed in the Django 5.2 venv
    from docs_hooks.griffe_roles import strip_roles

    assert strip_roles("see :func:`~a.b.submit`") == "see `submit`"
    assert strip_roles(":class:`django_durable_jobs.store.Lease`") == (
        "`django_durable_jobs.store.Lease`"
    )
    assert strip_roles(":py:meth:`Execution.start`") == "`Execution.start`"


def test_literal_blocks_lose_their_double_colon():
    pytest.importorskip("griffe")
    from docs_hooks.griffe_roles import markdown_of

    assert markdown_of("Mount it::\n\n    urls = []\n") == "Mount it:\n\n    urls = []\n"
    assert markdown_of("a::b and ``x::``") == "a::b and ``x::``"
