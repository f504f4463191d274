"""The package's rooms import only downward: no module reaches up to a layer built on it.

Read from the source with ``ast`` (imports inside functions count too), so a new upward import
fails here before it turns into an import cycle or a store that depends on its own callers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import django_durable_jobs

PACKAGE = Path(django_durable_jobs.__file__).resolve().parent

# Lowest first. A module may import from its own layer and the layers before it.
LAYERS = [
    {"errors", "conf", "expressions", "humanize", "terminal"},
    {"validation", "retry", "jsontext", "tracing", "history"},
    {"vocabulary", "registry"},
    {"values", "execution", "outcome"},
    {"schedules"},
    {"querysets", "models", "migrations"},
    {"dbvendor", "transactions", "checks", "rows", "quotas", "stats"},
    {"store"},
    {"submission", "worker", "metrics"},
    {"manager"},
    {"admin", "api", "management", "apps", "backends", "__init__"},
]
LAYER_OF = {room: index for index, rooms in enumerate(LAYERS) for room in rooms}


def _room(path: Path) -> str:
    """Return the top-level room of a module: ``store`` for ``store/claims.py``."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return parts[0]


def _imported_rooms(path: Path) -> set[str]:
    """Return the rooms of this package that the module at ``path`` imports."""
    module = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if module[-1] == "__init__":
        module.pop()
    rooms = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module[: len(module) - node.level + (path.name == "__init__.py")]
                target = [*base, *(node.module.split(".") if node.module else [])]
            elif (node.module or "").startswith("django_durable_jobs"):
                target = node.module.split(".")[1:]
            else:
                continue
            if target:
                rooms.add(target[0])
            else:  # ``from .. import validation``: each name is a room
                rooms.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("django_durable_jobs."):
                    rooms.add(alias.name.split(".")[1])
    return rooms


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


def test_the_vocabulary_needs_no_models_and_no_store():
    assert _imported_rooms(PACKAGE / "vocabulary.py") <= {"validation"}
