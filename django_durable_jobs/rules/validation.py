"""Input checks shared by the store: each refusal is an ``InputInvalid`` that says what to do."""

from __future__ import annotations

import functools
import inspect
import json
import math
import re
import unicodedata
import uuid
import warnings
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from .conf import jobs_settings
from .errors import InputInvalid, PayloadTooLarge
from .jsontext import MAX_JSON_DEPTH as MAX_JSON_DEPTH  # the documented limit, re-exported
from .jsontext import JsonTooDeep as JsonTooDeep
from .jsontext import Serialised
from .jsontext import is_json as is_json
from .jsontext import loads as loads_strict

NAME_MAX = 200
KEY_MAX = 255
OPERATION_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:\-]*$")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
BIGINT_MAX = 2**63 - 1
ATTEMPTS_MAX = 2**31 - 1
# The longest lease, 30 days: a silent worker's job waits this long for another worker, so any
# longer is no lease at all; and the expiry (the clock, up to 9998 UTC, plus the lease) must stay a
# time Python can add and every database can store (years up to 9999).
LEASE_SECONDS_MAX = 30 * 86400


def job_id(value: Any) -> uuid.UUID:
    """Return ``value`` as a UUID, or refuse it."""
    parsed = None
    if isinstance(value, uuid.UUID):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = uuid.UUID(value)
        except ValueError:
            pass
    if parsed is None:
        raise InputInvalid(f"{value!r} is not a job id; job ids are UUIDs.")
    if (parsed.int >> 76) & 0x8 and not (parsed.int >> 63) & 0x1:
        # Version 8-15 with the NCS variant: MariaDB's UUID column refuses to store it (it could
        # not tell such a value from one it byte-swapped), so no database may hold it as a job id.
        raise InputInvalid(
            f"{value!r} is not a job id: a UUID of version 8-15 must have the RFC 4122 variant "
            f"(its 17th hex digit 8-b); use uuid.uuid4() or uuid.uuid7()."
        )
    return parsed


