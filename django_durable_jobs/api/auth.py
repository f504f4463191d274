"""Who is calling, in which scope, with which permissions.

Two ways in, tried in order: a bearer token (``Authorization: Bearer djt_...``), then the Django
session. Session calls that write (POST) must pass Django's CSRF check; an anonymous caller gets
401, not a CSRF refusal. Bearer calls need no CSRF token: the browser never sends them on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest
from ninja.errors import AuthorizationError, HttpError
from ninja.security import HttpBearer
from ninja.security.apikey import APIKeyCookie
from ninja.utils import check_csrf

from ..models import ApiToken
from ..models.tokens import authenticate_token, token_allows
from ..rules import validation
from ..rules.conf import jobs_settings
from ..rules.errors import InputInvalid

PERMISSIONS = {
    "view": "durable_jobs.view_job",
    "add": "durable_jobs.add_job",
    "cancel": "durable_jobs.cancel_job",
    "retry": "durable_jobs.retry_job",
    "view_schedule": "durable_jobs.view_schedule",
    "change_schedule": "durable_jobs.change_schedule",
    "cancel_workflow": "durable_jobs.cancel_workflow",
    "retry_workflow": "durable_jobs.retry_workflow",
}
# What each permission allows, for the refusal's message.
ALLOWS = {
    "view_schedule": "see schedules",
    "change_schedule": "pause or resume schedules",
    "cancel_workflow": "cancel workflows",
    "retry_workflow": "retry workflows",
}


class BearerToken(HttpBearer):
    """``Authorization: Bearer <token>`` with an active :class:`ApiToken`."""

    def authenticate(self, request: HttpRequest, token: str) -> ApiToken | None:
        row = authenticate_token(token)
        if row is not None:
            request.durable_jobs_token = row
        return row


class SessionAuth(APIKeyCookie):
    """The Django session; POST/PUT/PATCH/DELETE must pass Django's CSRF check."""

    param_name = "sessionid"

    def __init__(self) -> None:
        super().__init__(csrf=True)

    def __call__(self, request: HttpRequest) -> Any:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None  # anonymous: 401, whatever the CSRF state
        if check_csrf(request) is not None:
            raise HttpError(
                403,
                "CSRF check failed: send the csrftoken cookie's value in the X-CSRFToken header.",
            )
        return user

    def _get_key(self, request: HttpRequest) -> str | None:  # pragma: no cover - unused
        return request.COOKIES.get(self.param_name)

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:  # pragma: no cover
        return None


AUTH = [BearerToken(), SessionAuth()]


def caller(request: HttpRequest):
    """Return the user behind the request (the token's user for bearer calls)."""
    token = getattr(request, "durable_jobs_token", None)
    return token.user if token is not None else request.user


def require(request: HttpRequest, action: str) -> None:
    """Refuse with 403 unless the caller holds the Django permission for ``action``."""
    perm = PERMISSIONS[action]
    if not caller(request).has_perm(perm):
        allows = ALLOWS.get(action, f"{action} jobs")
        raise AuthorizationError(403, f"Permission {perm} is required to {allows}.")


def require_operation(request: HttpRequest, operation: str) -> None:
    """Refuse with 403 when the caller's bearer token may not submit ``operation``.

    Session callers are limited by their permissions only.
    """
    token = getattr(request, "durable_jobs_token", None)
    if token is not None and not token_allows(token, operation):
        raise AuthorizationError(
            403,
            f"This token may not submit {operation!r}; it is limited to other operations. Use "
            f"a token made for it (manage.py jobs token create --operation {operation}).",
        )


def default_scope(request: HttpRequest) -> str:
    """The default resolver: the bearer token's scope, else ``DURABLE_JOBS['DEFAULT_SCOPE']``."""
    token = getattr(request, "durable_jobs_token", None)
    if token is not None:
        return token.scope
    return jobs_settings.DEFAULT_SCOPE


def resolver() -> Callable[[HttpRequest], str]:
    return jobs_settings.SCOPE_RESOLVER or default_scope


def scope_of(request: HttpRequest) -> str:
    """Return the caller's scope from ``DURABLE_JOBS['SCOPE_RESOLVER']``."""
    scope = resolver()(request)
    try:
        return validation.scope(scope)
    except InputInvalid as exc:  # a resolver bug, not the caller's input
        raise AuthorizationError(403, f"No usable scope for this caller: {exc.message}") from None


def actor_of(request: HttpRequest) -> str:
    user = caller(request)
    token = getattr(request, "durable_jobs_token", None)
    who = f"api:{user.get_username()}"
    if token is not None:
        who += f":token-{token.pk}"
    return who[: validation.NAME_MAX]
