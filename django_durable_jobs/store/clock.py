"""The store's clock against the database's: how far apart they are (read-only)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..dbvendor import database_now
from .base import StoreBase


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


class ClockMixin(StoreBase):
    """Read the database's clock and compare it with the store's."""

    def database_now(self) -> datetime:
        """Return the database server's current time (aware, UTC). Writes nothing."""
        return database_now(self.using)

    def clock_skew(self) -> ClockReading:
        """Measure the store's clock against the database's with one query. Writes nothing.

        Leases are judged by the clock of whoever reads them, so two hosts whose clocks disagree
        disagree about which leases are alive; the database's clock is the reference they share.
        """
        before = self._now()
        database_time = database_now(self.using)
        after = self._now()
        local_time = before + (after - before) / 2
        return ClockReading(
            database_time=database_time,
            local_time=local_time,
            skew_seconds=(database_time - local_time).total_seconds(),
            uncertainty_seconds=(after - before).total_seconds() / 2,
        )
