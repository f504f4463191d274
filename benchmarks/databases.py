"""The one place benchmark settings describe the local SQLite, PostgreSQL and MariaDB servers."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

ENGINES = ("sqlite", "postgresql", "mariadb")
REPO_ROOT = Path(__file__).resolve().parent.parent
OUTPUT_DIR = REPO_ROOT / "test-output"


def database(engine: str, name: str, variable: str) -> dict:
    """Return a DATABASES entry for benchmark database ``name`` on ``engine``.

    SQLite gets a file under test-output/ and the IMMEDIATE transactions the store needs;
    ``variable`` names the environment variable that chose ``engine``, for the error message.
    """
    if engine == "sqlite":
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(OUTPUT_DIR / f"{name}.sqlite3"),
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    if engine == "postgresql":
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "USER": "postgres",
            "PASSWORD": "",
            "HOST": "127.0.0.1",
            "PORT": "5432",
        }
    if engine == "mariadb":
        return {
            "ENGINE": "django.db.backends.mysql",
            "NAME": name,
            "USER": "root",
            "PASSWORD": "",
            "HOST": "127.0.0.1",
            "PORT": "3306",
            "OPTIONS": {"charset": "utf8mb4"},
        }
    raise ImproperlyConfigured(
        f"{variable}={engine!r} is not supported; use one of {', '.join(ENGINES)}."
    )


def run_per_database(
    module: str, dbs: list[str], options: list[str], env_for: Callable[[str], dict[str, str]]
) -> tuple[list[dict], list[str]]:
    """Run ``python -m module --child DB ...`` once per database; return (results, failed dbs).

    Each child writes its figures as JSON to the ``--result-file`` it is given, so one database
    failing never costs the others' figures.
    """
    results: list[dict] = []
    broken: list[str] = []
    with tempfile.TemporaryDirectory(prefix="durable-jobs-bench-") as tmp:
        for db in dbs:
            result_file = Path(tmp) / f"{db}.json"
            command = [sys.executable, "-m", module, "--child", db]
            command += ["--result-file", str(result_file), *options]
            print(f"== {db} ==", file=sys.stderr, flush=True)
            code = subprocess.run(command, env=env_for(db), cwd=REPO_ROOT, check=False).returncode
            if code != 0 or not result_file.exists():
                print(
                    f"{db}: the benchmark failed (exit {code}); see the output above",
                    file=sys.stderr,
                    flush=True,
                )
                broken.append(db)
            else:
                results.append(json.loads(result_file.read_text()))
    return results, broken


def recreate_database(engine: str, conf: dict[str, Any], *, create: bool = True) -> None:
    """Drop the benchmark database ``conf`` describes (only ever that one) and create it anew.

    Call it before Django opens a connection to it: PostgreSQL and MariaDB are reached through
    their server's maintenance database with the driver, SQLite by deleting the file. With
    ``create=False`` the database is only dropped.
    """
    name = conf["NAME"]
    if engine == "sqlite":
        Path(name).parent.mkdir(parents=True, exist_ok=True)
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{name}{suffix}").unlink(missing_ok=True)
    elif engine == "postgresql":
        import psycopg

        server = {"host": conf["HOST"], "port": int(conf["PORT"]), "user": conf["USER"]}
        with psycopg.connect(dbname="postgres", autocommit=True, **server) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            if create:
                connection.execute(f'CREATE DATABASE "{name}"')
    else:
        import MySQLdb

        connection = MySQLdb.connect(
            host=conf["HOST"], port=int(conf["PORT"]), user=conf["USER"], passwd=conf["PASSWORD"]
        )
        try:
            cursor = connection.cursor()
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
            if create:
                cursor.execute(
                    f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
                )
        finally:
            connection.close()


def server_version() -> str:
    """Return the default database's server and version, e.g. "PostgreSQL 15.20 (Debian …)"."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT sqlite_version()")
            return f"SQLite {cursor.fetchone()[0]}"
        cursor.execute("SELECT version()")
        return cursor.fetchone()[0].split(" on ")[0].split(",")[0]
