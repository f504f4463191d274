"""A scope that a reader could mistake for another is refused, never silently a new tenant.

``'capped '``, ``'Capped'``, ``'ｃａｐｐｅｄ'`` (full width) and ``'сapped'`` (a Cyrillic ``с``)
would each be a new scope with the default quotas beside a configured ``capped``. The rule is
``validation.scope``: no surrounding whitespace, Unicode's NFKC form, letters of one script (or
a mix that cannot imitate another, like Latin with Japanese), and no look-alike of a configured
scope. Every way in — a store, ``submit()``, ``runjobs --scope``, ``jobs token create`` — refuses
with ``E_JOB_INPUT_INVALID`` and writes nothing.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_durable_jobs import submit
from django_durable_jobs.models import ApiToken
from django_durable_jobs.rules import validation
from django_durable_jobs.rules.errors import InputInvalid
from django_durable_jobs.store import DurableJobStore
from tests.support import assert_refused, db_state

CONFIGURED = {"SCOPE_QUOTAS": {"capped": {"MAX_PENDING": 5}}}

LOOK_ALIKES = {
    "trailing-space": "capped ",
    "leading-tab": "\tcapped",
    "case": "Capped",
    "upper": "CAPPED",
    "full-width": "ｃａｐｐｅｄ",
    "cyrillic-c": "сapped",
    "all-cyrillic": "сарреd".replace("d", "ԁ"),
    "ligature": "ﬁle",
    "greek-omicron": "fοο",
}


@pytest.mark.parametrize("scope", LOOK_ALIKES.values(), ids=LOOK_ALIKES.keys())
def test_a_look_alike_scope_is_refused_with_what_to_use(scope):
    with override_settings(DURABLE_JOBS=CONFIGURED):
        with pytest.raises(InputInvalid) as caught:
            validation.scope(scope)
    assert caught.value.code == "E_JOB_INPUT_INVALID"
    message = caught.value.message
    assert repr(scope) in message
    assert any(hint in message.lower() for hint in ("use ", "write it in one script", "may not"))


@pytest.mark.parametrize(
    "scope",
    [
        "capped",
        "default",
        "tenant-42",
        "Acme",
        "école",
        "東京-支店",
        "ユーザー-a",
        "서울",
        "Ελλάδα",
    ],
)
def test_distinct_names_in_any_script_are_scopes(scope):
    with override_settings(DURABLE_JOBS=CONFIGURED):
        assert validation.scope(scope) == scope


def test_case_alone_makes_no_look_alike_of_a_scope_that_is_not_configured():
    # Only configured scopes are compared: "Acme" and "acme" may both be tenants of yours.
    with override_settings(DURABLE_JOBS=CONFIGURED):
        assert validation.scope("Acme") == "Acme" and validation.scope("acme") == "acme"


def test_the_suggestion_names_the_configured_scope():
    with override_settings(DURABLE_JOBS=CONFIGURED):
        with pytest.raises(InputInvalid, match="looks like the configured scope 'capped'"):
            validation.scope("Capped")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("scope", ["capped ", "Capped", "сapped"], ids=["space", "case", "cyr"])
def test_the_store_and_submit_refuse_it_and_write_nothing(scope):
    with override_settings(DURABLE_JOBS=CONFIGURED):
        assert_refused(InputInvalid, "E_JOB_INPUT_INVALID", lambda: DurableJobStore(scope=scope))
        assert_refused(
            InputInvalid, "E_JOB_INPUT_INVALID", lambda: submit("tests.noop", {}, scope=scope)
        )
        assert submit("tests.noop", {}, scope="capped").scope == "capped"


@pytest.mark.django_db(transaction=True)
def test_runjobs_refuses_it_before_starting():
    with override_settings(DURABLE_JOBS=CONFIGURED):
        before = db_state()
        with pytest.raises(CommandError, match="--scope: .*whitespace"):
            call_command("runjobs", "--burst", "--scope", "capped ")
        assert db_state() == before


@pytest.mark.django_db(transaction=True)
def test_a_token_cannot_be_made_for_it():
    User.objects.create_user("ops", password="pw")
    with override_settings(DURABLE_JOBS=CONFIGURED):
        with pytest.raises(CommandError, match="--scope: .*configured scope 'capped'"):
            call_command("jobs", "token", "create", "--user", "ops", "--scope", "CAPPED")
    assert not ApiToken.objects.exists()
