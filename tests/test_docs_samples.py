"""
Every Python code sample in the documentation is run, so the docs cannot rot.

The convention (docs/development.md, "Code samples in the docs are tests", says the same to
contributors):

- Every ```` ```python ```` fenced block (also ``py`` / ``python3``) in README.md and
  docs/**/*.md is run. There is one test per page, named by its path from the repository root:
  ``pytest tests/test_docs_samples.py -k tutorial`` runs docs/tutorial.md. A ``pycon`` block is
  refused: write samples as ``python`` blocks, so they run.
- A page's blocks run in order in one shared namespace, as if pasted one after another into
  ``manage.py shell``, except that the namespace starts empty: a block imports what it uses.
  Django is configured by tests/settings.py against the test database of the run (SQLite,
  PostgreSQL or MariaDB, chosen by DURABLE_JOBS_TEST_DB), which is transactional: no atomic
  block surrounds the page, as none surrounds a user's code.
- A fragment is fine as long as it is valid Python that runs: ``...`` (Ellipsis) as a
  placeholder statement or list item runs. Settings samples (``INSTALLED_APPS = [...]``,
  ``DURABLE_JOBS = {...}``) run as plain assignments; when the page's namespace ends with a
  ``DURABLE_JOBS`` dict, the app's system checks run on it under
  ``override_settings(DURABLE_JOBS=...)`` and any error fails the page.
- Hidden setup: an HTML comment whose first line is ``<!-- sample-setup`` and whose last line
  is ``-->``, placed immediately before a python fence, holds Python run just before that block,
  in the same namespace (imports or fixtures a reader need not see, e.g. a job the sample
  reads). Use it sparingly; it must never replace what a user has to write.
- Exempt blocks: configuration of another system written in a python fence is skipped only when
  the line immediately before the opening fence is ``<!-- other system: NAME -->`` with NAME in
  ``OTHER_SYSTEMS`` below. Any other use of such a marker fails the page. Nothing else is
  skipped.
- What a page registers or changes globally is undone after it: ``@operation`` and
  ``django.tasks`` registrations of functions the page defines (not those of real modules it
  imports, e.g. by running ``runjobs``, which stay imported), settings assigned on ``django.conf.settings``, receivers
  connected to Django's signals, cache contents (submission rate counters), os.environ and
  OS signal handlers. Threads a page starts must have ended within ``THREAD_GRACE`` seconds.
  Functions a page defines live in a module named ``docs_sample`` (in ``sys.modules`` while the
  page runs), so a ``@task`` defined in a sample can be imported by its path.
- On Django 5.2 (no ``django.tasks``) a page whose samples use ``django.tasks`` is skipped, visibly.
- A failure names the page and the line of the failing block, and shows the exception with
  tracebacks that point at the page's own lines.
"""

from __future__ import annotations

import linecache
import os
import re
import signal
import sys
import threading
import time
import traceback
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import django
import pytest
from django.core.cache import caches
from django.core.checks import ERROR
from django.test import override_settings

from django_durable_jobs.rules import registry
from tests.settings import REPO_ROOT

# Systems whose configuration a page may show in a python fence without it being run.
OTHER_SYSTEMS = frozenset({"celery", "crontab", "pgbouncer", "systemd", "supervisor", "gunicorn"})
RUN_LANGUAGES = frozenset({"python", "py", "python3"})
REFUSED_LANGUAGES = frozenset({"pycon", "python-console", "pyi"})
SAMPLE_MODULE = "docs_sample"
THREAD_GRACE = 30.0

FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*?)\s*$")
MARKER = re.compile(r"^<!--\s*(other[ _-]?system|sample[ _-]?setup)", re.IGNORECASE)
OTHER_SYSTEM = re.compile(r"^<!-- other system: (?P<name>[A-Za-z0-9_.-]+) -->$")
SETUP_OPEN = "<!-- sample-setup"
SETUP_CLOSE = "-->"


class SampleFailed(AssertionError):
    """A page's samples did not run; the message names the page and line."""


@dataclass(frozen=True)
class Snippet:
    code: str
    first_line: int  # line number, in the page, of the code's first line


@dataclass(frozen=True)
class Block:
    line: int  # line of the opening fence
    code: Snippet
    setup: Snippet | None = None
    other_system: str | None = None


# -- reading a page ------------------------------------------------------------------------------


