"""The periodic jobs of a host process: their ledger, one scheduler each, and their live state."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Sequence

from cloudqueue.listener.clock import SYSTEM_CLOCK, Clock
from cloudqueue.listener.stores.connection import open_tick_ledger
from cloudqueue.listener.stores.tick_ledger import TickLedger
from cloudqueue.workers.api.periodic_job import PeriodicJob, job_spec
from cloudqueue.workers.host.job_scheduler import JobScheduler
from cloudqueue.workers.host.live_state import JobLiveState
from cloudqueue.workers.settings import CloudQueueSettings


class HostedJobs:
    """Schedulers for the given job classes on one ledger (opened from the settings if none is
    given, and then closed here)."""

    def __init__(
        self,
        job_types: Sequence[type[PeriodicJob]],
        settings: CloudQueueSettings,
        *,
        ledger: TickLedger | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        # Every job is validated before the ledger is opened: a bad one starts nothing.
        specs = [job_spec(job_type) for job_type in job_types]
        self._owned = ledger is None and bool(job_types)
        if ledger is None and job_types:
            ledger = open_tick_ledger(
                settings.connection_string_value(), credential=settings.credential
            )
        self.ledger = ledger
        holder = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.schedulers = [
            JobScheduler(job_type(), spec, ledger, holder=holder, clock=clock)
            for job_type, spec in zip(job_types, specs, strict=True)
            if ledger is not None
        ]

    @property
    def names(self) -> list[str]:
        return [scheduler.spec.name for scheduler in self.schedulers]

    def start_up(self) -> None:
        """Every job's ``startup``; ``StartupFailedError`` (logged) when one raises."""
        for scheduler in self.schedulers:
            scheduler.start_up()

    def start(self) -> None:
        for scheduler in self.schedulers:
            scheduler.start()

    def request_stop(self) -> None:
        """No job fires again; runs in progress go on."""
        for scheduler in self.schedulers:
            scheduler.request_stop()

    def stop(self, deadline_s: float, clock: Clock = SYSTEM_CLOCK) -> bool:
        """Wait for runs in progress until the monotonic ``deadline_s``; True if all finished."""
        finished = [
            scheduler.stop(max(0.0, deadline_s - clock.monotonic()))
            for scheduler in self.schedulers
        ]
        if self._owned and self.ledger is not None:
            self.ledger.close()
        return all(finished)

    def states(self) -> list[JobLiveState]:
        return [JobLiveState.of(scheduler) for scheduler in self.schedulers]

    def __repr__(self) -> str:
        return f"HostedJobs({self.names})"


__all__ = ["HostedJobs"]
