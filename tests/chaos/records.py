"""Write the history of fenced writes as JSON lines: one file per process in the run's folder.

``tests/chaos/settings.py`` installs :class:`JsonLinesHandler` on ``django_durable_jobs.history``
for every ``runjobs`` child of the chaos run. Each line is one record: the fields
``django_durable_jobs.history`` gives it (``kind``, ``job_id``, ``epoch``, ``owner_id``,
``accepted``, ``at``, ``why``) plus the process id and the time the record was made.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import IO

FIELDS = ("kind", "job_id", "epoch", "owner_id", "accepted", "at", "why")


class JsonLinesHandler(logging.Handler):
    """Append each record to ``<folder>/history-<pid>.jsonl``, a line at a time.

    The file is opened by the process that writes (a forked child gets a file of its own) and
    written line-buffered, so a process killed with SIGKILL loses at most the line it was
    writing; the checker skips a cut last line.
    """

    def __init__(self, folder: str) -> None:
        super().__init__(level=logging.DEBUG)
        self.folder = Path(folder)
        self.pid: int | None = None
        self.stream: IO[str] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            pid = os.getpid()
            if pid != self.pid or self.stream is None:
                self.folder.mkdir(parents=True, exist_ok=True)
                self.stream = open(  # noqa: SIM115 - kept open for the process's life
                    self.folder / f"history-{pid}.jsonl", "a", buffering=1, encoding="utf-8"
                )
                self.pid = pid
            line = {name: getattr(record, name, None) for name in FIELDS}
            line.update(pid=pid, logged=record.created, thread=record.threadName)
            self.stream.write(json.dumps(line) + "\n")
        except Exception:  # noqa: BLE001 - logging must never take the worker down
            self.handleError(record)
