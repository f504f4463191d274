"""The one place benchmark settings describe the local SQLite, PostgreSQL and MariaDB servers."""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

ENGINES = ("sqlite", "postgresql", "mariadb")
OUTPUT_DIR = Path(__file__).resolve().parent.parent / "test-output"


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
