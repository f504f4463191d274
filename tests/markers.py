"""Marker files that child processes write for a test to wait on, written whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path


def write_marker(path: str | Path, text: str = "") -> None:
    """Write ``text`` to ``path`` by renaming a finished file into place.

    A test polls for the marker and then reads it: written in place, the file exists (empty)
    before its text does, and a read between the two finds ``""``.
    """
    path = Path(path)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(text)
    os.replace(partial, path)
