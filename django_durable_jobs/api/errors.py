"""How the REST API reports refusals: every error becomes ``{"code", "message"}`` + a status.

=====================================  ======  ==========================================
Refusal                                Status  Notes
=====================================  ======  ==========================================
(no or bad credentials)                401     ``E_API_UNAUTHENTICATED``
(permission, CSRF, token operations)   403     ``E_API_FORBIDDEN``
``JobNotFound`` (unknown/out of scope)  404     a job of another scope is reported as missing
``ScopeMismatch``                      404     never confirm that another scope exists
``NoSuchSchedule``                     404     a schedule of another scope is reported as missing
``NoSuchWorkflow``                     404     a workflow of another scope is reported as missing
(no endpoint at this path)             404     ``E_API_NOT_FOUND``
(method not served at this path)       405     ``E_API_METHOD``, with ``Allow``
``PayloadTooLarge``                    413     an ``InputInvalid`` (code E_JOB_INPUT_INVALID)
``InputInvalid``                       422     also ninja's own request validation errors
``IdempotencyConflict``                409
``NotReclaimable``, ``LeaseLost``,     409
``LockPolicyConflict``, cancellations
``CapacityReached``                    429     ``Retry-After``: its ``retry_after``, rounded up
``DeadlineExceeded``                   503     with ``Retry-After``
``TransactionOwned``                   500     the host wrapped the view in a transaction
any other exception                    500     ``E_API_INTERNAL``; logged, never shown
other ``JobError``                     400
=====================================  ======  ==========================================

Nothing here depends on ``settings.DEBUG``: a 404, 405 or 500 is the same JSON with it on or off.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Any

from django.core.signals import got_request_exception
from django.http import Http404, HttpRequest, HttpResponseNotAllowed, JsonResponse
from django.urls import re_path
from django.utils.log import log_response

from ..rules.errors import (
    CapacityReached,
    DeadlineExceeded,
    ExecutionStopped,
    IdempotencyConflict,
    InputInvalid,
    JobCancelled,
    JobError,
    LeaseLost,
    LockPolicyConflict,
    NotReclaimable,
    PayloadTooLarge,
    ScopeMismatch,
    TransactionOwned,
)

RETRY_AFTER_SECONDS = 5
INTERNAL_MESSAGE = (
    "The server failed to answer this request; the error was logged. Try again later, or tell "
    "the site's operators."
)


class JobNotFound(JobError):
    """No job with this id in the caller's scope (whether or not another scope has one)."""

    code = "E_JOB_NOT_FOUND"


class NoSuchSchedule(JobError):
    """No schedule with this name in the caller's scope (whether or not another scope has one)."""

    code = "E_SCHEDULE_NOT_FOUND"


class NoSuchWorkflow(JobError):
    """No workflow with this id in the caller's scope (whether or not another scope has one)."""

    code = "E_WORKFLOW_NOT_FOUND"


_STATUS: tuple[tuple[type[JobError], int], ...] = (
    (JobNotFound, 404),
    (NoSuchSchedule, 404),
    (NoSuchWorkflow, 404),
    (ScopeMismatch, 404),
    (PayloadTooLarge, 413),
    (InputInvalid, 422),
    (IdempotencyConflict, 409),
    (NotReclaimable, 409),
    (LeaseLost, 409),
    (LockPolicyConflict, 409),
    (JobCancelled, 409),
    (ExecutionStopped, 409),
    (CapacityReached, 429),
    (DeadlineExceeded, 503),
    (TransactionOwned, 500),
)


def status_for(exc: JobError) -> int:
    """Return the HTTP status of a refusal (400 for a JobError this table does not name)."""
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return status
    return 400


def error_body(code: str, message: str) -> dict[str, str]:
    return {"code": code, "message": message}


def retry_after(exc: JobError) -> int:
    """Return the whole seconds to wait: a ``CapacityReached``'s ``retry_after`` rounded up,
    else ``RETRY_AFTER_SECONDS``."""
    wait = getattr(exc, "retry_after", None)
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not math.isfinite(wait):
        return RETRY_AFTER_SECONDS
    return max(0, math.ceil(wait))


def error_response(exc: JobError) -> JsonResponse:
    """Return the JSON response of a refusal, with ``Retry-After`` where waiting helps."""
    status = status_for(exc)
    response = JsonResponse(error_body(exc.code, exc.message), status=status)
    if status in (429, 503):
        response["Retry-After"] = str(retry_after(exc))
    return response


