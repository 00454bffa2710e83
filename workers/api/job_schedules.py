"""When a periodic job's ticks fall: every N seconds, or on a cron expression (UTC).

A tick is a moment every process computes alike from the schedule alone, so that processes that
never talk to each other agree on which tick is due and the store can record it once
(``cloudqueue.listener.stores.tick_ledger``). Interval ticks are the multiples of ``every_s`` since
the Unix epoch; cron ticks are those ``cronsim`` yields, in UTC. Both are pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise
from typing import Protocol

from cronsim import CronSim, CronSimError

from cloudqueue.listener.errors import ConfigurationError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CRON_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_GAPS_MEASURED = 12
"""Cron gaps vary (``0 9 * * 1-5``: 1 day, then 3); the shortest of the next few sets the lease."""


class Schedule(Protocol):
    """Ticks in UTC."""

    @property
    def interval_s(self) -> float:
        """The shortest gap between two ticks (the lease length is chosen from it)."""

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after ``moment``."""

    def latest_at_or_before(self, moment: datetime) -> datetime:
        """The last tick at or before ``moment``."""


@dataclass(frozen=True, slots=True)
class EverySchedule:
    """A tick at every multiple of ``every_s`` seconds since the epoch."""

    every_s: float

    @property
    def interval_s(self) -> float:
        return self.every_s

    def next_after(self, moment: datetime) -> datetime:
        return self._tick(math.floor(self._since_epoch(moment) / self.every_s) + 1)

    def latest_at_or_before(self, moment: datetime) -> datetime:
        return self._tick(math.floor(self._since_epoch(moment) / self.every_s))

    def _tick(self, index: int) -> datetime:
        return _EPOCH + timedelta(seconds=index * self.every_s)

    @staticmethod
    def _since_epoch(moment: datetime) -> float:
        return (moment - _EPOCH).total_seconds()

    def __str__(self) -> str:
        return f"every {self.every_s:g} s"


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """The ticks of a five-field cron expression, ``m h dom mon dow``, in UTC."""

    expression: str

    @classmethod
    def parsed(cls, expression: str) -> CronSchedule:
        """The schedule; ConfigurationError naming the bad field when the expression is invalid."""
        fields = expression.split()
        if len(fields) != len(_CRON_FIELDS):
            raise ConfigurationError(
                f"cron {expression!r} has {len(fields)} field(s); it needs 5: "
                "minute hour day-of-month month day-of-week"
            )
        try:
            next(CronSim(expression, _EPOCH))
        except CronSimError as error:
            raise ConfigurationError(
                f"cron {expression!r}: {_which_field(error, fields)}"
            ) from None
        return cls(" ".join(fields))

    @property
    def interval_s(self) -> float:
        ticks = list(islice(CronSim(self.expression, _EPOCH), _GAPS_MEASURED))
        return min((b - a).total_seconds() for a, b in pairwise(ticks))

    def next_after(self, moment: datetime) -> datetime:
        return next(CronSim(self.expression, moment.astimezone(UTC)))

    def latest_at_or_before(self, moment: datetime) -> datetime:
        # cronsim's reverse walk yields ticks strictly before its start: start a second later.
        start = moment.astimezone(UTC).replace(microsecond=0) + timedelta(seconds=1)
        return next(CronSim(self.expression, start, reverse=True))

    def __str__(self) -> str:
        return f"cron {self.expression}"


def _which_field(error: CronSimError, fields: list[str]) -> str:
    """cronsim says ``Bad minute``: name the field and quote what it holds."""
    message = str(error)
    for index, name in enumerate(_CRON_FIELDS):
        if message.lower() == f"bad {name}":
            return f"field {index + 1} ({name}) {fields[index]!r} is not valid"
    return message
