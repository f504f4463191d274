"""The package's rooms import only downward: no module reaches up to a layer built on it.

Read from the source with ``ast`` (imports inside functions count too), so a new upward import
fails here before it turns into an import cycle or a store that depends on its own callers.

A room is a top-level package of ``django_durable_jobs`` (``rules``, ``models``, ``store``…) or a
module left at the root (``checks``, ``submission``…). An import through an old path of a moved
module (``from ..dbvendor import x``, served by ``django_durable_jobs._aliases``) counts as an
import of the room the module lives in now, so these rules read the same before and after a file
is rewritten to the new paths.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import django_durable_jobs
from django_durable_jobs._aliases import MOVED

PACKAGE = Path(django_durable_jobs.__file__).resolve().parent

# Lowest first. A module may import from its own layer and the layers before it.
LAYERS = [
    {"formatting", "observability", "_aliases"},
    {"rules"},
    {"schedules"},
    {"models", "migrations"},
    {"database", "stats"},
    {"checks"},
    {"store"},
    {"submission", "workflows", "worker", "metrics"},
    {"manager"},
    {"admin", "api", "management", "apps", "backends", "__init__"},
]
LAYER_OF = {room: index for index, rooms in enumerate(LAYERS) for room in rooms}


def _module_of(path: Path) -> list[str]:
    """Return the dotted parts of the module at ``path``: ``["store"]`` for ``store/__init__.py``."""
    module = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if module[-1] == "__init__":
        module.pop()
    return module


def _exists(module: list[str]) -> bool:
    base = PACKAGE.joinpath(*module)
    return not module or base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _current(module: list[str]) -> list[str]:
    """Return where ``module`` lives now: an old path of a moved module names its new home."""
    if _exists(module):
        return module
    for length in range(len(module), 0, -1):
        new = MOVED.get(".".join(module[:length]))
        if new is not None and not _exists(module[:length]):  # a real module wins
            return [*new.split("."), *module[length:]]
    return module


def _through(old: list[str], new: list[str]) -> set[str]:
    """Return the real package an import of ``old`` runs on its way to ``new`` in another room.

    An old path below a package runs that package first: ``import django_durable_jobs.api.tokens``
    runs ``api/__init__.py`` (and with it django-ninja) before the alias hands back
    ``models.tokens``, so it is an import of ``api`` too.
    """
    if old and new and old[0] != new[0] and _exists(old[:1]):
        return {old[0]}
    return set()


def _imported_modules(
    path: Path, source: str | None = None, *, at_run_time: bool = False
) -> set[str]:
    """Return the modules (and names) of this package that the module at ``path`` imports.

    Every import statement counts, at the top of the module or inside a function or method (a
    lazy import). ``source`` stands in for the file's text. ``at_run_time`` leaves out the
    imports only a type checker reads (``if TYPE_CHECKING:``).
    """
    module = _module_of(path)
    package = module if path.name == "__init__.py" else module[:-1]
    source = path.read_text() if source is None else source
    found = set()
    tree = ast.parse(source, str(path))
    if at_run_time:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
                node.body = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                old = [*base, *(node.module.split(".") if node.module else [])]
            elif (node.module or "").split(".")[0] == "django_durable_jobs":
                old = node.module.split(".")[1:]
            else:
                continue
            target = _current(old)
            found |= _through(old, target)
            for alias in node.names:  # ``from .. import validation``: the name may be a module
                named = _current([*target, alias.name])
                found.add(".".join(named if _exists(named) else target))
                found |= _through(target, named)  # ``from ..api import tokens`` runs ``api``
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("django_durable_jobs."):
                    old = alias.name.split(".")[1:]
                    found.add(".".join(_current(old)))
                    found |= _through(old, _current(old))
    found.discard("")
    return found


def _room(path: Path) -> str:
    """Return the top-level room of a module: ``store`` for ``store/claims.py``."""
    return _module_of(path)[0] if _module_of(path) else "__init__"


def _imported_rooms(path: Path) -> set[str]:
    """Return the rooms of this package that the module at ``path`` imports."""
    return {module.split(".")[0] for module in _imported_modules(path)}


def _modules_in(room: str) -> list[Path]:
    folder = PACKAGE / room
    return sorted(folder.rglob("*.py")) if folder.is_dir() else [PACKAGE / f"{room}.py"]


def test_every_room_has_a_layer():
    rooms = {_room(path) for path in PACKAGE.rglob("*.py")}
    assert rooms - set(LAYER_OF) == set()


def test_no_module_imports_a_layer_above_its_own():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        room = _room(path)
        for target in _imported_rooms(path) - {room}:
            if target in LAYER_OF and LAYER_OF[target] > LAYER_OF[room]:
                upward.append(f"{path.relative_to(PACKAGE)} imports {target}")
    assert upward == []


def test_an_old_path_counts_as_the_room_it_moved_to():
    assert _current(["dbvendor"]) == ["database", "dbvendor"]
    assert _current(["values", "Lease"]) == ["rules", "values", "Lease"]
    assert _current(["models"]) == ["models"]
    assert _current(["store", "base"]) == ["store", "base"]


def test_an_import_inside_a_function_counts():
    jobs = PACKAGE / "management" / "commands" / "jobs.py"
    lazy = textwrap.dedent(
        """
        class Command:
            def handle(self):
                from ...api import routes
        """
    )
    assert _imported_modules(jobs, lazy) == {"api.routes"}
    assert _imported_modules(jobs, "def f():\n    import django_durable_jobs.api\n") == {"api"}


def test_an_old_path_below_a_package_runs_that_package():
    jobs = PACKAGE / "management" / "commands" / "jobs.py"
    through = {
        "from ...api.tokens import create_token": {"api", "models.tokens"},
        "from ...api import tokens": {"api", "models.tokens"},
        "import django_durable_jobs.api.cli": {"api", "management.commands._tokens"},
        "from ...dbvendor import vendor": {"database.dbvendor"},  # the root runs anyway
        "from ...models.tokens import create_token": {"models.tokens"},
    }
    for source, modules in through.items():
        assert _imported_modules(jobs, source) == modules, source


def test_the_vocabulary_needs_no_models_and_no_store():
    assert _imported_modules(PACKAGE / "rules" / "vocabulary.py") <= {"rules.validation"}


def test_the_rules_need_no_models_and_no_database():
    for path in _modules_in("rules"):
        assert _imported_rooms(path) <= {"rules"}, path
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("django.db"):
                assert node.module == "django.db.models.enums", path  # TextChoices, no connection


def test_formatting_and_observability_import_nothing_of_the_package():
    for room in ("formatting", "observability", "_aliases"):
        for path in _modules_in(room):
            assert _imported_rooms(path) <= {room}, path


def test_the_api_and_the_commands_do_not_import_each_other():
    crossing = [
        f"{path.relative_to(PACKAGE)} imports {target}"
        for room, other in (("api", "management"), ("management", "api"))
        for path in _modules_in(room)
        for target in _imported_rooms(path) & {other}
    ]
    assert crossing == []


# -- inside the store and the worker ----------------------------------------------------------------

FACES = (
    "store",
    "worker",
)  # packages whose modules the rest of the package reaches only by the face


def test_the_client_and_the_fence_import_no_other_room_of_the_store():
    for name in ("client", "fence"):
        imported = _imported_modules(PACKAGE / "store" / f"{name}.py", at_run_time=True)
        assert {m for m in imported if m.startswith("store")} == set(), name


def test_code_outside_the_store_and_the_worker_imports_only_their_faces():
    reached = []
    for path in sorted(PACKAGE.rglob("*.py")):
        room = _room(path)
        for module in _imported_modules(path):
            face, _, inner = module.partition(".")
            if face in FACES and face != room and inner and not _names_in_face(face, inner):
                reached.append(f"{path.relative_to(PACKAGE)} imports {module}")
    assert reached == []


def _names_in_face(face: str, name: str) -> bool:
    """Return True when ``name`` is a name the face exports rather than one of its modules."""
    return not _exists([face, name.split(".")[0]])


def test_only_the_fence_filters_on_the_fencing_epoch():
    # The thorough form of this rule is tests/store/test_fence_room.py; this one keeps the worker
    # and the surfaces to it too.
    spelled = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "store" / "fence.py" or "migrations" in path.parts:
            continue
        text = path.read_text()
        for form in ("fencing_epoch=", "fencing_epoch__", ".fencing_epoch ==", ".fencing_epoch !="):
            if form in text:
                spelled.append(f"{path.relative_to(PACKAGE)}: {form}")
    assert spelled == []
