"""What every benchmarked system provides to the harness, and the part Django systems share."""

from __future__ import annotations

from argparse import Namespace
from typing import Any


def payload(n: int) -> dict[str, Any]:
    """Return the ~50-byte JSON payload of job ``n`` (the same for every system)."""
    return {"n": n, "pad": "x" * 28}


class System:
    """One job system on one database, as a child process of the benchmark sees it.

    A subclass stores and drains jobs its own way; the harness times it all the same way.
    """

    name = ""
    #: The idle worker's poll interval when it learns of new work only by polling, else None.
    poll_seconds: float | None = None
    #: Why the bulk path is missing, or None when ``enqueue_many`` exists.
    bulk_unavailable: str | None = "no bulk enqueue"

    def __init__(self, db: str, args: Namespace) -> None:
        self.db = db
        self.args = args

    @property
    def wakeup(self) -> str:
        """Describe how an idle worker learns of a new job."""
        return "NOTIFY" if self.poll_seconds is None else f"poll {self.poll_seconds:g} s"

    def series(self) -> dict[str, str]:
        """Return the drain configurations to run, as {series key: label}."""
        return {"default": self.label}

    @property
    def label(self) -> str:
        from benchmarks.systems import SYSTEMS

        return SYSTEMS[self.name].label

    def setup(self) -> None:
        """Drop, recreate and migrate this system's database."""
        raise NotImplementedError

    def open(self) -> None:
        """Prepare this process to use the database ``setup()`` created."""

    def close(self) -> None:
        """Release what ``open()`` took (connections, pools) before the process exits."""

    def server_version(self) -> str:
        from benchmarks.databases import server_version

        return server_version()
