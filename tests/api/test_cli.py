"""``manage.py jobs token create|revoke|list``: tokens printed once, stored hashed, revocable.

Runs the subcommands through ``call_command("jobs", "token", ...)`` and through the
``handle_token`` entry point the ``jobs`` command calls, and proves that what was printed works
against the API until revoked.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import re

import pytest
from django.core.management import CommandError, call_command

from django_durable_jobs.management.commands._tokens import add_token_parser, handle_token
from django_durable_jobs.models import ApiToken
from tests.api.support import Api, make_user

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN_LINE = re.compile(r"^(djt_[0-9a-f]{12}_\S+)$", re.MULTILINE)


def _jobs(*args: str) -> str:
    out = io.StringIO()
    call_command("jobs", "token", *args, stdout=out)
    return out.getvalue()


def _parse(*argv: str) -> dict:
    parser = argparse.ArgumentParser()
    add_token_parser(parser.add_subparsers(dest="subcommand"))
    return vars(parser.parse_args(["token", *argv]))


def test_create_prints_the_token_once_and_stores_only_its_hash():
    make_user("carol")
    output = _jobs("create", "--user", "carol", "--scope", "green", "--name", "ci")
    token = TOKEN_LINE.search(output).group(1)
    row = ApiToken.objects.get()
    assert (row.user.username, row.scope, row.name) == ("carol", "green", "ci")
    secret = token.split("_", 2)[2]
    assert row.token_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in str(list(ApiToken.objects.values()))
    assert Api(token).get("/jobs").status_code == 200
    listing = _jobs("list")
    assert "carol" in listing and "green" in listing and secret not in listing
    assert row.prefix in listing


def test_revoke_stops_the_token_and_list_hides_it_unless_asked():
    make_user("dave")
    token = TOKEN_LINE.search(_jobs("create", "--user", "dave", "--scope", "s")).group(1)
    row = ApiToken.objects.get()
    assert f"Revoked token {row.pk}" in _jobs("revoke", str(row.pk))
    assert ApiToken.objects.get().revoked_at is not None
    assert Api(token).get("/jobs").status_code == 401
    assert row.prefix not in _jobs("list")
    assert row.prefix in _jobs("list", "--all")
    with pytest.raises(CommandError):
        _jobs("revoke", str(row.pk))  # already revoked: a non-zero exit


def test_handle_token_refuses_unknown_users_and_bad_scopes_naming_the_option():
    make_user("erin")
    out = io.StringIO()
    with pytest.raises(CommandError, match="--user: there is no user 'nobody'"):
        handle_token(_parse("create", "--user", "nobody", "--scope", "s"), out)
    with pytest.raises(CommandError, match="--scope: A scope may not contain control characters"):
        handle_token(_parse("create", "--user", "erin", "--scope", "bad\nscope"), out)
    with pytest.raises(CommandError, match="No active token has id 999999"):
        handle_token(_parse("revoke", "999999"), out)
    assert out.getvalue() == ""  # the refusal is said once, as the command's error
    assert not ApiToken.objects.exists()


def test_handle_token_creates_and_lists_through_its_entry_point():
    make_user("frank")
    out = io.StringIO()
    assert handle_token(_parse("create", "--user", "frank", "--scope", "s"), out) == 0
    assert TOKEN_LINE.search(out.getvalue())
    out = io.StringIO()
    assert handle_token(_parse("list", "--user", "frank"), out) == 0
    assert "frank" in out.getvalue()
