"""Mint, find and revoke the REST API's bearer tokens: rows of :class:`ApiToken`.

A token is made once, stored as a SHA-256 hash, and looked up by a public prefix.

A token reads ``djt_<prefix>_<secret>``. The prefix (12 hex digits) is public and finds the row;
the secret (43 URL-safe characters) is never stored, only ``sha256(secret)``, which is compared in
constant time.

A token may be limited to a list of operations (``ApiToken.operations``; empty means every
registered one) and may expire (``ApiToken.expires_at``): an expired token is refused exactly like
an unknown one.

Plain Django, no django-ninja: the REST API authenticates with these functions, ``manage.py jobs
token`` and the admin mint and revoke with them. The old path ``django_durable_jobs.api.tokens``
is this module (served by :mod:`django_durable_jobs._aliases`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from ..rules import validation
from ..rules.conf import jobs_settings
from ..rules.errors import InputInvalid
from . import ApiToken

TOKEN_PREFIX = "djt"
TOKEN_RE = re.compile(r"^djt_([0-9a-f]{12})_([A-Za-z0-9_\-]{20,128})$")
_DUMMY_HASH = hashlib.sha256(b"not-a-token").hexdigest()


def hash_secret(secret: str) -> str:
    """Return the lowercase hex SHA-256 of the secret's UTF-8 bytes."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class IssuedToken:
    """A new token: ``token`` is the only copy of the secret and is shown once."""

    row: ApiToken
    token: str


def _alias() -> str:
    return jobs_settings.DATABASE


def token_operations(operations: Iterable[str] | None) -> list[str]:
    """Return the checked, de-duplicated operation names a token is limited to ([] = every one)."""
    if operations is None:
        return []
    if isinstance(operations, (str, bytes)) or not isinstance(operations, Iterable):
        raise InputInvalid(
            f"operations is a list of operation names; got {type(operations).__name__}."
        )
    names: list[str] = []
    for value in operations:
        name = validation.operation(value)
        if name not in names:
            names.append(name)
    return names


def token_expiry(expires_at: datetime | None, now: datetime | None = None) -> datetime | None:
    """Return ``expires_at`` when it is an aware datetime in the future (or None: never)."""
    if expires_at is None:
        return None
    validation.aware(expires_at, "expires_at")
    now = now or timezone.now()
    if expires_at <= now:
        raise InputInvalid(
            f"expires_at must be in the future; got {expires_at.isoformat()} "
            f"(now is {now.isoformat(timespec='seconds')})."
        )
    return expires_at


def token_allows(row: ApiToken, operation: str) -> bool:
    """Return True when the token ``row`` may submit ``operation``."""
    limited: Any = row.operations
    if limited is None or limited == []:
        return True
    return isinstance(limited, list) and operation in limited  # anything else: refuse


def token_expired(row: ApiToken, now: datetime | None = None) -> bool:
    """Return True when the token ``row`` has an expiry time that has come."""
    return row.expires_at is not None and row.expires_at <= (now or timezone.now())


def create_token(
    user,
    scope: str,
    name: str = "",
    *,
    operations: Iterable[str] | None = None,
    expires_at: datetime | None = None,
) -> IssuedToken:
    """Create a token for ``user`` acting in ``scope``; return it with its one-time text.

    ``operations`` limits what the token may submit (None or empty: every registered operation);
    ``expires_at`` (an aware datetime in the future) ends it, as if revoked, at that time.
    """
    scope = validation.scope(scope)
    if name:
        validation.name(name, "token name")
    operations = token_operations(operations)
    expires_at = token_expiry(expires_at)
    if user is None or not getattr(user, "pk", None):
        raise InputInvalid("A token needs a saved user.")
    alias = _alias()
    for _ in range(5):
        prefix = secrets.token_hex(6)
        if not ApiToken.objects.using(alias).filter(prefix=prefix).exists():
            break
    else:  # pragma: no cover - 48 random bits colliding five times
        raise InputInvalid("Could not pick a free token prefix; try again.")
    secret = secrets.token_urlsafe(32)
    row = ApiToken.objects.using(alias).create(
        user=user,
        scope=scope,
        name=name or "",
        prefix=prefix,
        token_hash=hash_secret(secret),
        operations=operations,
        expires_at=expires_at,
    )
    return IssuedToken(row=row, token=f"{TOKEN_PREFIX}_{prefix}_{secret}")


def authenticate_token(text: str) -> ApiToken | None:
    """Return the active, unexpired token ``text`` names (its user active too), or None.

    Never raises.
    """
    if not isinstance(text, str):
        return None
    match = TOKEN_RE.match(text.strip())
    if match is None:
        return None
    prefix, secret = match.groups()
    row = (
        ApiToken.objects.using(_alias())
        .select_related("user")
        .filter(prefix=prefix, revoked_at__isnull=True)
        .first()
    )
    expected = row.token_hash if row is not None else _DUMMY_HASH
    if not hmac.compare_digest(expected, hash_secret(secret)) or row is None:
        return None
    if not row.user.is_active:
        return None
    now = timezone.now()
    if token_expired(row, now):
        return None
    ApiToken.objects.using(_alias()).filter(pk=row.pk).update(last_used_at=now)
    row.last_used_at = now
    return row


def revoke_token(token_id: int) -> bool:
    """Revoke the token with primary key ``token_id``; False when there is no active one."""
    return bool(
        ApiToken.objects.using(_alias())
        .filter(pk=token_id, revoked_at__isnull=True)
        .update(revoked_at=timezone.now())
    )
