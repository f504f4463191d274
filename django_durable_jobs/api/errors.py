"""How the REST API reports refusals: every ``JobError`` becomes ``{"code", "message"}`` + a status.

=====================================  ======  ==========================================
Refusal                                Status  Notes
=====================================  ======  ==========================================
``JobNotFound`` (unknown/out of scope)  404     a job of another scope is reported as missing
``ScopeMismatch``                      404     never confirm that another scope exists
``PayloadTooLarge``                    413     an ``InputInvalid`` (code E_JOB_INPUT_INVALID)
``InputInvalid``                       422     also ninja's own request validation errors
``IdempotencyConflict``                409
``NotReclaimable``, ``LeaseLost``,     409
``LockPolicyConflict``, cancellations
``CapacityReached``                    429     with ``Retry-After`` (seconds)
``DeadlineExceeded``                   503     with ``Retry-After``
``TransactionOwned``                   500     the host wrapped the view in a transaction
other ``JobError``                     400
=====================================  ======  ==========================================
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from ..errors import (
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


class JobNotFound(JobError):
    """No job with this id in the caller's scope (whether or not another scope has one)."""

    code = "E_JOB_NOT_FOUND"


_STATUS: tuple[tuple[type[JobError], int], ...] = (
    (JobNotFound, 404),
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


def error_response(exc: JobError) -> JsonResponse:
    """Return the JSON response of a refusal, with ``Retry-After`` where waiting helps."""
    status = status_for(exc)
    response = JsonResponse(error_body(exc.code, exc.message), status=status)
    if status in (429, 503):
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


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
    from django.core.exceptions import RequestDataTooBig
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
        code = {403: "E_API_FORBIDDEN", 404: "E_JOB_NOT_FOUND", 405: "E_API_METHOD"}.get(
            exc.status_code, "E_API_HTTP"
        )
        if exc.status_code == 400:  # e.g. a body that is not JSON: invalid input, like the rest
            return error_response(InputInvalid(str(exc)))
        return JsonResponse(error_body(code, str(exc)), status=exc.status_code)

    def on_too_big(request, exc):
        return error_response(
            PayloadTooLarge("The request body is over DATA_UPLOAD_MAX_MEMORY_SIZE.")
        )

    api.add_exception_handler(JobError, handle_job_error)
    api.add_exception_handler(ValidationError, on_validation)
    api.add_exception_handler(AuthenticationError, on_authentication)
    api.add_exception_handler(AuthorizationError, on_authorization)
    api.add_exception_handler(HttpError, on_http_error)
    api.add_exception_handler(RequestDataTooBig, on_too_big)
