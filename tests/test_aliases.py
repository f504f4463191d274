"""Every old import path of a moved module gives the very module object of its new home.

The root's loose modules moved into layer packages (``rules``, ``formatting``, ``observability``,
``models``, ``database``); ``django_durable_jobs._aliases`` serves their old paths. One module under
two names would define every model and exception class twice, so each test checks identity, and
the subprocess tests check the old path as the first import of a fresh interpreter. Old paths are
spelled in strings, so the import rewrite script leaves this file testing them.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.apps import apps
from django.utils.module_loading import import_string

import django_durable_jobs
from django_durable_jobs import _aliases
from django_durable_jobs.models import Job
from django_durable_jobs.rules.errors import JobError, LeaseLost

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "django_durable_jobs"
STORE_OUTCOMES = Path(django_durable_jobs.__file__).parent / "store" / "outcomes.py"
# Old paths served by the alias table (store.outcomes only once its file is gone).
OLD_PATHS = sorted(
    old for old in _aliases.MOVED if old != "store.outcomes" or not STORE_OUTCOMES.exists()
)
# Modules of the models package need Django's app registry, as django_durable_jobs.models does;
# so do the API's old paths, which run the REST API's package first.
NEEDS_APPS = {"querysets", "expressions", "rows", "api.tokens", "api.cli", "store.outcomes"}


@pytest.mark.parametrize("old", OLD_PATHS)
def test_an_old_path_is_the_module_of_its_new_home(old):
    new = importlib.import_module(f"{PACKAGE}.{_aliases.MOVED[old]}")
    assert importlib.import_module(f"{PACKAGE}.{old}") is new
    assert sys.modules[f"{PACKAGE}.{old}"] is new
    assert new.__spec__.name == f"{PACKAGE}.{_aliases.MOVED[old]}"  # relative imports stay home


def test_every_moved_module_has_its_new_file():
    root = Path(django_durable_jobs.__file__).parent
    for old, new in _aliases.MOVED.items():
        assert (root / f"{new.replace('.', '/')}.py").is_file(), new
        if old != "store.outcomes":
            assert not (root / f"{old.replace('.', '/')}.py").exists(), old


def _run(statement: str) -> dict:
    """Run an import statement kept in a string (the import rewrite script leaves strings alone)."""
    namespace: dict = {}
    exec(statement, namespace)
    return namespace


def test_from_an_old_path_import_a_name():
    from django_durable_jobs.rules.values import Lease
    from django_durable_jobs.rules.vocabulary import JobStatus

    assert _run("from django_durable_jobs.errors import JobError")["JobError"] is JobError
    assert _run("from django_durable_jobs.values import Lease")["Lease"] is Lease
    assert _run("from django_durable_jobs.vocabulary import JobStatus")["JobStatus"] is JobStatus


def test_the_api_s_token_paths_are_the_modules_that_moved_out_of_it():
    from django_durable_jobs.management.commands import _tokens
    from django_durable_jobs.models import tokens

    create_token = _run("from django_durable_jobs.api.tokens import create_token")["create_token"]
    assert create_token is tokens.create_token
    assert _run("from django_durable_jobs.api import tokens")["tokens"] is tokens
    assert import_string("django_durable_jobs.api.tokens.revoke_token") is tokens.revoke_token
    handle_token = _run("from django_durable_jobs.api.cli import handle_token")["handle_token"]
    assert handle_token is _tokens.handle_token
    assert import_string("django_durable_jobs.api.cli.TOKEN_COLUMNS") is _tokens.TOKEN_COLUMNS


def test_an_old_module_is_an_attribute_of_the_package():
    from django_durable_jobs.rules import validation

    assert _run("from django_durable_jobs import validation")["validation"] is validation
    assert django_durable_jobs.dbvendor is importlib.import_module(f"{PACKAGE}.database.dbvendor")
    assert not hasattr(django_durable_jobs, "no_such_module")


def test_find_spec_finds_an_old_path():
    assert importlib.util.find_spec(f"{PACKAGE}.history") is not None
    assert importlib.util.find_spec(f"{PACKAGE}.no_such_module") is None


def test_the_store_s_own_outcomes_module_wins_while_it_exists():
    module = importlib.import_module(f"{PACKAGE}.store.outcomes")
    outcome = importlib.import_module(f"{PACKAGE}.rules.outcome")
    if STORE_OUTCOMES.exists():
        assert module is not outcome
        assert Path(module.__file__) == STORE_OUTCOMES
    else:
        assert module is outcome


def test_the_error_classes_keep_their_public_home():
    assert JobError.__module__ == LeaseLost.__module__ == "django_durable_jobs.errors"
    assert import_string("django_durable_jobs.errors.LeaseLost") is LeaseLost
    copied = pickle.loads(pickle.dumps(LeaseLost("lost")))
    assert type(copied) is LeaseLost


def test_the_models_are_django_s_models():
    assert apps.get_model("durable_jobs", "Job") is Job
    assert Job.__module__ == "django_durable_jobs.models"
    assert import_string("django_durable_jobs.querysets.JobQuerySet") is type(Job.objects.all())


def _fresh(code: str) -> subprocess.CompletedProcess:
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("old", OLD_PATHS)
def test_an_old_path_works_as_the_first_import_of_a_fresh_interpreter(old):
    setup = "import django; django.setup()" if old in NEEDS_APPS else ""
    run = _fresh(
        f"""
        {setup}
        import {PACKAGE}.{old} as old
        import sys
        import {PACKAGE}.{_aliases.MOVED[old]} as new
        assert old is new, (old, new)
        assert sys.modules["{PACKAGE}.{old}"] is new
        print("ok")
        """
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == "ok\n"


def test_from_import_and_find_spec_work_first_in_a_fresh_interpreter():
    run = _fresh(
        f"""
        import importlib.util
        assert importlib.util.find_spec("{PACKAGE}.errors") is not None
        from {PACKAGE}.errors import JobError
        from {PACKAGE}.rules.errors import JobError as new
        assert JobError is new
        import django
        django.setup()
        from django.apps import apps
        from {PACKAGE}.querysets import JobQuerySet
        assert type(apps.get_model("durable_jobs", "Job").objects.all()) is JobQuerySet
        print("ok")
        """
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == "ok\n"
