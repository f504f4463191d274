"""``manage.py jobs token create|revoke|list``: bearer tokens of the REST API.

``jobs.py`` (the ``jobs`` command) calls :func:`add_token_parser` to add the ``token`` subcommand
and :func:`handle_token` to run it. A new token is printed once and never stored in clear.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model

from ..conf import jobs_settings
from ..errors import JobError
from ..models import ApiToken
from .tokens import create_token, revoke_token


def add_token_parser(subparsers) -> Any:
    """Add ``token`` with ``create``, ``revoke`` and ``list`` to a ``jobs`` subparsers action."""
    token = subparsers.add_parser("token", help="manage REST API bearer tokens")
    actions = token.add_subparsers(dest="token_command", metavar="{create,revoke,list}")
    actions.required = True
    create = actions.add_parser("create", help="create a token and print it once")
    create.add_argument("--user", required=True, help="username the token acts as")
    create.add_argument("--scope", required=True, help="the only scope the token can see")
    create.add_argument("--name", default="", help="a label to recognise the token by")
    revoke = actions.add_parser("revoke", help="revoke a token by its id")
    revoke.add_argument("token_id", type=int, metavar="ID")
    listing = actions.add_parser("list", help="list tokens (never their secrets)")
    listing.add_argument("--user", default=None, help="only this user's tokens")
    listing.add_argument("--all", action="store_true", help="include revoked tokens")
    return token


def handle_token(options: dict[str, Any], stdout) -> int:
    """Run a ``jobs token`` subcommand; write to ``stdout``; return the exit status."""
    command = options.get("token_command")
    if command == "create":
        return _create(options, stdout)
    if command == "revoke":
        if revoke_token(options["token_id"]):
            stdout.write(f"Revoked token {options['token_id']}.\n")
            return 0
        stdout.write(f"Error: no active token with id {options['token_id']}.\n")
        return 1
    if command == "list":
        return _list(options, stdout)
    stdout.write("Error: use `jobs token create|revoke|list`.\n")
    return 2


def _create(options: dict[str, Any], stdout) -> int:
    User = get_user_model()
    try:
        user = User._default_manager.get_by_natural_key(options["user"])
    except User.DoesNotExist:
        stdout.write(f"Error: no user {options['user']!r}.\n")
        return 1
    try:
        issued = create_token(user, options["scope"], options.get("name") or "")
    except JobError as exc:
        stdout.write(f"Error: {exc.message}\n")
        return 1
    row = issued.row
    stdout.write(
        f"Created token {row.pk} ({row.name or 'unnamed'}) for {user.get_username()} in scope "
        f"{row.scope!r}.\nToken (shown only now; store it safely):\n{issued.token}\n"
    )
    return 0


def _list(options: dict[str, Any], stdout) -> int:
    rows = (
        ApiToken.objects.using(jobs_settings.DATABASE)
        .select_related("user")
        .order_by("created_at", "id")
    )
    if options.get("user"):
        rows = rows.filter(**{f"user__{get_user_model().USERNAME_FIELD}": options["user"]})
    if not options.get("all"):
        rows = rows.filter(revoked_at__isnull=True)
    stdout.write("ID\tPREFIX\tUSER\tSCOPE\tNAME\tCREATED\tLAST USED\tREVOKED\n")
    for row in rows:
        fields = [
            row.pk,
            f"djt_{row.prefix}_…",
            row.user.get_username(),
            row.scope,
            row.name or "-",
            row.created_at.isoformat(timespec="seconds"),
            row.last_used_at.isoformat(timespec="seconds") if row.last_used_at else "-",
            row.revoked_at.isoformat(timespec="seconds") if row.revoked_at else "-",
        ]
        stdout.write("\t".join(str(f) for f in fields) + "\n")
    return 0