def parse(text: str, origin: str) -> list[Block]:
    """Return the python blocks of a Markdown page, with their hidden setup and exemptions."""
    lines = text.splitlines()
    blocks: list[Block] = []
    pending_setup: tuple[int, Snippet] | None = None  # (line of "-->", the setup)
    pending_other: tuple[int, str] | None = None  # (line of the marker, the system)
    i = 0
    while i < len(lines):
        number, line = i + 1, lines[i]
        stripped = line.strip()
        opening = FENCE_OPEN.match(line)
        if opening:
            indent, fence = len(opening["indent"]), opening["fence"]
            language = (opening["info"].split() or [""])[0].strip("{}.").lower()
            body, i = _fence_body(lines, i + 1, fence)
            if language in REFUSED_LANGUAGES:
                raise SampleFailed(
                    f"{origin}:{number}: a ```{language} block cannot run; write the sample as a "
                    f"```python block."
                )
            if language in RUN_LANGUAGES:
                code = "\n".join(_dedent(row, indent) for row in body)
                setup = other = None
                if pending_setup:
                    setup, pending_setup = pending_setup[1], None
                if pending_other:
                    other, pending_other = pending_other[1], None
                blocks.append(Block(number, Snippet(code, number + 1), setup, other))
            _refuse_unused(origin, pending_setup, pending_other)
            continue
        _refuse_unused(origin, pending_setup, pending_other)
        if MARKER.match(stripped):
            if stripped == SETUP_OPEN:
                end = next(
                    (j for j in range(i + 1, len(lines)) if lines[j].strip() == SETUP_CLOSE), None
                )
                if end is None:
                    raise SampleFailed(f"{origin}:{number}: <!-- sample-setup is never closed.")
                setup_code = "\n".join(
                    _dedent(row, len(line) - len(line.lstrip())) for row in lines[i + 1 : end]
                )
                pending_setup = (end + 1, Snippet(setup_code, number + 1))
                i = end + 1
                continue
            other_system = OTHER_SYSTEM.match(stripped)
            if other_system is None:
                raise SampleFailed(
                    f"{origin}:{number}: malformed marker {stripped!r}; write "
                    f"'<!-- other system: NAME -->' or a '<!-- sample-setup' comment."
                )
            name = other_system["name"]
            if name.lower() not in OTHER_SYSTEMS:
                raise SampleFailed(
                    f"{origin}:{number}: {name!r} is not another system whose configuration may "
                    f"be skipped (allowed: {', '.join(sorted(OTHER_SYSTEMS))}); samples of this "
                    f"app must run."
                )
            pending_other = (number, name.lower())
        i += 1
    _refuse_unused(origin, pending_setup, pending_other)
    return blocks


def _fence_body(lines: list[str], start: int, fence: str) -> tuple[list[str], int]:
    """Return the lines inside a fence opened just before ``start``, and the index after it."""
    for j in range(start, len(lines)):
        close = lines[j].strip()
        if close and set(close) == {fence[0]} and len(close) >= len(fence):
            return lines[start:j], j + 1
    return lines[start:], len(lines)  # Markdown closes an unclosed fence at the end of the page


def _dedent(row: str, indent: int) -> str:
    cut = 0
    while cut < indent and cut < len(row) and row[cut] in " \t":
        cut += 1
    return row[cut:]


def _refuse_unused(
    origin: str, setup: tuple[int, Snippet] | None, other: tuple[int, str] | None
) -> None:
    """Fail when a marker is not immediately followed by the python fence it belongs to.

    Called on each line that is not such a fence: a marker still pending there is stray.
    """
    if setup:
        raise SampleFailed(
            f"{origin}:{setup[1].first_line - 1}: a sample-setup comment must be immediately "
            f"followed by a ```python fence."
        )
    if other:
        raise SampleFailed(
            f"{origin}:{other[0]}: an 'other system' marker must be immediately followed by a "
            f"```python fence."
        )


# -- running a page ------------------------------------------------------------------------------


