"""What ``python -m benchmarks`` and ``python -m benchmarks.stats`` share.

Both run one child process per engine under ``benchmarks/settings.py``: the parent parses the
same --db, --batch, --seed (and internal --child, --result-file) options, starts the children,
prints a table and turns what went wrong into the exit status; each child recreates and migrates
its databases, bulk-loads rows and writes its figures as JSON to its --result-file.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path

from benchmarks.databases import ENGINES, recreate_database, run_per_database

SETTINGS_MODULE = "benchmarks.settings"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def summary(seconds: list[float]) -> dict[str, float]:
    """Return the median and the p95 (nearest rank) in milliseconds."""
    ordered = sorted(seconds)
    p95 = ordered[max(1, math.ceil(0.95 * len(ordered))) - 1]
    return {"median": statistics.median(ordered) * 1000, "p95": p95 * 1000}


# -- options ------------------------------------------------------------------------------------


def engines_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """Return a parser with --db, the first option of both benchmarks."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument(
        "--db", default=",".join(ENGINES), help="comma-separated engines (default: %(default)s)"
    )
    return parser


def add_batch_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--batch", type=int, default=5000, help="rows per bulk-load transaction (%(default)s)"
    )


def add_seed_and_child_options(parser: argparse.ArgumentParser) -> None:
    """Add --seed and the internal --child and --result-file, the last options of both."""
    add = parser.add_argument
    add("--seed", type=int, default=2026, help="seed of the generated rows (%(default)s)")
    add("--child", choices=ENGINES, help=argparse.SUPPRESS)  # internal: one engine
    add("--result-file", help=argparse.SUPPRESS)


def parse_engines(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse ``argv`` and set ``args.engines`` from --db (a parser error unless all are known)."""
    args = parser.parse_args(argv)
    args.engines = list(dict.fromkeys(d.strip().lower() for d in args.db.split(",") if d.strip()))
    if not args.engines or not set(args.engines) <= set(ENGINES):
        parser.error(f"--db takes a comma-separated subset of {','.join(ENGINES)}")
    return args


# -- parent -------------------------------------------------------------------------------------


def run_engines(
    module: str, args: argparse.Namespace, options: list[str], **env: str
) -> tuple[list[dict], list[str]]:
    """Run ``python -m module --child ENGINE`` for each of ``args.engines``; (results, failed).

    Each child gets ``options`` plus --batch and --seed, and the environment of this process with
    ``env``, the engine and the benchmark settings.
    """
    options = [*options, "--batch", str(args.batch), "--seed", str(args.seed)]

    def env_for(engine: str) -> dict[str, str]:
        return dict(
            os.environ, **env, DURABLE_JOBS_BENCH_DB=engine, DJANGO_SETTINGS_MODULE=SETTINGS_MODULE
        )

    return run_per_database(module, args.engines, options, env_for)


def print_total(elapsed: float) -> None:
    print(f"total {elapsed:.0f} s on {os.cpu_count()} CPU(s)")


def exit_status(label: str, problems: list[str], broken: list[str]) -> int:
    """Print each problem after ``label`` and the engines without figures; return the status.

    2 when an engine gave no figures, 1 when there is a problem, 0 otherwise.
    """
    for line in problems:
        print(f"{label}: {line}")
    if broken:
        print(f"FAILED: no figures for {', '.join(broken)}")
        return 2
    return 1 if problems else 0


# -- child --------------------------------------------------------------------------------------


def start_child(engine: str, aliases: list[str] | None = None, *, recreate: bool = True) -> None:
    """Set Django up on ``engine``'s benchmark databases and migrate them.

    ``aliases`` are the databases of ``benchmarks/settings.py`` to use (all by default); each is
    dropped and created anew first unless ``recreate`` is false.
    """
    os.environ["DURABLE_JOBS_BENCH_DB"] = engine
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS_MODULE
    from benchmarks import settings as bench_settings

    if aliases is None:
        aliases = list(bench_settings.DATABASES)
    if recreate:
        for alias in aliases:
            recreate_database(engine, bench_settings.DATABASES[alias])
    import django

    django.setup()
    from django.core.management import call_command

    for alias in aliases:
        call_command("migrate", database=alias, verbosity=0)


def write_result(args: argparse.Namespace, result: dict) -> int:
    """Write the child's figures to its --result-file for the parent; return exit status 0."""
    Path(args.result_file).write_text(json.dumps(result))
    return 0
