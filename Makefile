# Build, test and demo entry points. See docs/development.md.
#
#   make demo    example project on embedded SQLite: migrate, narrated demo (needs only Python)
#   make test    strict docs build, whole suite on SQLite, PostgreSQL and MariaDB, plus SQLite
#                on Django 5.2 LTS, all four at once (TEST_LANES=2: two lanes; 1: one by one)
#                (the PostgreSQL-restart tests only with DURABLE_JOBS_TEST_RESTART_SERVERS=1)
#   make test-quick  the suite on SQLite only (a few minutes; no database server needed)
#   make docs    the documentation site, built with mkdocs --strict into test-output/site
#   make bench   side by side with django-tasks-db, dj-queue and Procrastinate, then the terminal-rows,
#                worker, workflow, stats and flow-control benchmarks (installs the bench extra first)
#
# Extra pytest arguments: make test PYTEST_ARGS="-x -k lease"

# Newest working Python >= 3.12 (evaluated only when a venv is built); override with
# `make venv BASE_PYTHON=/path/to/python3`.
BASE_PYTHON ?= $(shell scripts/find-python)
# The Django 5.2 LTS venv uses the plain python3 on PATH (3.11 on the CI machines).
LTS_PYTHON ?= python3

VENV := .venv
VENV_DJ52 := .venv-dj52
PY := $(VENV)/bin/python
PY_DJ52 := $(VENV_DJ52)/bin/python

PYTEST_ARGS ?=
export PYTEST_ARGS
# mkdocs-material prints a notice about MkDocs 2 on every build unless told not to.
export NO_MKDOCS_2_WARNING := 1
BENCH_ARGS ?=
# Byte-compile, once, what the many processes of the suite and the benchmarks import: where
# PYTHONDONTWRITEBYTECODE is set (the CI machines set it) each process compiled about a hundred
# modules again, ~0.1 s of CPU apiece (a stale file is still compiled in memory, as before).
COMPILE = $(1) -m compileall -q django_durable_jobs tests example_project $(2)

.PHONY: venv venv-dj52 test test-quick lint format docs docs-serve demo bench clean services proof chaos

# The development venv: the package with its test and docs extras (no database server needed).
venv: $(VENV)/.test-installed

venv-dj52: $(VENV_DJ52)/.installed

# Runs once per make invocation (also under -j): installs mysqlclient build headers if
# missing and starts PostgreSQL and MariaDB if they are down. Fails loudly otherwise.
# ensure-browser installs Debian's chromium for tests/admin/test_browser.py (warns, never fails).
# Only `make test` and `make bench` need them; `make demo` and `make test-quick` do not.
services:
	scripts/ensure-services
	scripts/ensure-browser
	scripts/ensure-netns

# Three layers, each reinstalled only when pyproject.toml changes (or after `make clean`):
#   .installed        the package alone (Django, django-ninja): all `make demo` needs
#   .test-installed   + the test and docs extras: `make test-quick`, `make docs`
#   .mysql-installed  + mysqlclient, built against the headers `services` installs: `make test`
$(VENV)/.installed: pyproject.toml
	@test -n "$(BASE_PYTHON)" || { echo "no usable Python found (scripts/find-python)" >&2; exit 1; }
	test -x $(PY) || $(BASE_PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e .
	if ! $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then \
		$(PY) -m pip install -q --disable-pip-version-check 'Django>=5.2,<6'; \
	fi
	$(PY) -c 'import django, sys; print("$(VENV): Python", sys.version.split()[0], "Django", django.get_version())'
	touch $@

$(VENV)/.test-installed: pyproject.toml $(VENV)/.installed
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test,docs]'
	touch $@

$(VENV)/.mysql-installed: pyproject.toml $(VENV)/.test-installed | services
	$(PY) -m pip install -q --disable-pip-version-check -e '.[mysql]'
	touch $@

# Runs SQLite only, so it needs neither the database servers nor mysqlclient.
$(VENV_DJ52)/.installed: pyproject.toml
	test -x $(PY_DJ52) || $(LTS_PYTHON) -m venv $(VENV_DJ52)
	$(PY_DJ52) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY_DJ52) -m pip install -q --disable-pip-version-check -e '.[test]' 'Django>=5.2,<5.3'
	$(PY_DJ52) -c 'import django, sys; print("$(VENV_DJ52): Python", sys.version.split()[0], "Django", django.get_version())'
	touch $@

test: $(VENV)/.mysql-installed $(VENV_DJ52)/.installed | services
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) example_project/manage.py makemigrations --check --dry-run durable_jobs
	$(PY) -m mkdocs build --strict --quiet --site-dir test-output/site
	$(call COMPILE,$(PY))
	$(call COMPILE,$(PY_DJ52))
	scripts/run-suites $(PY) $(PY_DJ52)

# The long proofs on demand: the store's state machine with many more examples, then the fault,
# partition and fuzz proofs, on every database (PROOF_DBS="postgresql" to narrow it).
PROOF_DBS ?= sqlite postgresql mariadb
proof: $(VENV)/.mysql-installed | services
	DURABLE_JOBS_PROOF=long PYTEST_ARGS="tests/proof $(PYTEST_ARGS)" scripts/run-tests $(PY) $(PROOF_DBS)

# The chaos run (docs/guarantees.md): runjobs processes killed, paused and partitioned over
# thousands of jobs, then the history checked. CHAOS_ARGS="--db mariadb --minutes 10", say.
# The database server is restarted only with DURABLE_JOBS_TEST_RESTART_SERVERS=1.
CHAOS_ARGS ?=
chaos: $(VENV)/.mysql-installed | services
	$(PY) -m tests.chaos $(CHAOS_ARGS)

# The whole suite on SQLite alone, with the newest Django: a few minutes, no database server.
test-quick: $(VENV)/.test-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(call COMPILE,$(PY))
	scripts/run-tests $(PY) sqlite

lint: $(VENV)/.test-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(VENV)/.test-installed
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# The documentation site, built strictly (any warning fails) into test-output/site.
docs: $(VENV)/.test-installed
	$(PY) -m mkdocs build --strict --site-dir test-output/site

docs-serve: $(VENV)/.test-installed
	$(PY) -m mkdocs serve

demo: $(VENV)/.installed
	scripts/demo

# The bench extra on top of .venv, again whenever pyproject.toml changes; never changes Django.
$(VENV)/.bench-installed: pyproject.toml $(VENV)/.mysql-installed
	scripts/install-bench $(PY)
	touch $@

# Extra side-by-side arguments go through BENCH_ARGS, e.g. make bench BENCH_ARGS="--update-docs".
bench: $(VENV)/.bench-installed | services
	$(call COMPILE,$(PY),benchmarks)
	$(PY) -m benchmarks.side_by_side $(BENCH_ARGS)
	$(PY) -m benchmarks
	$(PY) -m benchmarks.worker_latency
	$(PY) -m benchmarks.workflows
	$(PY) -m benchmarks.stats
	$(PY) -m benchmarks.flow

clean:
	rm -rf $(VENV) $(VENV_DJ52) .pytest_cache .ruff_cache .hypothesis test-output build dist *.egg-info
	rm -f example_project/db.sqlite3 example_project/db.sqlite3-wal example_project/db.sqlite3-shm
	find . -name __pycache__ -type d -not -path './.git/*' -prune -exec rm -rf {} +
