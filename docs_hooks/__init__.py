"""Reference pages of the documentation site, generated from the code so that they cannot rot.

Each generator is a plain function that returns Markdown (tests call them directly); a page asks
for one with a marker such as ``<!-- generated: commands -->``, which :func:`render` replaces.
``mkdocs_hooks.py`` wires them into MkDocs. Django is set up with the example project's settings
(embedded SQLite): nothing here opens a database connection.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
MARKER_RE = re.compile(r"<!--\s*generated:\s*([a-z-]+)\s*-->")


def setup_django() -> None:
    """Make the app importable and set Django up, once (the example project's settings)."""
    for path in (REPO_ROOT, REPO_ROOT / "example_project"):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    import django
    from django.apps import apps

    if not apps.ready:
        django.setup()


def version() -> str:
    """Return the one version number of the package, its docs and its OpenAPI document."""
    from django_durable_jobs import __version__

    return __version__


def generators() -> dict[str, Callable[[], str]]:
    """Return marker name → the function that writes that part of a page."""
    from . import commands_ref, errors_ref, rest_api_ref, settings_ref

    return {
        "version": version,
        "settings": settings_ref.settings_markdown,
        "errors": errors_ref.errors_markdown,
        "commands": commands_ref.commands_markdown,
        "rest-api": rest_api_ref.rest_api_markdown,
    }


def render(markdown: str) -> str:
    """Return ``markdown`` with every ``<!-- generated: NAME -->`` marker replaced."""
    known = generators()

    def replace(match: re.Match) -> str:
        name = match.group(1)
        if name not in known:
            raise ValueError(f"Unknown marker <!-- generated: {name} -->; known: {sorted(known)}.")
        return known[name]()

    return MARKER_RE.sub(replace, markdown)
