"""reference/commands.md: every management command of the app, every sub-command and option.

Read from each command's own argparse parser (``create_parser``), so help texts and defaults
are the ones ``manage.py <command> --help`` prints.
"""

from __future__ import annotations

import argparse

from .text import cell, code, py_literal, table

APP = "django_durable_jobs"
# Options every Django command takes; listed once, from the first command's parser.
DJANGO_COMMON = frozenset(
    {
        "--version",
        "--verbosity",
        "--settings",
        "--pythonpath",
        "--traceback",
        "--no-color",
        "--force-color",
        "--skip-checks",
    }
)


def app_commands() -> list[str]:
    """Return the names of this app's management commands."""
    from django.core.management import get_commands

    return sorted(name for name, app in get_commands().items() if app == APP)


def command_parser(name: str) -> argparse.ArgumentParser:
    """Return the parser of ``manage.py <name>``."""
    from django.core.management import load_command_class

    return load_command_class(APP, name).create_parser("manage.py", name)


def _is_common(action: argparse.Action) -> bool:
    return isinstance(action, argparse._HelpAction) or bool(
        set(action.option_strings) & DJANGO_COMMON
    )


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    return parser._get_formatter()._expand_help(action)


def _spelling(action: argparse.Action) -> str:
    """Return how the argument is written: its names and the name of its value."""
    if not action.option_strings:
        return str(action.metavar or action.dest)
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return names
    return f"{names} {action.metavar or action.dest.upper()}"


def _meaning(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """Return the help text, then what argparse itself says about the value."""
    parts = [_help(parser, action)]
    if action.nargs in ("+", "*"):
        parts.append("One or more, separated by spaces." if action.nargs == "+" else "Any number.")
    if action.choices:
        parts.append("One of " + ", ".join(code(c) for c in action.choices) + ".")
    if isinstance(action, argparse._AppendAction) and "repeat" not in parts[0]:
        parts.append("Repeatable.")
    parts = [p for p in parts if p]
    ended = [p if p[-1] in ".!?" else f"{p}." for p in parts[:-1]]  # the last stays as written
    return " ".join([*ended, *parts[-1:]])


def _default(action: argparse.Action) -> str:
    if not action.option_strings:
        return "required"
    if action.required:
        return "required"
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS):
        return "—"
    return code(py_literal(action.default))


def option_rows(parser: argparse.ArgumentParser) -> list[tuple[str, str, str]]:
    """Return (spelling, default, help) for each argument of ``parser`` but the common ones."""
    rows = []
    for action in parser._actions:
        if _is_common(action) or isinstance(action, argparse._SubParsersAction):
            continue
        rows.append((_spelling(action), _default(action), _meaning(parser, action)))
    return rows


def _section(prog: str, parser: argparse.ArgumentParser, about: str, level: int) -> list[str]:
    parts = [f"{'#' * level} `{prog}`\n"]
    if about:
        parts.append(about[:1].upper() + about[1:].rstrip(".") + ".\n")
    rows = option_rows(parser)
    if rows:
        parts.append(
            table(
                ["Argument", "Default", "Meaning"],
                [(code(s), d, cell(h)) for s, d, h in rows],
            )
        )
    sub = _subparsers(parser)
    if sub is not None:
        helps = {a.dest: a.help or "" for a in sub._choices_actions}
        for name, child in sub.choices.items():
            parts += _section(f"{prog} {name}", child, helps.get(name, ""), level + 1)
    return parts


def common_rows() -> list[tuple[str, str]]:
    """Return (spelling, help) of Django's options that every command takes."""
    parser = command_parser(app_commands()[0])
    return [
        (_spelling(a), _meaning(parser, a))
        for a in parser._actions
        if set(a.option_strings) & DJANGO_COMMON
    ]


def commands_markdown() -> str:
    """Return the command sections of reference/commands.md."""
    parts = []
    for name in app_commands():
        parser = command_parser(name)
        parts += _section(f"manage.py {name}", parser, parser.description or "", 2)
    parts += [
        "## Options of every command\n",
        "Django's own; `-h`, `--help` prints a command's help.\n",
        table(["Option", "Meaning"], [(code(s), cell(h)) for s, h in common_rows()]),
    ]
    return "\n".join(parts)