def operation(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > NAME_MAX:
        raise InputInvalid(f"Operation names are 1-{NAME_MAX} characters; got {value!r}.")
    if not OPERATION_RE.match(value):
        raise InputInvalid(
            f"Operation {value!r} may contain only letters, digits, '_', '.', ':' and '-'."
        )
    return value


def name(value: Any, what: str, max_length: int = NAME_MAX) -> str:
    """Return a scope, actor, queue or key that is non-empty, short and free of control bytes."""
    if not isinstance(value, str) or not value.strip() or len(value) > max_length:
        raise InputInvalid(f"A {what} is 1-{max_length} characters of text; got {value!r}.")
    if CONTROL_RE.search(value):
        raise InputInvalid(f"A {what} may not contain control characters; got {value!r}.")
    encodable(value, what)
    return value


def scope(value: Any) -> str:
    """Return a scope name, or refuse one that could be mistaken for another scope.

    A scope is a tenant's identity: a name that differs from another only in what a reader
    cannot see would silently be a new scope, with the default quotas. So besides :func:`name`'s
    rules a scope has no surrounding whitespace, is in Unicode's NFKC form (no full-width or
    compatibility characters), does not mix letters of scripts that look alike (Latin with
    Cyrillic or Greek, say), and is not a look-alike of a configured scope
    (``DURABLE_JOBS['DEFAULT_SCOPE']``, ``DURABLE_JOBS['SCOPE_QUOTAS']``): the same name but for
    case or a letter of another script.
    """
    value = name(value, "scope")
    configured = _configured_scopes()
    if value in configured:
        return value
    refusal = _scope_refusal(value, configured)
    if refusal is not None:
        raise InputInvalid(refusal)
    return value


@functools.lru_cache(maxsize=1024)
def _scope_refusal(value: str, configured: frozenset[str]) -> str | None:
    """Return why ``value`` is refused as a scope beside the ``configured`` ones, or None.

    Pure, so each name is judged once per configuration, not on every submission.
    """
    if value != value.strip():
        return (
            f"A scope may not begin or end with whitespace; got {value!r}. Use {value.strip()!r}."
        )
    normal = unicodedata.normalize("NFKC", value)
    if normal != value:
        return (
            f"Scope {value!r} holds compatibility characters (full-width letters, ligatures and "
            f"the like); use its normal form {normal!r}."
        )
    scripts = _scripts(value)
    if len(scripts) > 1 and not any(scripts <= mix for mix in _SCRIPT_MIXES):
        return (
            f"Scope {value!r} mixes letters of the scripts {', '.join(sorted(scripts))}, which "
            f"can make one name look like another; write it in one script."
        )
    twin = _look_alikes(configured).get(_skeleton(value))
    if twin is not None:
        return (
            f"Scope {value!r} looks like the configured scope {twin!r} but is not it; use "
            f"{twin!r}, or configure {value!r} in DURABLE_JOBS['SCOPE_QUOTAS'] if it is meant "
            f"to be another scope."
        )
    return None


# Scripts one name may mix without looking like another (Unicode's "highly restrictive" level).
_SCRIPT_MIXES = (
    frozenset({"LATIN", "HAN", "HIRAGANA", "KATAKANA"}),
    frozenset({"LATIN", "HAN", "HANGUL"}),
    frozenset({"LATIN", "HAN", "BOPOMOFO"}),
)
_SCRIPT_OF_WORD = {
    "CJK": "HAN",
    "IDEOGRAPHIC": "HAN",
    "KATAKANA-HIRAGANA": "KATAKANA",  # the prolonged sound mark, shared by both
    "MODIFIER": None,  # modifier letters belong to no one script
}
# Letters of other scripts drawn like a Latin letter, as a reader sees them (lower case).
_LATIN_LOOK = str.maketrans(
    "аеорсухіјѕԁһԛԝӏкмнтвгпωαοрντυιϲєѵѡ",
    "aeopcyxijsdhqwlkmhtbrnwaopvtuicevw",
)


def _scripts(value: str) -> set[str]:
    """Return the scripts of the letters in ``value`` (digits and punctuation belong to none)."""
    found = set()
    for char in value:
        if not unicodedata.category(char).startswith("L"):
            continue
        word = unicodedata.name(char, "UNKNOWN").split()[0]
        script = _SCRIPT_OF_WORD.get(word, word)
        if script is not None:
            found.add(script)
    return found


def _skeleton(value: str) -> str:
    """Return what a reader sees of ``value``: NFKC, case folded, look-alike letters as Latin."""
    return unicodedata.normalize("NFKC", value).casefold().translate(_LATIN_LOOK)


def _configured_scopes() -> frozenset[str]:
    names = {jobs_settings.DEFAULT_SCOPE, *jobs_settings.SCOPE_QUOTAS}
    return frozenset(n for n in names if isinstance(n, str))


@functools.lru_cache(maxsize=8)
def _look_alikes(configured: frozenset[str]) -> dict[str, str]:
    """Return each configured scope by its skeleton."""
    return {_skeleton(n): n for n in sorted(configured)}


def scope_problems(names: Any) -> list[str]:
    """Return what is wrong with configured scope names (for the system checks)."""
    problems = []
    seen: dict[str, str] = {}
    for each in sorted(n for n in names if isinstance(n, str)):
        try:
            name(each, "scope")
        except InputInvalid as exc:
            problems.append(f"Configured scope {each!r} is not a usable scope name: {exc.message}")
            continue
        if each != each.strip() or unicodedata.normalize("NFKC", each) != each:
            problems.append(
                f"Configured scope {each!r} has surrounding whitespace or compatibility "
                f"characters; write it as {unicodedata.normalize('NFKC', each).strip()!r}."
            )
            continue
        twin = seen.setdefault(_skeleton(each), each)
        if twin != each:
            problems.append(
                f"Configured scopes {twin!r} and {each!r} look alike (they differ only in case "
                f"or in letters of another script); rename one."
            )
    return problems


def encodable(text: str, what: str) -> str:
    """Refuse text that has no UTF-8 form (a lone surrogate): it cannot be stored or hashed."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputInvalid(
            f"The {what} holds a lone surrogate at position {exc.start}, which UTF-8 cannot "
            f"encode; send well-formed Unicode (text, not raw bytes: decode bytes such as "
            f"os.listdir() names with errors='replace', or base64-encode them)."
        ) from None
    return text


def idempotency_key(value: Any) -> str:
    return name(value, "idempotency key", KEY_MAX)


def utf8_size(text: str | None) -> int:
    return 0 if text is None else len(text.encode("utf-8", "surrogatepass"))


def payload_cap() -> int:
    return jobs_settings.MAX_PAYLOAD_BYTES


def json_text(value: Any, what: str) -> str:
    """Return ``value`` when it is a string holding valid JSON within the payload cap.

    Valid means strict JSON (no NaN or Infinity) nested at most ``MAX_JSON_DEPTH`` levels,
    checked on the text before it is parsed.
    """
    if inspect.iscoroutine(value):
        value.close()  # never awaited: close it so Python does not warn
        raise InputInvalid(
            f"The {what} is a coroutine, not JSON text; await it (or use a sync function) first."
        )
    if not isinstance(value, str):
        raise InputInvalid(f"The {what} must be JSON text (a str); got {type(value).__name__}.")
    if type(value) is Serialised:  # written by canonical_json: strict, and its depth checked
        value = str(value)
        encodable(value, what)  # a lone surrogate is written as it is, never as an escape
        check_size(value, what)
        return value
    encodable(value, what)
    try:
        parsed = loads_strict(value)
    except JsonTooDeep as exc:
        raise too_deep(exc, what) from None
    except ValueError as exc:
        raise InputInvalid(f"The {what} is not valid JSON: {exc}.") from exc
    check_size(value, what)
    if _SURROGATE_ESCAPE.search(value):  # rare: only then is the parsed value looked at again
        _no_escaped_surrogate(parsed, what)
    return value


# A \uD800-\uDFFF escape: half of a pair, or a lone surrogate written as an escape.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _no_escaped_surrogate(parsed: Any, what: str) -> None:
    """Refuse JSON whose escapes decode to a lone surrogate (``"\\ud800"``).

    The text itself is ASCII and storable, but what it means is not Unicode: the same value
    given as a Python object (a payload, a result) is refused, so the text is too. An escaped
    pair (``"\\ud83d\\ude00"``, one emoji) is well-formed and passes.
    """
    try:
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        escape = f"\\u{ord(exc.object[exc.start]):04x}"
        raise InputInvalid(
            f"The {what} holds the escape {escape}, a lone surrogate that is not a Unicode "
            f"character; send well-formed Unicode (an escaped pair for a character beyond "
            f"U+FFFF, and text, not raw bytes: base64-encode bytes such as file names)."
        ) from None


def too_deep(exc: JsonTooDeep, what: str) -> InputInvalid:
    """Return the refusal of a value nested deeper than ``MAX_JSON_DEPTH``."""
    return InputInvalid(f"The {what} is too deeply nested: {exc}.")


def check_size(text: str, what: str) -> None:
    cap = payload_cap()
    size = utf8_size(text)
    if size > cap:
        raise PayloadTooLarge(
            f"The {what} is {size} UTF-8 bytes, over the {cap}-byte cap "
            f"(DURABLE_JOBS['MAX_PAYLOAD_BYTES']); store large data elsewhere and pass a reference."
        )


def percent(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputInvalid(f"Progress is a number from 0 to 100; got {value!r}.")
    if not math.isfinite(value):
        raise InputInvalid(f"Progress must be finite; got {value!r}.")
    return float(min(100.0, max(0.0, value)))


def aware(value: Any, what: str) -> datetime:
    """Return an aware datetime every supported database can store (UTC years 1000-9998)."""
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InputInvalid(f"{what} must be an aware datetime; got {value!r}.")
    try:
        year = value.astimezone(UTC).year
    except OverflowError:
        year = 0
    if not 1000 <= year <= 9998:
        raise InputInvalid(f"{what} must fall in the years 1000-9998 (UTC); got {value!r}.")
    return value


def bump(value: int, maximum: int, what: str) -> int:
    if value >= maximum:
        raise InputInvalid(
            f"The job's {what} counter is at its maximum ({maximum}); submit a new job instead."
        )
    return value + 1


def whole(value: Any, what: str, low: int, high: int) -> int:
    """Return ``value`` when it is a whole number (not a bool) from ``low`` to ``high``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InputInvalid(f"{what} is a whole number from {low} to {high}; got {value!r}.")
    return value


def priority(value: Any) -> int:
    return whole(value, "Priority", -100, 100)


def lease_seconds(value: Any, deprecated: Any = None) -> float:
    """Return a lease length in seconds, or refuse it.

    ``deprecated`` is the value given under the old keyword ``lease=``: it still works, with a
    ``DeprecationWarning``, and wins over the default of ``lease_seconds``.
    """
    if deprecated is not None:
        warnings.warn(
            "lease= is deprecated; say lease_seconds= (the Lease is the value a claim returns).",
            DeprecationWarning,
            stacklevel=3,
        )
        value = deprecated
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputInvalid(f"lease_seconds is a number of seconds; got {value!r}.")
    if not math.isfinite(value) or not 0 < value <= LEASE_SECONDS_MAX:
        raise InputInvalid(
            f"lease_seconds must be a positive number of seconds, at most {LEASE_SECONDS_MAX:,} "
            f"(30 days); got {value!r}."
        )
    return float(value)


def listed(values: Any, what: str) -> list:
    """Return ``values`` as a list; refuse text, bytes and mappings, which iterate surprisingly."""
    if isinstance(values, (str, bytes, bytearray, Mapping)) or not isinstance(values, Iterable):
        raise InputInvalid(
            f"{what} must be a list or another iterable; got {type(values).__name__}."
        )
    return list(values)
