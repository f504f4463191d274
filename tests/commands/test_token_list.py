"""``jobs token list`` prints aligned columns under a header, as ``jobs list`` does, or JSON.

Proves: the table is the one ``jobs list``'s formatter makes (each value starts under its title,
two spaces apart, a stored word escaped onto one line); ``--json`` gives the same tokens as data;
neither shows a hash or a secret; no token says ``No tokens match.``
"""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from django_durable_jobs.management.commands import _jobs_format as fmt
from django_durable_jobs.management.commands._tokens import TOKEN_COLUMNS
from django_durable_jobs.models import ApiToken
from django_durable_jobs.models.tokens import create_token
from tests.api.support import make_user

pytestmark = pytest.mark.django_db(transaction=True)

HEADER = ["ID", "PREFIX", "USER", "SCOPE", "NAME", "OPERATIONS", "EXPIRES", "CREATED"]


def _list(*args: str) -> str:
    out = StringIO()
    call_command("jobs", "token", "list", *args, stdout=out)
    return out.getvalue()


def test_the_list_is_an_aligned_table_with_a_header():
    short = create_token(make_user("al"), "red", "ci").token
    long = create_token(
        make_user("a-much-longer-name\x1b[2J"), "blue-team", "nightly-builds", operations=["x.y"]
    ).token
    text = _list()
    lines = text.rstrip("\n").splitlines()
    assert len(lines) == 3 and "\t" not in text
    header = lines[0]
    assert header.split() == [*HEADER, "LAST", "USED", "REVOKED"]
    starts = [header.index(title) for title in HEADER]
    for line, row in zip(lines[1:], ApiToken.objects.order_by("created_at", "id"), strict=True):
        values = [str(row.pk), f"djt_{row.prefix}_…", None, row.scope, row.name, None, "never"]
        for start, value in zip(starts, values, strict=False):
            assert line[start - 2 : start] == "  " or start == 0
            if value is not None:
                assert line[start:].startswith(value + " "), (line, value)
    assert "a-much-longer-name\\x1b[2J" in lines[2] and "\x1b" not in text
    assert "x.y" in lines[2] and "*" in lines[1]
    for token in (short, long):
        assert token.split("_", 2)[2] not in text
    for row in ApiToken.objects.all():
        assert row.token_hash not in text
    # The formatter of jobs list, given the same rows.
    data = json.loads(_list("--json"))
    cells = [[row[key] for key, _ in TOKEN_COLUMNS] for row in data]
    assert text == fmt.aligned([title for _, title in TOKEN_COLUMNS], cells) + "\n"


def test_json_lists_the_same_tokens_as_data_without_hash_or_secret():
    issued = create_token(make_user("bo"), "red", "ci", operations=["a.b", "c.d"])
    revoked = create_token(make_user("cy"), "red", "old")
    ApiToken.objects.filter(pk=revoked.row.pk).update(revoked_at=issued.row.created_at)
    (only,) = json.loads(_list("--json"))
    assert only["id"] == issued.row.pk and only["prefix"] == issued.row.prefix
    assert (only["user"], only["scope"], only["name"]) == ("bo", "red", "ci")
    assert only["operations"] == "a.b,c.d" and only["expires_at"] is None
    assert only["revoked_at"] is None and only["expired"] is False
    everything = json.loads(_list("--json", "--all"))
    assert [row["id"] for row in everything] == [issued.row.pk, revoked.row.pk]
    assert everything[1]["revoked_at"] is not None
    text = _list("--json", "--all")
    for row in ApiToken.objects.all():
        assert row.token_hash not in text and "token_hash" not in text
    assert issued.token.split("_", 2)[2] not in text


def test_no_token_says_so_and_json_is_an_empty_list():
    assert _list() == "No tokens match.\n"
    assert json.loads(_list("--json")) == []
