"""The system checks of django_durable_jobs.checks report misconfiguration before anything runs.

Proves each check id (W001 SQLite without IMMEDIATE transactions, E001-E006 for the ``DURABLE_JOBS``
dict and its database alias, E014 for a declared schedule) is raised exactly when its
misconfiguration is present, both when the check functions are called directly (no database) and
through ``manage.py check`` (whose model checks open the test database).
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_durable_jobs.checks import check_database, check_settings
from django_durable_jobs.rules.conf import DEFAULTS, jobs_settings, user_settings

SQLITE_PLAIN = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}


def sqlite(mode: str | None) -> dict:
    return {**SQLITE_PLAIN, "OPTIONS": {} if mode is None else {"transaction_mode": mode}}


@contextmanager
def databases(**extra: dict):
    """Override DATABASES with the real default plus ``extra`` aliases (no connection is opened)."""
    value = {"default": settings.DATABASES["default"], **extra}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Overriding setting DATABASES")
        with override_settings(DATABASES=value):
            yield


def ids(messages) -> list[str]:
    return sorted(m.id for m in messages)


def all_checks() -> list:
    return check_settings() + check_database()


# -- W001: SQLite without IMMEDIATE transactions -------------------------------------------------


@pytest.mark.parametrize("mode", [None, "DEFERRED"], ids=["no-mode", "deferred"])
def test_sqlite_without_immediate_transactions_warns_w001(mode):
    with databases(side=sqlite(mode)):
        found = check_database()
    assert ids(found) == ["durable_jobs.W001"]
    assert "'side'" in found[0].msg
    assert "transaction_mode" in found[0].hint
    assert found[0].is_serious() is False


def test_sqlite_without_options_at_all_warns_w001():
    with databases(side=SQLITE_PLAIN):
        assert ids(check_database()) == ["durable_jobs.W001"]


@pytest.mark.parametrize("mode", ["IMMEDIATE", "immediate", "EXCLUSIVE"])
def test_sqlite_with_immediate_or_exclusive_transactions_does_not_warn(mode):
    with databases(side=sqlite(mode)):
        assert check_database() == []


def test_each_sqlite_alias_without_immediate_gets_its_own_warning():
    with databases(one=sqlite(None), two=sqlite(None), fine=sqlite("IMMEDIATE")):
        found = check_database()
    assert ids(found) == ["durable_jobs.W001", "durable_jobs.W001"]
    named = " ".join(m.msg for m in found)
    assert "'one'" in named and "'two'" in named and "'fine'" not in named


def test_the_suites_own_settings_pass_every_check():
    assert all_checks() == []


# -- E001-E005: the DURABLE_JOBS dict ------------------------------------------------------------


@pytest.mark.parametrize("value", ["default", ["DATABASE"], 42, None])
def test_durable_jobs_that_is_not_a_dict_is_e001(value):
    with override_settings(DURABLE_JOBS=value):
        found = check_settings()
        assert ids(found) == ["durable_jobs.E001"]
        assert found[0].is_serious() is True
        assert check_database() == []  # the database check falls back to "default"


def test_the_settings_are_read_again_whenever_django_says_they_changed():
    before = jobs_settings.MAX_PAYLOAD_BYTES
    with override_settings(DURABLE_JOBS={"MAX_PAYLOAD_BYTES": 123}):
        assert jobs_settings.MAX_PAYLOAD_BYTES == 123
        user_settings()["MAX_PAYLOAD_BYTES"] = 456  # the setting's own dict, changed in place
        assert jobs_settings.MAX_PAYLOAD_BYTES == 456
        with override_settings(DURABLE_JOBS="not a dict"):
            assert user_settings() == {}
            assert jobs_settings.MAX_PAYLOAD_BYTES == DEFAULTS["MAX_PAYLOAD_BYTES"]
        assert jobs_settings.MAX_PAYLOAD_BYTES == 456
    assert jobs_settings.MAX_PAYLOAD_BYTES == before


def test_unset_or_empty_durable_jobs_passes():
    with override_settings(DURABLE_JOBS={}):
        assert all_checks() == []
    with override_settings():
        del settings.DURABLE_JOBS
        assert all_checks() == []


def test_unknown_keys_are_e002_and_named():
    with override_settings(DURABLE_JOBS={"MAX_PAYLOAD_BYTE": 10, "LEASE": 5}):
        found = check_settings()
    assert ids(found) == ["durable_jobs.E002"]
    assert "LEASE" in found[0].msg and "MAX_PAYLOAD_BYTE" in found[0].msg
    assert "MAX_PAYLOAD_BYTES" in found[0].hint


def test_every_documented_key_is_known():
    good = {
        "DEFAULT_SCOPE": "tenant-a",
        "MAX_PAYLOAD_BYTES": 4096,
        "DATABASE": "default",
        "LEASE_SECONDS": 12.5,
    }
    with override_settings(DURABLE_JOBS=good):
        assert all_checks() == []


@pytest.mark.parametrize(
    "cap", [0, -1, "1048576", 1.5, True, None], ids=["zero", "neg", "str", "float", "bool", "none"]
)
def test_a_bad_max_payload_bytes_is_e003(cap):
    with override_settings(DURABLE_JOBS={"MAX_PAYLOAD_BYTES": cap}):
        assert ids(check_settings()) == ["durable_jobs.E003"]


@pytest.mark.parametrize("scope", ["", "   ", 7, None])
def test_a_bad_default_scope_is_e004(scope):
    with override_settings(DURABLE_JOBS={"DEFAULT_SCOPE": scope}):
        assert ids(check_settings()) == ["durable_jobs.E004"]


@pytest.mark.parametrize(
    "values",
    [
        {"DEFAULT_SCOPE": "default ", "SCOPE_QUOTAS": {}},
        {"SCOPE_QUOTAS": {"capped": {}, "Capped": {}}},
        {"SCOPE_QUOTAS": {"ｃａｐｐｅｄ": {}}},
        {"DEFAULT_SCOPE": "capped", "SCOPE_QUOTAS": {"сapped": {}}},  # a Cyrillic "с"
    ],
    ids=["whitespace", "case-twins", "full-width", "cyrillic-twin"],
)
def test_configured_scopes_that_could_be_mistaken_for_others_are_e015(values):
    with override_settings(DURABLE_JOBS=values):
        found = check_settings()
    assert ids(found) == ["durable_jobs.E015"], [e.msg for e in found]


def test_distinct_configured_scopes_pass_e015():
    values = {"DEFAULT_SCOPE": "main", "SCOPE_QUOTAS": {"tenant-a": {}, "東京-1": {}}}
    with override_settings(DURABLE_JOBS=values):
        assert ids(check_settings()) == []


@pytest.mark.parametrize("lease", [0, -3, "30", False, float("nan")])
def test_a_bad_lease_seconds_is_e005(lease):
    with override_settings(DURABLE_JOBS={"LEASE_SECONDS": lease}):
        assert ids(check_settings()) == ["durable_jobs.E005"]


def test_several_problems_are_reported_together():
    with override_settings(DURABLE_JOBS={"MAX_PAYLOAD_BYTES": 0, "DEFAULT_SCOPE": "", "X": 1}):
        assert ids(check_settings()) == [
            "durable_jobs.E002",
            "durable_jobs.E003",
            "durable_jobs.E004",
        ]


# -- E006: unknown database alias ----------------------------------------------------------------


def test_an_unknown_database_alias_is_e006():
    with override_settings(DURABLE_JOBS={"DATABASE": "jobs"}):
        found = check_database()
    assert ids(found) == ["durable_jobs.E006"]
    assert "'jobs'" in found[0].msg
    assert "default" in found[0].hint


def test_a_known_database_alias_passes():
    with databases(jobs=sqlite("IMMEDIATE")), override_settings(DURABLE_JOBS={"DATABASE": "jobs"}):
        assert all_checks() == []


# -- through manage.py check ---------------------------------------------------------------------


@pytest.mark.django_db
def test_check_command_with_database_fails_on_an_error():
    with override_settings(DURABLE_JOBS={"DATABASE": "nowhere"}):
        with pytest.raises(SystemCheckError) as excinfo:
            call_command("check", databases=["default"], stdout=StringIO(), stderr=StringIO())
    assert "durable_jobs.E006" in str(excinfo.value)


@pytest.mark.django_db
def test_check_command_with_database_prints_the_sqlite_warning():
    out, err = StringIO(), StringIO()
    with databases(side=sqlite(None)):
        call_command("check", databases=["default"], stdout=out, stderr=err)
    assert "durable_jobs.W001" in out.getvalue() + err.getvalue()


@pytest.mark.django_db
def test_check_command_passes_with_the_suites_settings():
    out = StringIO()
    call_command("check", databases=["default"], stdout=out, stderr=StringIO())
    assert "no issues" in out.getvalue()


@pytest.mark.django_db
def test_plain_check_command_reports_a_malformed_durable_jobs_setting():
    # `manage.py check` (and runserver) skip checks tagged Tags.database unless --database is
    # given; a settings check needs no database and must not hide behind that tag.
    with override_settings(DURABLE_JOBS="not a dict"):
        with pytest.raises(SystemCheckError) as excinfo:
            call_command("check", stdout=StringIO(), stderr=StringIO())
    assert "durable_jobs.E001" in str(excinfo.value)


@pytest.mark.django_db
def test_plain_check_command_reports_an_unknown_database_alias():
    with override_settings(DURABLE_JOBS={"DATABASE": "nowhere"}):
        with pytest.raises(SystemCheckError) as excinfo:
            call_command("check", stdout=StringIO(), stderr=StringIO())
    assert "durable_jobs.E006" in str(excinfo.value)


# -- E014: declared schedules ---------------------------------------------------------------------


def test_a_bad_cron_expression_is_e014_naming_the_schedule():
    bad = {"nightly-sales": {"operation": "reports.rebuild", "cron": "61 * * * *"}}
    with override_settings(DURABLE_JOBS={"SCHEDULES": bad}):
        found = check_settings()
    assert ids(found) == ["durable_jobs.E014"]
    assert found[0].msg.startswith("Schedule 'nightly-sales': cron '61 * * * *'")


def test_each_bad_schedule_is_its_own_e014():
    bad = {
        "a": {"operation": "op", "cron": "0 3 * * *", "timezone": "Mars/Olympus"},
        "b": {"operation": "op", "every": 30, "catchup": "all"},
        "c": {"operation": "op", "every": 30},
    }
    with override_settings(DURABLE_JOBS={"SCHEDULES": bad}):
        found = check_settings()
    assert ids(found) == ["durable_jobs.E014"] * 2
    assert "timezone 'Mars/Olympus'" in found[0].msg and "Schedule 'a'" in found[0].msg
    assert "did you mean 'catch_up'?" in found[1].msg and "Schedule 'b'" in found[1].msg


def test_schedules_that_are_not_a_dict_are_e014():
    with override_settings(DURABLE_JOBS={"SCHEDULES": [("a", "0 3 * * *")]}):
        found = check_settings()
    assert ids(found) == ["durable_jobs.E014"]
    assert 'DURABLE_JOBS["SCHEDULES"] is a list' in found[0].msg


def test_a_bad_operation_schedule_is_e014():
    from django_durable_jobs import operation
    from django_durable_jobs.rules import registry

    operation("tests.check_schedule", schedule="0 25 * * *")(lambda ctx, payload: None)
    try:
        found = check_settings()
    finally:
        registry.unregister("tests.check_schedule")
    assert ids(found) == ["durable_jobs.E014"]
    assert "@operation('tests.check_schedule', schedule=...)" in found[0].msg


def test_good_schedules_pass():
    good = {
        "nightly-sales": {
            "operation": "reports.rebuild",
            "cron": "0 3 * * *",
            "timezone": "Europe/Paris",
            "payload": {"report": "sales"},
            "catch_up": "all",
        },
        "flush": {"operation": "metrics.flush", "every": 30},
    }
    with override_settings(DURABLE_JOBS={"SCHEDULES": good}):
        assert all_checks() == []


@pytest.mark.django_db
def test_plain_check_command_reports_a_bad_schedule():
    bad = {"nightly": {"operation": "op", "cron": "0 3 * * *", "timezone": "Nowhere/Land"}}
    with override_settings(DURABLE_JOBS={"SCHEDULES": bad}):
        with pytest.raises(SystemCheckError) as excinfo:
            call_command("check", stdout=StringIO(), stderr=StringIO())
    assert "durable_jobs.E014" in str(excinfo.value)
    assert "Schedule 'nightly': timezone 'Nowhere/Land'" in str(excinfo.value)
