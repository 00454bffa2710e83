"""The periodic job users subclass: a schedule, a policy for missed ticks, and ``run(tick)``.

Example::

    class NightlyReport(PeriodicJob):
        cron = "0 2 * * *"          # 02:00 UTC every day; or every_s = 300
        missed = "run_once"         # after a fleet-wide outage, catch up once
        time_limit_s = 600

        def run(self, tick: datetime) -> None:
            build_report(for_day=tick.date())

``cloudqueue run app.jobs:NightlyReport`` runs it, alone or beside queue workers. However many
processes run it on one store, each tick fires once (``cloudqueue.listener.stores.tick_ledger``).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Literal

from cloudqueue.listener.errors import ConfigurationError
from cloudqueue.listener.imports import import_object
from cloudqueue.workers.api.class_checks import check_hooks, check_takes
from cloudqueue.workers.api.job_schedules import CronSchedule, EverySchedule, Schedule
from cloudqueue.workers.api.worker import QueueWorker, load_worker

MissedTicks = Literal["skip", "run_once"]
MISSED_POLICIES: tuple[str, ...] = ("skip", "run_once")

MIN_LEASE_S = 1.0
MAX_LEASE_S = 300.0
LEASE_SHARE_OF_INTERVAL = 0.75
"""The running lease lasts 3/4 of the shortest gap between ticks (1 s to 5 min), renewed every
third of it: a holder killed mid-run frees the job before the next tick is due."""


class PeriodicJob:
    """Subclass with ``every_s`` or ``cron``, and ``run(self, tick)`` (a plain or ``async def``).

    ``tick`` is the scheduled moment (UTC) being fired, not the time the run started. ``missed``
    says what a start after every process was down does: ``"skip"`` (the default) waits for the
    next tick, ``"run_once"`` fires the latest missed tick at once. A run never overlaps the
    previous one: a tick that comes while it still runs is skipped. ``time_limit_s`` (0: none)
    reports a run that goes on longer, and cancels it when ``run`` is ``async``.
    """

    every_s: ClassVar[float | None] = None
    cron: ClassVar[str | None] = None
    missed: ClassVar[str] = "skip"
    time_limit_s: ClassVar[float] = 0

    def run(self, tick: datetime) -> Awaitable[None] | None:
        """Do the job's work for ``tick``; an exception is logged and counted, not retried."""
        raise NotImplementedError(f"{type(self).__name__} must implement run(self, tick)")

    def startup(self) -> Awaitable[None] | None:
        """Open what the runs share, once, before the first tick; may be an ``async def``, run
        on the loop ``async def run`` runs on. Raising stops the process (exit code 4)."""

    def shutdown(self) -> Awaitable[None] | None:
        """Close what ``startup`` opened, after the last run (and ``on_stop``); an exception is
        logged, not raised."""

    def on_stop(self) -> None:
        """Called once after the last run has finished (or the grace period ran out), before
        ``shutdown``; a plain ``def``."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job class's validated schedule and options, and the name its ticks are recorded under."""

    name: str
    schedule: Schedule
    missed: str
    time_limit_s: float

    @property
    def lease_s(self) -> float:
        return min(
            MAX_LEASE_S, max(MIN_LEASE_S, self.schedule.interval_s * LEASE_SHARE_OF_INTERVAL)
        )


def job_spec(job_type: type[PeriodicJob]) -> JobSpec:
    """The job's spec; ConfigurationError with one clear line for any bad class attribute, a
    ``run`` that cannot take a tick, or a hook never called (``class_checks.check_hooks``)."""
    name = job_name(job_type)
    check_takes(job_type, name, "run", "one tick", "run(self, tick)")
    check_hooks(job_type, PeriodicJob, name)
    every_s, cron = job_type.every_s, job_type.cron
    if (every_s is None) == (cron is None):
        raise ConfigurationError(
            f"{name} must set exactly one of every_s = SECONDS or cron = '...'"
        )
    schedule: Schedule
    if cron is not None:
        if not isinstance(cron, str):
            raise ConfigurationError(f"{name}: cron must be a string like '*/5 * * * *'")
        try:
            schedule = CronSchedule.parsed(cron)
        except ConfigurationError as error:
            raise ConfigurationError(f"{name}: {error}") from None
    else:
        schedule = EverySchedule(_positive(name, "every_s", every_s))
    if job_type.missed not in MISSED_POLICIES:
        raise ConfigurationError(
            f"{name}: missed must be 'skip' or 'run_once', not {job_type.missed!r}"
        )
    limit = job_type.time_limit_s
    time_limit_s = 0.0 if limit == 0 else _positive(name, "time_limit_s (0 for none)", limit)
    return JobSpec(name, schedule, job_type.missed, time_limit_s)


def _positive(name: str, field: str, value: object) -> float:
    valid = isinstance(value, int | float) and not isinstance(value, bool)
    if not valid or not math.isfinite(float(value)) or float(value) <= 0:  # type: ignore[arg-type]
        raise ConfigurationError(
            f"{name}: {field} must be a positive number of seconds, not {value!r}"
        )
    return float(value)  # type: ignore[arg-type]


def job_name(job_type: type[PeriodicJob]) -> str:
    """``module:Class``, as the command line names it; the ledger records ticks under it."""
    return f"{job_type.__module__}:{job_type.__qualname__}"


def load_target(target: str) -> type[QueueWorker[Any]] | type[PeriodicJob]:
    """Import ``module:Class``: a QueueWorker subclass or a PeriodicJob subclass (checked)."""
    found = import_object(target, what="worker or job")
    if isinstance(found, type) and issubclass(found, PeriodicJob):
        if found.run is PeriodicJob.run:
            raise ConfigurationError(f"{target!r} does not define run(self, tick)")
        job_spec(found)  # refused at start, never a half-working process
        return found
    if isinstance(found, type) and issubclass(found, QueueWorker):
        return load_worker(target)
    raise ConfigurationError(f"{target!r} is neither a QueueWorker nor a PeriodicJob subclass")