def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Answer a path the API has no endpoint for (404 ``E_API_NOT_FOUND``)."""
    return JsonResponse(
        error_body("E_API_NOT_FOUND", "There is no endpoint at this path; see the API's docs."),
        status=404,
    )


not_found.csrf_exempt = True  # any method may ask; the answer is always the same 404


def method_not_allowed(allowed: str) -> JsonResponse:
    """Answer a method the path does not serve (405 ``E_API_METHOD``, with ``Allow``)."""
    response = JsonResponse(
        error_body("E_API_METHOD", f"This path does not accept this method; use {allowed}."),
        status=405,
    )
    response["Allow"] = allowed
    return response


def internal_error(request: HttpRequest, exc: BaseException) -> JsonResponse:
    """Answer an unexpected exception with 500 ``E_API_INTERNAL`` and log it with its traceback.

    The body says nothing about the exception. The traceback goes where Django sends those of
    its own 500s: the ``django.request`` logger (mailed to ``ADMINS`` by Django's default
    logging) and the ``got_request_exception`` signal (error trackers listen to it). Call it
    from an ``except`` block.
    """
    got_request_exception.send(sender=None, request=request)
    response = JsonResponse(error_body("E_API_INTERNAL", INTERNAL_MESSAGE), status=500)
    log_response(
        "%s: %s",
        response.reason_phrase,
        request.path,
        response=response,
        request=request,
        exception=exc,
    )
    return response


def json_errors(view: Callable) -> Callable:
    """Wrap a view of the API so that no error leaves it as HTML or a traceback.

    A ``405`` the view built (ninja's ``HttpResponseNotAllowed``) becomes ``E_API_METHOD`` JSON,
    an ``Http404`` ``E_API_NOT_FOUND``, and any other exception ``E_API_INTERNAL``.
    """

    def answer(request: HttpRequest, response: Any) -> Any:
        if isinstance(response, HttpResponseNotAllowed):
            allowed = sorted(m.strip() for m in response["Allow"].split(",") if m.strip())
            return method_not_allowed(", ".join(allowed))
        return response

    if inspect.iscoroutinefunction(view):

        @functools.wraps(view)
        async def async_wrapper(request: HttpRequest, *args: Any, **kwargs: Any):
            try:
                return answer(request, await view(request, *args, **kwargs))
            except Http404:
                return not_found(request)
            except Exception as exc:  # noqa: BLE001 - answered as a logged 500
                return internal_error(request, exc)

        return async_wrapper

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any):
        try:
            return answer(request, view(request, *args, **kwargs))
        except Http404:
            return not_found(request)
        except Exception as exc:  # noqa: BLE001 - answered as a logged 500
            return internal_error(request, exc)

    return wrapper


def json_error_urls(patterns: list) -> list:
    """Return ``patterns`` with every view wrapped by :func:`json_errors`, then a catch-all 404.

    Use it on the URL patterns of a ``NinjaAPI`` that mounts this app's router; the ready
    ``api`` does it already. Apply ``non_atomic_urls`` after it, so the wrappers are marked.
    """
    for pattern in patterns:
        callback = getattr(pattern, "callback", None)
        if callback is not None:
            pattern.callback = json_errors(callback)
    return [*patterns, re_path(r"^.*$", not_found, name="not-found")]


def handle_job_error(request: HttpRequest, exc: JobError) -> JsonResponse:
    """Ninja exception handler for ``JobError``."""
    return error_response(exc)


def _validation_message(errors: list) -> str:
    parts = []
    for error in errors[:5]:
        loc = ".".join(str(p) for p in error.get("loc", ()) if p not in ("body", "payload"))
        parts.append(f"{loc or 'request'}: {error.get('msg', 'invalid')}")
    return "; ".join(parts) or "The request is not valid."


def install_error_handlers(api) -> None:
    """Make ``api`` (a NinjaAPI) answer every refusal in this module's JSON shape.

    Call it on your own ``NinjaAPI`` when you mount ``django_durable_jobs.api.router`` in it.
    """
    from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation
    from ninja.errors import AuthenticationError, AuthorizationError, HttpError, ValidationError

    def on_validation(request, exc):
        return error_response(InputInvalid(_validation_message(exc.errors)))

    def on_authentication(request, exc):
        response = JsonResponse(
            error_body(
                "E_API_UNAUTHENTICATED",
                "Authentication required: send 'Authorization: Bearer <token>' or log in.",
            ),
            status=401,
        )
        response["WWW-Authenticate"] = 'Bearer realm="durable-jobs"'
        return response

    def on_authorization(request, exc):
        return JsonResponse(error_body("E_API_FORBIDDEN", str(exc) or "Forbidden."), status=403)

    def on_http_error(request, exc):
        if isinstance(exc.__cause__, JobError):  # a parser's refusal (a body nested too deeply)
            return error_response(exc.__cause__)
        code = {403: "E_API_FORBIDDEN", 404: "E_JOB_NOT_FOUND", 405: "E_API_METHOD"}.get(
            exc.status_code, "E_API_HTTP"
        )
        if exc.status_code == 400:  # e.g. a body that is not JSON: invalid input, like the rest
            return error_response(InputInvalid(str(exc)))
        if exc.status_code == 429:  # ninja's own throttling, if a host API adds it
            return error_response(CapacityReached(str(exc), retry_after=getattr(exc, "wait", None)))
        return JsonResponse(error_body(code, str(exc)), status=exc.status_code)

    def on_too_big(request, exc):
        return error_response(
            PayloadTooLarge("The request body is over DATA_UPLOAD_MAX_MEMORY_SIZE.")
        )

    def on_not_found(request, exc):
        return not_found(request)

    def on_suspicious(request, exc):  # e.g. too many fields: Django answers these with 400 too
        return JsonResponse(
            error_body("E_API_BAD_REQUEST", "The request was refused as malformed."), status=400
        )

    def on_permission_denied(request, exc):
        return JsonResponse(error_body("E_API_FORBIDDEN", "Forbidden."), status=403)

    def on_unexpected(request, exc):
        return internal_error(request, exc)

    api.add_exception_handler(JobError, handle_job_error)
    api.add_exception_handler(ValidationError, on_validation)
    api.add_exception_handler(AuthenticationError, on_authentication)
    api.add_exception_handler(AuthorizationError, on_authorization)
    api.add_exception_handler(HttpError, on_http_error)
    api.add_exception_handler(RequestDataTooBig, on_too_big)
    api.add_exception_handler(SuspiciousOperation, on_suspicious)
    api.add_exception_handler(PermissionDenied, on_permission_denied)
    api.add_exception_handler(Http404, on_not_found)
    api.add_exception_handler(Exception, on_unexpected)
