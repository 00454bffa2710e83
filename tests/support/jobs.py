"""Periodic jobs that the CLI tests run in real subprocesses.

Each run logs ``job_ran`` with its tick and the process id, then takes ``TEST_JOB_RUN_S``
seconds (shorter than the interval), so a test sees which process fired which tick and can kill
a holder in the middle of its run.
"""

from __future__ import annotations

import os
import time
from datetime import datetime

import structlog

from cloudqueue.workers import PeriodicJob

log = structlog.get_logger("tests.jobs")

RUN_S = float(os.environ.get("TEST_JOB_RUN_S", "0"))


class EveryTwoSeconds(PeriodicJob):
    """Fires every 2 s; its ticks are recorded under its own name in each test's own store."""

    every_s = 2

    def run(self, tick: datetime) -> None:
        log.info("job_ran", tick=tick.isoformat(), pid=os.getpid())
        if RUN_S:
            time.sleep(RUN_S)  # a run that takes a while, as the scenario needs
