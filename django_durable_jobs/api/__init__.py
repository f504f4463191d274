"""The REST API of django_durable_jobs (django-ninja).

Mount the ready API::

    from django_durable_jobs.api import api
    urlpatterns = [path("jobs/api/", api.urls)]

or the router in your own ``NinjaAPI`` (then call ``install_error_handlers(your_api)`` and wrap your
URLs with ``non_atomic_urls`` when a database uses ``ATOMIC_REQUESTS``)::

    from django_durable_jobs.api import router
    your_api.add_router("/durable/", router)
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from ninja import NinjaAPI

from .errors import install_error_handlers
from .routes import router

__all__ = ["DurableJobsAPI", "api", "install_error_handlers", "non_atomic_urls", "router"]


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
                if method(request):
                    return view(request, *args, **kwargs)
            except Exception:  # noqa: BLE001 - a failed CSRF check means "not this way"
                continue
        response = JsonResponse(
            {"code": "E_API_UNAUTHENTICATED", "message": "Authentication required."}, status=401
        )
        response["WWW-Authenticate"] = 'Bearer realm="durable-jobs"'
        return response

    return wrapper


class DurableJobsAPI(NinjaAPI):
    """A NinjaAPI whose views run outside ATOMIC_REQUESTS and answer errors as JSON."""

    def _get_urls(self) -> list:
        return non_atomic_urls(super()._get_urls())


api = DurableJobsAPI(
    title="Durable jobs",
    version="1",
    description="Submit, inspect, cancel and retry durable jobs of your scope.",
    urls_namespace="durable_jobs_api",
    docs_decorator=_docs_require_login,
)
install_error_handlers(api)
api.add_router("/", router)