def run_page(text: str, origin: str) -> int:
    """Run the python blocks of a Markdown page in order; return how many ran.

    Raise SampleFailed, naming the page and line, when a block fails or the page's
    ``DURABLE_JOBS`` fails the system checks.
    """
    blocks = parse(text, origin)
    # Tracebacks show the page's own lines, even for a page given as a string.
    linecache.cache[origin] = (len(text), None, text.splitlines(True), origin)
    ran = 0
    with isolated_globals(origin):
        module = types.ModuleType(SAMPLE_MODULE, f"Samples of {origin}")
        module.__file__ = origin
        sys.modules[SAMPLE_MODULE] = module
        namespace = module.__dict__
        settings_line = None
        try:
            for block in blocks:
                if block.other_system:
                    continue
                if block.setup:
                    _run(
                        block.setup,
                        namespace,
                        origin,
                        f"the sample-setup of the block at line {block.line}",
                    )
                before = namespace.get("DURABLE_JOBS")
                _run(block.code, namespace, origin, f"the python block at line {block.line}")
                if namespace.get("DURABLE_JOBS") is not before:
                    settings_line = block.line
                ran += 1
            if "DURABLE_JOBS" in namespace:
                _check_settings(namespace, origin, settings_line)
        finally:
            sys.modules.pop(SAMPLE_MODULE, None)
    return ran


def _run(snippet: Snippet, namespace: dict, origin: str, what: str) -> None:
    source = "\n" * (snippet.first_line - 1) + snippet.code + "\n"
    try:
        code = compile(source, origin, "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise SampleFailed(
            f"{origin}:{exc.lineno}: {what} is not valid Python: {exc.msg}\n"
            + "".join(traceback.format_exception_only(exc))
        ) from None
    try:
        exec(code, namespace)
    except (Exception, SystemExit) as exc:
        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__.tb_next))
        line = _sample_line(exc, origin) or snippet.first_line
        raise SampleFailed(
            f"{origin}:{line}: {what} raised {type(exc).__name__}: {exc}\n\n{trace}"
        ) from None


def _sample_line(exc: BaseException, origin: str) -> int | None:
    """Return the page line of the innermost frame that ran the page's code."""
    line = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == origin:
            line = lineno
    return line


def _check_settings(namespace: dict, origin: str, line: int | None) -> None:
    """Run the app's system checks on the page's DURABLE_JOBS; fail on errors."""
    from django.core.checks.registry import registry as check_registry

    value = namespace["DURABLE_JOBS"]
    page_databases = namespace.get("DATABASES")
    page_aliases = set(page_databases) if isinstance(page_databases, dict) else set()
    app_checks = [
        check
        for check in check_registry.get_checks()
        if getattr(check, "__module__", "").startswith("django_durable_jobs.")
    ]
    assert app_checks, "the app registers no system checks: cannot validate DURABLE_JOBS"
    with override_settings(DURABLE_JOBS=value):
        messages = [m for check in app_checks for m in check(app_configs=None)]
    errors = [
        m
        for m in messages
        if m.level >= ERROR
        # DATABASE may name an alias the page's own DATABASES sample defines.
        and not (
            m.id == "durable_jobs.E006"
            and isinstance(value, dict)
            and value.get("DATABASE") in page_aliases
        )
    ]
    if errors:
        where = f"{origin}:{line}" if line else origin
        raise SampleFailed(
            f"{where}: the DURABLE_JOBS setting of this page fails the system checks:\n"
            + "\n".join(
                f"  {m.id}: {m.msg}" + (f" (hint: {m.hint})" if m.hint else "") for m in errors
            )
        )


@contextmanager
def isolated_globals(origin: str) -> Iterator[None]:
    """Undo what a page changes beyond its namespace; fail if it leaves threads running."""
    operations = dict(registry._registry)
    task_funcs = dict(registry._task_funcs)
    signals = _django_signals()
    receivers = {id(s): list(s.receivers) for s in signals}
    environ = dict(os.environ)
    handlers = {n: signal.getsignal(n) for n in (signal.SIGINT, signal.SIGTERM)}
    threads = set(threading.enumerate())
    _clear_caches()
    try:
        with override_settings():  # settings.X = ... inside the page lands in this layer
            yield
        _wait_for_threads(origin, threads)
    finally:
        _restore_registry(operations, task_funcs)
        for s in signals:
            s.receivers[:] = receivers[id(s)]
            s.sender_receivers_cache.clear()
        os.environ.clear()
        os.environ.update(environ)
        for number, handler in handlers.items():
            if handler is not None:
                signal.signal(number, handler)
        _clear_caches()


