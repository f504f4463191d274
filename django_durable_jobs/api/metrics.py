"""The Prometheus exposition from the web app: the job table's gauges, for a scraper with a token.

Prometheus cannot log in, so the view takes the REST API's bearer token
(``Authorization: Bearer djt_...``, made with ``manage.py jobs token create``); a signed-in
session works too, for a person looking at it in a browser. Either way the caller needs the
``durable_jobs.view_job`` permission, and sees the gauges of its own scope (the token's, or what
``DURABLE_JOBS['SCOPE_RESOLVER']`` says), as ``GET /jobs/stats`` does.

The counters and histograms a worker keeps live in the worker processes: ``runjobs
--metrics-port`` serves them. This view serves only what the database says.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from ninja.errors import AuthorizationError

from .. import metrics
from ..models.tokens import authenticate_token
from .auth import PERMISSIONS, scope_of

__all__ = ["metrics_view"]


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Return the text exposition of the job table's gauges (see the module docstring)."""
    header = request.headers.get("Authorization", "")
    if header[:7].lower() == "bearer ":
        token = authenticate_token(header[7:])
        if token is None:
            return _refusal(
                401,
                "The bearer token is unknown, revoked or expired; make a new one "
                "with manage.py jobs token create.",
            )
        request.durable_jobs_token = token
        user = token.user
    else:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return _refusal(
                401,
                "Authentication required: send Authorization: Bearer <token> "
                "(manage.py jobs token create makes one).",
            )
    if not user.has_perm(PERMISSIONS["view"]):
        return _refusal(403, f"Permission {PERMISSIONS['view']} is required to read the metrics.")
    if not metrics.available():
        return _refusal(503, f"Prometheus metrics need prometheus-client: {metrics.EXTRA}.")
    try:
        scope = scope_of(request)
    except AuthorizationError as exc:
        return _refusal(403, str(exc.message))
    from ..metrics.collector import CONTENT_TYPE, exposition

    return HttpResponse(exposition(scope=scope), content_type=CONTENT_TYPE)


def _refusal(status: int, message: str) -> HttpResponse:
    response = HttpResponse(message + "\n", status=status, content_type="text/plain; charset=utf-8")
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="durable-jobs-metrics"'
    return response
