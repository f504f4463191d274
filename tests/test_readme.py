"""What the README tells a first-day user stays true of the code, the package and scripts/demo.

(tests/test_docs_samples.py runs every python block; these check what running cannot: that the
block labelled ``myapp/jobs.py`` is safe to import before ``migrate``, and that names the README
repeats from elsewhere, such as a default or an environment variable, are the real ones.)
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
import tomllib

import pytest

import django_durable_jobs
from django_durable_jobs.rules import registry
from tests.settings import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()
PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
JOBS_LABEL = "# myapp/jobs.py"
JOBS_PY = re.compile(r"^# [\w/]*jobs\.py\b")  # a block labelled as a jobs.py module
BLOCK = re.compile(r"^```python\n(?P<code>.*?)^```", re.M | re.S)


def python_blocks(text: str) -> list[str]:
    return [m["code"] for m in BLOCK.finditer(text)]


def jobs_py_block() -> str:
    [block] = [b for b in python_blocks(README) if b.startswith(JOBS_LABEL)]
    return block


def import_as_module(code: str, tmp_path, monkeypatch, name: str = "first_day_jobs") -> None:
    """Import ``code`` as Django imports a jobs.py module at start-up (no database access)."""
    (tmp_path / f"{name}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(registry.all_operations())
    try:
        importlib.import_module(name)
    finally:
        sys.modules.pop(name, None)
        for operation in set(registry.all_operations()) - before:
            registry.unregister(operation)


# -- the quick start ----------------------------------------------------------------------------


def test_the_quick_starts_jobs_py_imports_without_the_database(tmp_path, monkeypatch):
    # No django_db mark: pytest-django refuses any query, as a database without tables would.
    code = jobs_py_block()
    assert "submit(" not in code
    import_as_module(code, tmp_path, monkeypatch)


def labelled_jobs_modules() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for block in python_blocks(page.read_text()):
            if JOBS_PY.match(block):
                found.append((str(page.relative_to(REPO_ROOT)), block))
    return found


def test_the_docs_label_some_jobs_py_modules():
    pages = {page for page, _ in labelled_jobs_modules()}
    assert {"README.md", "docs/index.md", "docs/worker.md"} <= pages


def test_every_block_labelled_jobs_py_imports_without_the_database(tmp_path, monkeypatch):
    for number, (page, code) in enumerate(labelled_jobs_modules()):
        assert "submit(" not in code, page
        import_as_module(code, tmp_path, monkeypatch, name=f"first_day_jobs_{number}")


def test_a_submit_at_the_top_of_jobs_py_would_need_the_database(tmp_path, monkeypatch):
    # What the quick start used to show, so that the test above can fail.
    code = (
        jobs_py_block() + '\nfrom django_durable_jobs import submit\nsubmit("emails.welcome", {})\n'
    )
    with pytest.raises(RuntimeError, match="Database access not allowed"):
        import_as_module(code, tmp_path, monkeypatch)


def test_the_quick_start_submits_in_a_block_of_its_own():
    submits = [b for b in python_blocks(README) if "submit(" in b]
    assert submits and not any(b.startswith(JOBS_LABEL) for b in submits)


# -- a killed worker's job ----------------------------------------------------------------------


def test_the_comparison_says_what_a_killed_workers_job_does_by_default():
    [row] = [line for line in README.splitlines() if line.startswith("| A killed worker's job")]
    ours = row.split("|")[2]
    default = inspect.signature(registry.operation).parameters["on_expired"].default
    assert f'by default (`on_expired="{default}"`)' in ours
    for choice in registry.ON_EXPIRED_CHOICES:
        assert f'`on_expired="{choice}"`' in ours


# -- installing without the public index, and make demo -----------------------------------------


def test_every_wheel_the_docs_name_is_this_version():
    docs = ("docs/index.md", "docs/tutorial.md")
    pages = [README, *((REPO_ROOT / page).read_text() for page in docs)]
    named = [v for page in pages for v in re.findall(r"django_durable_jobs-(\S+?)-py3", page)]
    assert named and set(named) == {django_durable_jobs.__version__}


def test_every_extra_a_user_installs_is_documented():
    with (REPO_ROOT / "pyproject.toml").open("rb") as f:
        extras = set(tomllib.load(f)["project"]["optional-dependencies"])
    for_users = extras - {"test", "docs", "bench"}
    assert for_users >= {"postgres", "mysql", "metrics", "otel"}
    install = README[README.index("## Install from a clone") : README.index("## Compared")]
    index = (REPO_ROOT / "docs/index.md").read_text()
    for extra in sorted(for_users):
        assert f"`{extra}`" in install, extra
        assert f"`{extra}`" in index, extra


def test_the_variables_scripts_demo_reads_are_documented_beside_make_demo():
    script = (REPO_ROOT / "scripts/demo").read_text()
    variables = set(re.findall(r"\$\{(DEMO_\w+)", script))
    assert "DEMO_ADDR" in variables
    development = (REPO_ROOT / "docs/development.md").read_text()
    for name in sorted(variables):
        assert f"{name}=" in README, name
        assert f"{name}" in development, name
    [default] = re.findall(r"DEMO_ADDR:-([^}]+)\}", script)
    assert f"http://{default}/admin/" in README
    assert f"`{default}`" in development