def _restore_registry(operations: dict, task_funcs: dict) -> None:
    """Undo the registrations of functions the page defined.

    Operations registered by a real module the page imported (``runjobs`` discovering ``jobs.py``
    and ``tasks.py``) stay, as they would in a process: that module is imported for good.
    """
    with registry._lock:
        for name in set(registry._registry) | set(registry._task_funcs):
            spec, func = registry._registry.get(name), registry._task_funcs.get(name)
            if spec is operations.get(name) and func is task_funcs.get(name):
                continue
            defined_by = func if func is not None else getattr(spec, "func", None)
            if getattr(defined_by, "__module__", None) != SAMPLE_MODULE:
                continue
            for current, before in (
                (registry._registry, operations),
                (registry._task_funcs, task_funcs),
            ):
                if name in before:
                    current[name] = before[name]
                else:
                    current.pop(name, None)


def _django_signals() -> list:
    from django.core import signals as core
    from django.db.models import signals as models
    from django.dispatch import Signal

    modules = [core, models]
    try:
        from django.tasks import signals as tasks
    except ImportError:  # Django 5.2
        pass
    else:
        modules.append(tasks)
    return [v for m in modules for v in vars(m).values() if isinstance(v, Signal)]


def _clear_caches() -> None:
    for cache in caches.all(initialized_only=True):
        cache.clear()


def _wait_for_threads(origin: str, before: set[threading.Thread]) -> None:
    deadline = time.monotonic() + THREAD_GRACE
    for thread in set(threading.enumerate()) - before:
        thread.join(max(0.0, deadline - time.monotonic()))
    left = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    if left:
        raise SampleFailed(
            f"{origin}: the page leaves threads running after {THREAD_GRACE:.0f} s: "
            f"{', '.join(sorted(left))}; stop what the samples start (e.g. JobManager.destroy())."
        )


# -- the pages -----------------------------------------------------------------------------------


def pages() -> list[str]:
    """Return README.md and every docs/**/*.md page, as paths from the repository root."""
    found = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
    return [p.relative_to(REPO_ROOT).as_posix() for p in found if p.is_file()]


@pytest.mark.parametrize("page", pages())
def test_page_samples_run(page: str, transactional_db: None) -> None:
    text = (REPO_ROOT / page).read_text(encoding="utf-8")
    if django.VERSION < (6, 0) and _uses_django_tasks(text, page):
        pytest.skip(f"{page} has samples of django.tasks, which needs Django 6.0 or newer")
    try:
        run_page(text, page)
    except SampleFailed as exc:
        failure = str(exc)
    else:
        return
    pytest.fail(failure, pytrace=False)  # outside the except: no "during handling" noise


def _uses_django_tasks(text: str, page: str) -> bool:
    try:
        blocks = parse(text, page)
    except SampleFailed:
        return False  # run_page reports it
    snippets = [s for b in blocks for s in (b.setup, b.code) if s and not b.other_system]
    return any(re.search(r"\bdjango\.tasks\b|DurableTask", s.code) for s in snippets)


def test_collector_finds_pages_and_blocks() -> None:
    found = pages()
    assert "README.md" in found
    assert "docs/index.md" in found
    assert len(found) >= 10, found
    counts = {
        page: len(parse((REPO_ROOT / page).read_text(encoding="utf-8"), page)) for page in found
    }
    assert counts["docs/index.md"] >= 3, counts
    assert sum(counts.values()) >= 30, counts


# -- the runner itself ---------------------------------------------------------------------------

BROKEN = """\
# A page

```python
x = 1
```

Text.

```python
y = x + 1
1 / 0
```
"""


def test_broken_sample_fails_with_page_and_line() -> None:
    with pytest.raises(SampleFailed) as failed:
        run_page(BROKEN, "docs/inline.md")
    message = str(failed.value)
    assert message.startswith(
        "docs/inline.md:11: the python block at line 9 raised ZeroDivisionError"
    )
    assert 'File "docs/inline.md", line 11' in message
    assert "1 / 0" in message  # the failing line itself is shown


def test_blocks_share_one_namespace_in_order() -> None:
    page = "```python\nx = 1\n```\n\n```python\nassert x == 1\nx = 2\n```\n"
    assert run_page(page, "docs/inline.md") == 2
    with pytest.raises(SampleFailed, match=r"inline.md:2: .* NameError"):
        run_page("```python\nprint(y)\n```\n\n```python\ny = 1\n```\n", "docs/inline.md")


def test_invalid_python_fails_with_its_line() -> None:
    with pytest.raises(
        SampleFailed, match=r"^docs/inline.md:4: the python block at line 3 is not valid"
    ):
        run_page("Text.\n\n```python\ndef f(:\n```\n", "docs/inline.md")


def test_fragments_with_ellipsis_run() -> None:
    page = '```python\nINSTALLED_APPS = [..., "django_durable_jobs"]\n\ndef f(ctx, payload): ...\n```\n'
    assert run_page(page, "docs/inline.md") == 1


