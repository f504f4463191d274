"""One version number and honest classifiers.

The package, the documentation site and the REST API's OpenAPI document share
``django_durable_jobs.__version__``, and the changelog's newest entry names it. Each test run checks
that the Django and Python it runs on are declared in ``pyproject.toml``'s classifiers and in the
README, so a version that is declared is one the suite runs on.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import django
import pytest

import django_durable_jobs
from django_durable_jobs.api import api

ROOT = Path(__file__).resolve().parent.parent


def _pyproject() -> dict:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def test_the_package_takes_its_version_from_the_module():
    project = _pyproject()
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "django_durable_jobs.__version__"
    }
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+|\.dev\d+)?", django_durable_jobs.__version__)


def test_the_openapi_document_has_the_package_version():
    assert api.get_openapi_schema()["info"]["version"] == django_durable_jobs.__version__


def test_the_newest_changelog_entry_is_the_package_version():
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), flags=re.M)
    assert headings, "CHANGELOG.md has no '## <version>' entry"
    assert headings[0] == django_durable_jobs.__version__


def test_the_running_django_and_python_are_declared():
    classifiers = set(_pyproject()["project"]["classifiers"])
    django_series = ".".join(django.get_version().split(".")[:2])
    python_series = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert f"Framework :: Django :: {django_series}" in classifiers
    assert f"Programming Language :: Python :: {python_series}" in classifiers
    readme = (ROOT / "README.md").read_text()
    assert f"Django {django_series}" in readme
    assert f"Python {python_series}" in readme


def test_the_readme_names_every_declared_version():
    readme = (ROOT / "README.md").read_text()
    for classifier in _pyproject()["project"]["classifiers"]:
        if match := re.fullmatch(r"Framework :: Django :: (\d+\.\d+)", classifier):
            assert f"Django {match[1]}" in readme, classifier
        if match := re.fullmatch(r"Programming Language :: Python :: (\d+\.\d+)", classifier):
            assert f"Python {match[1]}" in readme, classifier


def test_the_documented_wheel_command_builds_a_wheel_with_every_package_file(tmp_path):
    # What README.md and docs/index.md tell a user to run in a clone, run here on a clean export
    # of the committed tree (so nothing untracked can make it pass).
    clone = tmp_path / "clone"
    clone.mkdir()
    archive = subprocess.run(
        ["git", "archive", "--format=tar", "HEAD"], cwd=ROOT, capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(clone)], input=archive.stdout, check=True)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", "dist", str(clone)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if built.returncode and "setuptools" in built.stderr and "find a version" in built.stderr:
        pytest.skip("pip could not fetch setuptools to build in isolation (no package index)")
    assert built.returncode == 0, built.stderr
    [wheel] = (tmp_path / "dist").glob("*.whl")
    assert wheel.name == f"django_durable_jobs-{django_durable_jobs.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive_file:
        names = set(archive_file.namelist())
        [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
        extras = set(
            re.findall(r"^Provides-Extra: (\S+)$", archive_file.read(metadata).decode(), re.M)
        )
    tracked = subprocess.run(
        ["git", "ls-files", "django_durable_jobs"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    assert tracked and set(tracked) <= names, sorted(set(tracked) - names)
    assert {"postgres", "mysql", "metrics", "otel"} <= extras
