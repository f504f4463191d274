"""``manage.py jobs token create|revoke|list``: bearer tokens of the REST API.

``create`` can limit a token to operations (``--operation``, repeatable) and give it an end
(``--expires-in`` or ``--expires-at``); ``list`` shows both (``*``: every operation).

``jobs.py`` (the ``jobs`` command) calls :func:`add_token_parser` to add the ``token`` subcommand
and :func:`handle_token` to run it. A new token is printed once and never stored in clear. Tokens
are minted and revoked by :mod:`django_durable_jobs.models.tokens` (plain Django), so the
subcommand works whether or not the REST API (django-ninja) is installed; ``list`` prints through
the ``jobs`` command's own formatter (``_jobs_format``). The old path
``django_durable_jobs.api.cli`` is this module (served by :mod:`django_durable_jobs._aliases`).
Django ignores command modules whose name starts with ``_``, so this one is no command.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError
from django.utils import timezone

from ...models import ApiToken
from ...models.tokens import TOKEN_PREFIX, create_token, revoke_token, token_expired
from ...rules import registry, validation
from ...rules.conf import jobs_settings
from ...rules.errors import InputInvalid, JobError
from ._jobs_format import aligned, dumps

DURATION_RE = re.compile(r"(\d+)([wdhms])")
DURATION_UNITS = {"w": 604_800, "d": 86_400, "h": 3_600, "m": 60, "s": 1}


def add_token_parser(subparsers) -> Any:
    """Add ``token`` with ``create``, ``revoke`` and ``list`` to a ``jobs`` subparsers action."""
    token = subparsers.add_parser("token", help="manage REST API bearer tokens")
    actions = token.add_subparsers(dest="token_command", metavar="{create,revoke,list}")
    actions.required = True
    create = actions.add_parser("create", help="create a token and print it once")
    create.add_argument("--user", required=True, help="username the token acts as")
    create.add_argument("--scope", required=True, help="the only scope the token can see")
    create.add_argument("--name", default="", help="a label to recognise the token by")
    create.add_argument(
        "--operation",
        action="append",
        dest="operations",
        default=None,
        metavar="NAME",
        help="an operation the token may submit (repeatable; default: every operation)",
    )
    expiry = create.add_mutually_exclusive_group()
    expiry.add_argument(
        "--expires-in",
        metavar="DURATION",
        help="end the token after this long: seconds, or e.g. 90m, 12h, 30d, 1w2d",
    )
    expiry.add_argument(
        "--expires-at",
        metavar="ISO",
        help="end the token at this time, with a UTC offset (2030-01-31T12:00:00+00:00)",
    )
    revoke = actions.add_parser("revoke", help="revoke a token by its id")
    revoke.add_argument("token_id", type=int, metavar="ID")
    listing = actions.add_parser("list", help="list tokens (never their secrets)")
    listing.add_argument("--user", default=None, help="only this user's tokens")
    listing.add_argument("--all", action="store_true", help="include revoked tokens")
    listing.add_argument("--json", action="store_true", help="print JSON for scripts")
    return token


def handle_token(options: dict[str, Any], stdout) -> int:
    """Run a ``jobs token`` subcommand and write to ``stdout``; return 0.

    A refusal is a ``CommandError`` that names the option at fault; nothing is written then.
    """
    command = options.get("token_command")
    if command == "create":
        return _create(options, stdout)
    if command == "revoke":
        if not revoke_token(options["token_id"]):
            raise CommandError(
                f"No active token has id {options['token_id']}; see jobs token list."
            )
        stdout.write(f"Revoked token {options['token_id']}.\n")
        return 0
    if command == "list":
        return _list(options, stdout)
    raise CommandError("Say what to do: jobs token create|revoke|list.", returncode=2)


def _option(name: str, check: Any, value: Any) -> Any:
    """Return ``check(value)``; a refusal becomes a ``CommandError`` naming the option."""
    try:
        return check(value)
    except JobError as exc:
        raise CommandError(f"{name}: {exc.message}") from None


def _create(options: dict[str, Any], stdout) -> int:
    User = get_user_model()
    _option("--user", lambda u: validation.encodable(u, "--user"), options["user"])
    try:
        user = User._default_manager.get_by_natural_key(options["user"])
    except User.DoesNotExist:
        raise CommandError(f"--user: there is no user {options['user']!r}.") from None
    _option("--scope", validation.scope, options["scope"])
    if options.get("name"):
        _option("--name", lambda n: validation.name(n, "token name"), options["name"])
    for name in options.get("operations") or ():
        _option("--operation", validation.operation, name)
    expiry_option = "--expires-in" if options.get("expires_in") is not None else "--expires-at"
    try:
        expires_at = _expiry(options.get("expires_in"), options.get("expires_at"))
        issued = create_token(
            user,
            options["scope"],
            options.get("name") or "",
            operations=options.get("operations"),
            expires_at=expires_at,
        )
    except JobError as exc:
        message = exc.message
        if not message.startswith("--"):
            message = f"{expiry_option}: {message}"
        raise CommandError(message) from None
    row = issued.row
    limits = f"operations: {_operations(row)}; expires: {_expires(row)}"
    stdout.write(
        f"Created token {row.pk} ({row.name or 'unnamed'}) for {user.get_username()} in scope "
        f"{row.scope!r} ({limits}).\n"
    )
    for name in row.operations:
        if registry.get(name) is None:
            stdout.write(f"Note: no @operation {name!r} is registered in this project.\n")
    stdout.write(f"Token (shown only now; store it safely):\n{issued.token}\n")
    return 0


def parse_duration(text: str) -> timedelta:
    """Return the positive duration ``text`` names: whole seconds, or units like ``1d12h``."""
    text = (text or "").strip().lower()
    if text.isascii() and text.isdigit():  # not "²", which isdigit() but int() refuses
        seconds = int(text)
    elif text and DURATION_RE.sub("", text) == "":
        seconds = sum(int(n) * DURATION_UNITS[unit] for n, unit in DURATION_RE.findall(text))
    else:
        raise InputInvalid(
            f"--expires-in is a duration like 3600, 90m, 12h, 30d or 1w2d; got {text!r}."
        )
    if seconds <= 0:
        raise InputInvalid(f"--expires-in must be longer than zero; got {text!r}.")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise InputInvalid(f"--expires-in is too long; got {text!r}.") from None


def _expiry(expires_in: str | None, expires_at: str | None) -> datetime | None:
    """Return the expiry time the options ask for (None: the token never expires)."""
    if expires_in is not None:
        try:
            return timezone.now() + parse_duration(expires_in)
        except OverflowError:
            raise InputInvalid(f"--expires-in is too long; got {expires_in!r}.") from None
    if expires_at is None:
        return None
    try:
        when = datetime.fromisoformat(expires_at.strip())
    except ValueError:
        raise InputInvalid(
            f"--expires-at is an ISO 8601 time like 2030-01-31T12:00:00+00:00; got {expires_at!r}."
        ) from None
    if when.tzinfo is None:
        raise InputInvalid(
            f"--expires-at needs a UTC offset (+00:00 or Z) to name one moment; got {expires_at!r}."
        )
    return when


def _operations(row: ApiToken) -> str:
    return ",".join(row.operations) if row.operations else "*"


def _expires(row: ApiToken) -> str:
    if row.expires_at is None:
        return "never"
    text = row.expires_at.isoformat(timespec="seconds")
    return f"{text} (expired)" if token_expired(row) else text


TOKEN_COLUMNS = (
    ("id", "ID"),
    ("token", "PREFIX"),
    ("user", "USER"),
    ("scope", "SCOPE"),
    ("name", "NAME"),
    ("operations", "OPERATIONS"),
    ("expires", "EXPIRES"),
    ("created_at", "CREATED"),
    ("last_used_at", "LAST USED"),
    ("revoked_at", "REVOKED"),
)


def _list(options: dict[str, Any], stdout) -> int:
    """Print the tokens as ``jobs list`` prints jobs: aligned columns, or JSON with ``--json``."""
    rows = (
        ApiToken.objects.using(jobs_settings.DATABASE)
        .select_related("user")
        .order_by("created_at", "id")
    )
    if options.get("user"):
        # An argv byte that is not UTF-8 arrives as a lone surrogate, which no driver can send.
        _option("--user", lambda u: validation.encodable(u, "--user"), options["user"])
        rows = rows.filter(**{f"user__{get_user_model().USERNAME_FIELD}": options["user"]})
    if not options.get("all"):
        rows = rows.filter(revoked_at__isnull=True)
    data = [_token_row(row) for row in rows]
    if options.get("json"):
        stdout.write(dumps(data) + "\n")
    elif data:
        cells = [[row[key] for key, _ in TOKEN_COLUMNS] for row in data]
        stdout.write(aligned([title for _, title in TOKEN_COLUMNS], cells) + "\n")
    else:
        stdout.write("No tokens match.\n")
    return 0


def _token_row(row: ApiToken) -> dict[str, Any]:
    """Return one token as ``jobs token list`` shows it: never its hash."""

    def iso(moment: datetime | None) -> str | None:
        return moment.isoformat(timespec="seconds") if moment else None

    return {
        "id": row.pk,
        "prefix": row.prefix,
        "token": f"{TOKEN_PREFIX}_{row.prefix}_…",
        "user": row.user.get_username(),
        "scope": row.scope,
        "name": row.name,
        "operations": _operations(row),
        "expires_at": iso(row.expires_at),
        "expires": _expires(row),
        "expired": token_expired(row),
        "created_at": iso(row.created_at),
        "last_used_at": iso(row.last_used_at),
        "revoked_at": iso(row.revoked_at),
    }
