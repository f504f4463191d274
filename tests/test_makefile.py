"""What each Makefile entry point would run, read from ``make --dry-run``.

``make demo`` and ``make test-quick`` must need nothing but Python (and SQLite): no database server,
no browser, no mysqlclient build. ``make test`` is the one that installs and starts them. The
dry run treats every target as out of date (``--always-make``), so every install step the target
depends on is printed, as on a fresh clone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NEEDS_MORE_THAN_PYTHON = ("ensure-services", "ensure-browser", "[mysql]", "mysqlclient", "apt-get")

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def dry_run(target: str) -> str:
    # Run as from a shell, also when the suite itself runs under make (make test-quick).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    done = subprocess.run(
        ["make", "--no-print-directory", "--dry-run", "--always-make", target],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


@pytest.mark.parametrize("target", ["demo", "test-quick", "docs"])
def test_target_needs_only_python(target):
    commands = dry_run(target)
    assert "pip install" in commands  # the dry run did print the install steps
    assert [word for word in NEEDS_MORE_THAN_PYTHON if word in commands] == []


def test_demo_installs_the_package_alone_and_runs_the_demo():
    commands = dry_run("demo")
    assert "-e .\n" in commands
    assert "[test" not in commands
    assert commands.rstrip().endswith("scripts/demo")


def test_make_test_starts_the_services_and_builds_the_docs_strictly():
    commands = dry_run("test")
    for step in ("scripts/ensure-services", "[mysql]", "mkdocs build --strict"):
        assert step in commands
    assert commands.index("mkdocs build --strict") < commands.index("scripts/run-suites")
