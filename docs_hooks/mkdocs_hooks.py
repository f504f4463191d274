"""MkDocs hooks: the site's version from the package, generated reference pages, openapi.json.

Named in mkdocs.yml under ``hooks:``. MkDocs loads this file by path, not as part of the
``docs_hooks`` package, so it puts the repository root on ``sys.path`` first.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CSS = "assets/durable-jobs.css"
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import docs_hooks  # noqa: E402 - needs the sys.path entry above
from docs_hooks import rest_api_ref  # noqa: E402


def on_config(config):
    """Set Django up and stamp the package's version on the site (footer and ``extra``)."""
    docs_hooks.setup_django()
    version = docs_hooks.version()
    config.extra["version"] = version
    config.copyright = f"django-durable-jobs {version}"
    config.extra_css.append(CSS)
    return config


def on_files(files, config):
    """Add the REST API's OpenAPI document (next to reference/rest-api.md) and the site's CSS."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, CSS, abs_src_path=str(REPO_ROOT / "docs_hooks/site.css")))
    files.append(
        File.generated(
            config, f"reference/{rest_api_ref.OPENAPI_FILE}", content=rest_api_ref.openapi_json()
        )
    )
    return files


def on_page_markdown(markdown, page, config, files):
    """Replace each ``<!-- generated: NAME -->`` marker with the text its generator writes."""
    return docs_hooks.render(markdown)
