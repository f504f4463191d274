"""How an attempt ended: the ``Outcome`` value, and the text a store keeps of it.

One place builds every outcome and its text: the worker, the in-process runner and the store's
one-attempt calls all use these constructors, so a result or a failure is turned into stored
text the same way on every path.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import validation
from .errors import InputInvalid
from .jsontext import canonical_json
from .vocabulary import AttemptOutcomeChoice

if TYPE_CHECKING:
    from .values import Lease

__all__ = [
    "ERROR_CLASS_MAX",
    "ERROR_MAX_CHARS",
    "TRACEBACK_MAX_CHARS",
    "UNREQUESTED_CANCEL",
    "Outcome",
    "error_class_path",
    "failure_details",
    "failure_message",
    "refused_result",
    "result_text",
    "storable_message",
    "traceback_text",
]

UNREQUESTED_CANCEL = "The executor raised JobCancelled without a request."

# A history row keeps at most this much of a failure's traceback, and of its class path.
TRACEBACK_MAX_CHARS = 32_000
ERROR_CLASS_MAX = 255
# A failure message made storable (``storable_message``) keeps at most this many characters.
ERROR_MAX_CHARS = 10_000
_CUT = "\n… {} characters cut …\n"


@dataclass(frozen=True)
class Outcome:
    """How one attempt ended, for ``DurableJobStore.record_outcomes``; build it with a constructor.

    ``complete`` carries the result as JSON text, ``failed`` the error message and, when an
    exception caused it, the exception's class path and traceback; ``cancelled`` acknowledges a
    recorded cancellation request. Two outcomes compare equal whatever their tracebacks: those
    are evidence for the attempt's history row, not part of what the outcome says.
    """

    lease: Lease
    status: str
    result_json: str | None = None
    error: str | None = None
    error_class: str = field(default="", compare=False)
    traceback: str | None = field(default=None, compare=False, repr=False)

    @classmethod
    def completed(cls, lease: Lease, result_json: str) -> Outcome:
        return cls(lease, AttemptOutcomeChoice.COMPLETE, result_json=result_json)

    @classmethod
    def failed(
        cls, lease: Lease, error: str, *, error_class: str = "", traceback: str | None = None
    ) -> Outcome:
        return cls(
            lease,
            AttemptOutcomeChoice.FAILED,
            error=error,
            error_class=error_class,
            traceback=traceback,
        )

    @classmethod
    def cancelled(cls, lease: Lease) -> Outcome:
        """Acknowledge a recorded cancellation request; refused when none is recorded."""
        return cls(lease, AttemptOutcomeChoice.CANCELLED)

    @classmethod
    def stopped(cls, lease: Lease) -> Outcome:
        """Return the outcome of an executor that raised ``JobCancelled``.

        It is ``cancelled`` when a cancellation request is recorded, and otherwise ``failed``
        with :data:`UNREQUESTED_CANCEL` as the message: the store decides, from the row, under
        the same lock as the fence.
        """
        return cls(lease, AttemptOutcomeChoice.CANCELLED, error=UNREQUESTED_CANCEL)

    @classmethod
    def of_result(cls, lease: Lease, value: Any) -> Outcome:
        """Return the outcome of an executor that returned ``value``.

        ``complete`` with ``value`` as JSON text, or ``failed`` saying why, when ``value``
        cannot be stored (:func:`result_text` refused it).
        """
        try:
            return cls.completed(lease, result_text(value))
        except InputInvalid as exc:  # the return value cannot be stored: the job failed
            return cls.failed(lease, refused_result(exc))

    @classmethod
    def of_error(cls, lease: Lease, error: Any) -> Outcome:
        """Return the ``failed`` outcome of ``error`` (an exception, or a message).

        The message is made storable (:func:`storable_message`); an exception's class path and
        traceback go to the attempt's history row.
        """
        return cls.failed(lease, storable_message(error), **failure_details(error))


def result_text(result: Any) -> str:
    """Return ``result`` as JSON text to store, or refuse it (``InputInvalid``).

    What a job returns is refused here, before it reaches a batch, for the reasons
    ``validation.json_text`` refuses stored JSON text. ``canonical_json`` already refuses what
    is not JSON, NaN and nesting past the limit, and writes no escapes but its own, so of that
    rule only a lone surrogate (written raw) and the size are left to check: the text is not
    parsed again on the worker's path.
    """
    if hasattr(result, "__await__") or hasattr(result, "cr_code"):
        validation.json_text(result, "result")  # refuses (and closes) a coroutine
    try:
        text = canonical_json(result)
    except (TypeError, ValueError) as exc:
        raise InputInvalid(f"The result cannot be stored as JSON: {exc}.") from exc
    validation.check_size(validation.encodable(text, "result"), "result")
    return text


def refused_result(exc: InputInvalid) -> str:
    """Return the failure message of an attempt whose result could not be stored."""
    return f"The executor's result was refused: {exc.message}"


def storable_message(error: Any) -> str:
    """Return ``error`` as a failure message the store always accepts.

    Bounded in length, with characters that have no UTF-8 form (lone surrogates) or that
    PostgreSQL cannot store (NUL) replaced: outcomes are written in batches, where a message
    that could not be stored would have to fail its attempt with another one.
    """
    text = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else str(error)
    text = text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd").strip()
    text = text or "The executor failed without a message."
    return text if len(text) <= ERROR_MAX_CHARS else text[: ERROR_MAX_CHARS - 1] + "…"


def failure_details(error: Any) -> dict[str, Any]:
    """Return what a failure's history row keeps of ``error``: an exception's class path and
    traceback (``error_class``, ``traceback``); nothing for an error given as text."""
    if not isinstance(error, BaseException):
        return {}
    return {"error_class": error_class_path(error), "traceback": traceback_text(error)}


def error_class_path(error: BaseException) -> str:
    """Return the class path of ``error``: ``builtins.ValueError``, ``myapp.jobs.Refused``."""
    kind = type(error)
    return f"{kind.__module__}.{kind.__qualname__}"[:ERROR_CLASS_MAX]


def traceback_text(error: BaseException) -> str:
    """Return the traceback of ``error`` as text the store always accepts, bounded in size.

    A longer one keeps its first and last lines with a marker saying how much was cut between:
    the last frames, where it was raised, matter most. Characters no database column holds (NUL,
    lone surrogates) are replaced. A newline in an exception's message or note (job code's
    words) is written ``\\n``: every line of the traceback is the traceback's own, so one
    logged cannot end in a line the message forged.
    """
    text = "".join(_one_line_words(error).format())
    text = text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")
    if len(text) <= TRACEBACK_MAX_CHARS:
        return text
    head = TRACEBACK_MAX_CHARS // 4
    tail = TRACEBACK_MAX_CHARS - head - len(_CUT.format(len(text)))  # the widest marker
    return text[:head] + _CUT.format(len(text) - head - tail) + text[-tail:]


def _one_line_words(error: BaseException) -> traceback.TracebackException:
    """Return the traceback of ``error`` with every message and note of its chain on one line.

    Only the newline is escaped: the text stays as Python wrote it otherwise.

    Walked without recursion, each exception once. A version of Python whose traceback keeps
    its words elsewhere prints them unchanged.
    """
    top = traceback.TracebackException.from_exception(error)
    seen: set[int] = set()
    pending = [top]
    while pending:
        shown = pending.pop()
        if shown is None or id(shown) in seen:
            continue
        seen.add(id(shown))
        if isinstance(getattr(shown, "_str", None), str):
            shown._str = _one_line(shown._str)
        notes = getattr(shown, "__notes__", None)
        if isinstance(notes, list | tuple):
            shown.__notes__ = [_one_line(n) if isinstance(n, str) else n for n in notes]
        pending += [shown.__cause__, shown.__context__, *(shown.exceptions or ())]
    return top


def _one_line(words: str) -> str:
    """Return ``words`` with each character that ends a line written as an escape (``\\n``,
    ``\\r``, ``\\u2028``…); the others stay as they are (every surface that prints a
    traceback escapes controls itself)."""
    return words.translate(_LINE_ENDS)


# What str.splitlines() ends a line at, written as terminal.printable() writes it.
_LINE_ENDS = str.maketrans(
    {
        "\n": "\\n",
        "\r": "\\r",
        "\v": "\\x0b",
        "\f": "\\x0c",
        "\x1c": "\\x1c",
        "\x1d": "\\x1d",
        "\x1e": "\\x1e",
        "\x85": "\\x85",
        "\u2028": "\\u2028",
        "\u2029": "\\u2029",
    }
)


def failure_message(error: Any) -> str:
    """Return the failure message of ``error`` for ``fail`` and ``finalize_atomically``.

    As in a batched flush (:func:`storable_message`), a character no database can store is
    replaced, the same on every database: a lone surrogate (an ``os.listdir()`` name in an
    exception) has no UTF-8 form, and PostgreSQL refuses NUL. Refusing the message instead
    would leave the attempt running, with its failure unrecorded.
    """
    if isinstance(error, BaseException):
        text = f"{type(error).__name__}: {error}"
    else:
        text = str(error)
    text = text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")
    if not text.strip():
        raise InputInvalid("A failure needs a message saying what went wrong.")
    validation.check_size(text, "error message")
    return text