def test_indented_fences_and_nested_fences() -> None:
    page = (
        "1. A step:\n\n    ```python\n    x = 1\n    ```\n\n"
        "````markdown\n```python\nthis is shown, not run\n```\n````\n"
    )
    assert run_page(page, "docs/inline.md") == 1


def test_sample_setup_runs_before_its_block() -> None:
    page = "<!-- sample-setup\nhidden = 41\n-->\n```python\nassert hidden + 1 == 42\n```\n"
    assert run_page(page, "docs/inline.md") == 1
    with pytest.raises(SampleFailed, match=r"inline.md:2: the sample-setup of the block at line 4"):
        run_page("<!-- sample-setup\n1 / 0\n-->\n```python\npass\n```\n", "docs/inline.md")


def test_sample_setup_must_precede_a_python_fence() -> None:
    with pytest.raises(SampleFailed, match="must be immediately followed"):
        run_page("<!-- sample-setup\nx = 1\n-->\n\n```python\npass\n```\n", "docs/inline.md")
    with pytest.raises(SampleFailed, match="must be immediately followed"):
        run_page("<!-- sample-setup\nx = 1\n-->\nText.\n", "docs/inline.md")


def test_other_system_marker_skips_only_allowed_systems() -> None:
    skipped = "<!-- other system: celery -->\n```python\nimport not_installed_at_all\n```\n"
    assert run_page(skipped, "docs/inline.md") == 0
    unknown = "<!-- other system: myapp -->\n```python\nimport not_installed_at_all\n```\n"
    with pytest.raises(SampleFailed, match="'myapp' is not another system"):
        run_page(unknown, "docs/inline.md")
    stray = "<!-- other system: celery -->\n\n```python\npass\n```\n"
    with pytest.raises(SampleFailed, match="must be immediately followed"):
        run_page(stray, "docs/inline.md")
    malformed = "<!-- other-system celery -->\n```python\npass\n```\n"
    with pytest.raises(SampleFailed, match="malformed marker"):
        run_page(malformed, "docs/inline.md")


def test_console_blocks_are_refused() -> None:
    with pytest.raises(SampleFailed, match="write the sample as a ```python block"):
        run_page("```pycon\n>>> 1 + 1\n2\n```\n", "docs/inline.md")


def test_durable_jobs_setting_is_checked() -> None:
    good = '```python\nDURABLE_JOBS = {"LEASE_SECONDS": 60}\n```\n'
    assert run_page(good, "docs/inline.md") == 1
    bad = 'Text.\n\n```python\nDURABLE_JOBS = {"LEASE_SECONDS": -1, "TYPO": 1}\n```\n'
    with pytest.raises(SampleFailed) as failed:
        run_page(bad, "docs/inline.md")
    assert str(failed.value).startswith("docs/inline.md:3: the DURABLE_JOBS setting")
    assert "durable_jobs.E005" in str(failed.value)
    assert "durable_jobs.E002" in str(failed.value)


def test_page_changes_are_undone() -> None:
    page = (
        "```python\n"
        "import os\n"
        "from django.conf import settings\n"
        "from django_durable_jobs import operation\n"
        "\n"
        '@operation("docs.sample_only")\n'
        "def run(ctx, payload): ...\n"
        "\n"
        "settings.DOCS_SAMPLE_FLAG = True\n"
        'os.environ["DOCS_SAMPLE_FLAG"] = "1"\n'
        "```\n"
    )
    run_page(page, "docs/inline.md")
    run_page(page, "docs/inline.md")  # the same name registers again on the next page
    from django.conf import settings

    assert registry.get("docs.sample_only") is None
    assert not hasattr(settings, "DOCS_SAMPLE_FLAG")
    assert "DOCS_SAMPLE_FLAG" not in os.environ
    assert SAMPLE_MODULE not in sys.modules


def test_tasks_a_page_defines_are_unregistered() -> None:
    pytest.importorskip("django.tasks")
    page = "```python\nfrom django.tasks import task\n\n\n@task\ndef send_invoice(order_id): ...\n```\n"
    run_page(page, "docs/inline.md")
    run_page(page, "docs/inline.md")  # another function under the same path: not refused
    assert f"{SAMPLE_MODULE}.send_invoice" not in registry.all_operations()
    assert f"{SAMPLE_MODULE}.send_invoice" not in registry.task_paths()
