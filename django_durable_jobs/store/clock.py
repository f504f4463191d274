"""The store's clock against the database's: how far apart they are (read-only)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..database import dbvendor
from .client import Client, now


@dataclass(frozen=True)
class ClockReading:
    """One comparison of the store's clock with the database's.

    ``skew_seconds`` is the database's time minus the store's at the same instant: positive when
    this host's clock is behind the database's, negative when it is ahead. The instant is the
    midpoint of two readings of the store's clock around the query, so the measurement is good to
    ``uncertainty_seconds`` (half the round trip).
    """

    database_time: datetime
    local_time: datetime
    skew_seconds: float
    uncertainty_seconds: float


def database_now(client: Client) -> datetime:
    """Return the database server's current time (aware, UTC). Write nothing."""
    return dbvendor.database_now(client.using)


def clock_skew(client: Client) -> ClockReading:
    """Measure the client's clock against the database's with one query. Write nothing.

    Leases are judged by the clock of whoever reads them, so two hosts whose clocks disagree
    disagree about which leases are alive; the database's clock is the reference they share.
    """
    before = now(client)
    database_time = dbvendor.database_now(client.using)
    after = now(client)
    local_time = before + (after - before) / 2
    return ClockReading(
        database_time=database_time,
        local_time=local_time,
        skew_seconds=(database_time - local_time).total_seconds(),
        uncertainty_seconds=(after - before).total_seconds() / 2,
    )
