"""Serve the old import paths of the modules that moved into the layer packages.

The package root once held about twenty loose modules; they now live in packages named for the
layer they form (``rules``, ``formatting``, ``observability``, ``models``, ``database``); the API
tokens and their ``jobs token`` subcommand left ``api``, so that it and ``management`` import
nothing of each other. Code, settings and migrations written against the old paths keep working:
``import django_durable_jobs.errors`` and ``from django_durable_jobs.values import Lease`` give the
very module object imported from the new path, and :data:`sys.modules` holds that one object under
both names, so no model or exception class is ever created twice.

:class:`MovedModuleFinder` answers only a name in :data:`MOVED` for which the package's own
directory has no file: a real module at an old path always wins. It sits first on
:data:`sys.meta_path`, before any finder that could answer an old path from somewhere else (an
editable install's finder maps the package to its source tree). Importing this module installs
the finder once; ``django_durable_jobs/__init__.py`` imports it first, so an old path works even as
the very first import of a fresh interpreter.

Static tools (type checkers, the API reference) see only the new paths: new code imports those.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

PACKAGE = __name__.rpartition(".")[0]

#: Old path below the package → new path below the package.
MOVED: dict[str, str] = {
    # the words and rules: pure, no models, no database
    "errors": "rules.errors",
    "conf": "rules.conf",
    "jsontext": "rules.jsontext",
    "validation": "rules.validation",
    "retry": "rules.retry",
    "vocabulary": "rules.vocabulary",
    "registry": "rules.registry",
    "quotas": "rules.quotas",
    "values": "rules.values",
    "execution": "rules.execution",
    # the surfaces' shared formatting, and what the app tells observers
    "terminal": "formatting.terminal",
    "humanize": "formatting.humanize",
    "tracing": "observability.tracing",
    "history": "observability.history",
    # the job table, then the database dialect and transactions built on it
    "querysets": "models.querysets",
    "expressions": "models.expressions",
    "rows": "models.rows",
    "dbvendor": "database.dbvendor",
    "transactions": "database.transactions",
    # the store's outcome helpers became the outcome value's (served once the file is gone)
    "store.outcomes": "rules.outcome",
    # the API's tokens: minted beside their model, managed by the jobs command (no ninja needed)
    "api.tokens": "models.tokens",
    "api.cli": "management.commands._tokens",
}


class _AlreadyImported(importlib.abc.Loader):
    """Load an old path as the module imported from its new path."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.own_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Run nothing (the module ran once, under its new name); give back its own spec.

        The import system sets ``__spec__`` to the old path's spec before calling this;
        ``importlib.reload``, ``inspect`` and relative imports (which check it against
        ``__package__``) read it, so it must name the new home again.
        """
        module.__spec__ = self.own_spec


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Find an old path of a moved module, unless a real module is there."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        prefix = f"{PACKAGE}."
        new = MOVED.get(fullname.removeprefix(prefix)) if fullname.startswith(prefix) else None
        if new is None or importlib.machinery.PathFinder.find_spec(fullname, path) is not None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AlreadyImported(prefix + new))


def moved_module(name: str) -> ModuleType:
    """Return the moved module once named ``django_durable_jobs.<name>``, for attribute access."""
    if name not in MOVED:
        raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}")
    return importlib.import_module(f"{PACKAGE}.{name}")


if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, MovedModuleFinder())
