"""The REST API of django_durable_jobs (django-ninja).

Mount the ready API::

    from django_durable_jobs.api import api
    urlpatterns = [path("jobs/api/", api.urls)]

or the router in your own ``NinjaAPI`` (then call ``install_error_handlers(your_api)``, wrap your
URLs with ``json_error_urls`` for JSON 404s and 405s, and with ``non_atomic_urls`` when a database
uses ``ATOMIC_REQUESTS``)::

    from django_durable_jobs.api import router
    your_api.add_router("/durable/", router)
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from ninja import NinjaAPI
from ninja.parser import Parser

from .. import __version__
from .errors import install_error_handlers, json_error_urls
from .parser import JobsParser
from .pauses import list_pauses as _registers_the_pause_endpoints  # noqa: F401
from .routes import router
from .schedules import in_scope as _registers_the_schedule_endpoints  # noqa: F401
from .workflows import submit_workflow as _registers_the_workflow_endpoints  # noqa: F401

__all__ = [
    "DurableJobsAPI",
    "api",
    "install_error_handlers",
    "json_error_urls",
    "non_atomic_urls",
    "router",
]


class _EveryAlias(frozenset):
    """Answers "yes" to every database alias: Django's ATOMIC_REQUESTS skips such a view."""

    def __contains__(self, item: object) -> bool:
        return True


EVERY_ALIAS = _EveryAlias()


def non_atomic_urls(patterns: list) -> list:
    """Mark every view in ``patterns`` as outside ``ATOMIC_REQUESTS``: the store owns its
    transactions (it refuses to run inside a caller's transaction)."""
    for pattern in patterns:
        callback = getattr(pattern, "callback", None)
        if callback is not None:
            callback._non_atomic_requests = EVERY_ALIAS
    return patterns


def _docs_require_login(view):
    """The docs page and OpenAPI document are for authenticated callers (session or token)."""
    from .auth import AUTH

    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any):
        for method in AUTH:
            try:
                authenticated = method(request)
            except Exception:  # noqa: BLE001 - a failed CSRF check means "not this way"
                continue
            if authenticated:  # the view's own errors are not an authentication failure
                return view(request, *args, **kwargs)
        response = JsonResponse(
            {"code": "E_API_UNAUTHENTICATED", "message": "Authentication required."}, status=401
        )
        response["WWW-Authenticate"] = 'Bearer realm="durable-jobs"'
        return response

    return wrapper


class DurableJobsAPI(NinjaAPI):
    """A NinjaAPI whose views run outside ATOMIC_REQUESTS and answer every error as JSON.

    Its URLs end with a catch-all, so a path under the mount point that names no endpoint is a
    JSON 404 rather than Django's page; a method a path does not serve is a JSON 405. Its body
    parser (:class:`~django_durable_jobs.api.parser.JobsParser`) refuses JSON nested deeper than
    the app accepts before parsing it.
    """

    def __init__(self, *args: Any, parser: Parser | None = None, **kwargs: Any) -> None:
        super().__init__(*args, parser=parser or JobsParser(), **kwargs)

    def _get_urls(self) -> list:
        return non_atomic_urls(json_error_urls(super()._get_urls()))


api = DurableJobsAPI(
    title="Durable jobs",
    version=__version__,
    description="Submit, inspect, cancel and retry durable jobs of your scope.",
    urls_namespace="durable_jobs_api",
    docs_decorator=_docs_require_login,
)
install_error_handlers(api)
api.add_router("/", router)
