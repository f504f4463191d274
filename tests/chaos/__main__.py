"""``python -m tests.chaos``: the chaos run (``make chaos CHAOS_ARGS="--db mariadb --minutes 10"``)."""

import sys

from tests.chaos.harness import run

sys.exit(run())
