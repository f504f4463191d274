"""The request body parser of the REST API: JSON nested too deeply is refused before parsing.

A job's ``payload`` may nest ``MAX_JSON_DEPTH`` levels, and the body holding it one more. The
depth is counted on the text, so a body nested a million levels deep is a 422 that says so, not
a ``RecursionError``. Mount the router in your own ``NinjaAPI`` with ``parser=JobsParser()`` to
get the same answer there.
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest
from ninja.parser import Parser

from ..rules.errors import InputInvalid
from ..rules.jsontext import MAX_JSON_DEPTH, JsonTooDeep, check_depth

__all__ = ["JobsParser"]

BODY_DEPTH_MAX = MAX_JSON_DEPTH + 1  # the body object around the payload


class JobsParser(Parser):
    """Ninja's JSON body parser, with the depth limit checked first."""

    def parse_body(self, request: HttpRequest) -> Any:
        body = request.body
        text = body.decode(json.detect_encoding(body)) if isinstance(body, bytes) else body
        try:
            check_depth(text, BODY_DEPTH_MAX)
        except JsonTooDeep as exc:
            depth = f"more than {BODY_DEPTH_MAX}" if exc.depth is None else f"{exc.depth:,}"
            raise InputInvalid(
                f"The request body is nested {depth} levels deep; a payload may nest at most "
                f"{MAX_JSON_DEPTH} levels (the body around it one more). Flatten it, or store "
                f"the nested data elsewhere and pass a reference."
            ) from None
        return json.loads(text)
