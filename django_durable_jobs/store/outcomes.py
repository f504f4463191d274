"""The documented path of the outcome text helpers; they live in :mod:`django_durable_jobs.outcome`."""

from ..outcome import (
    ERROR_CLASS_MAX,
    ERROR_MAX_CHARS,
    TRACEBACK_MAX_CHARS,
    error_class_path,
    failure_details,
    refused_result,
    result_text,
    storable_message,
    traceback_text,
)

__all__ = [
    "ERROR_CLASS_MAX",
    "ERROR_MAX_CHARS",
    "TRACEBACK_MAX_CHARS",
    "error_class_path",
    "failure_details",
    "refused_result",
    "result_text",
    "storable_message",
    "traceback_text",
]
