"""What the real scaler and watchdog are given in a simulation in place of the real things.

A simulated pool has no process to measure, no logger worth a line per decision and no storage
account: these stand in for the CPU meter, the scaler's logger and the listener a ``Watchdog``
reads.
"""

from __future__ import annotations

import logging

import structlog

from cloudqueue.listener.simulation.queue import SimulatedQueue

SIMULATED_QUEUE = "simulated"

QUIET_SCALER_LOG = structlog.wrap_logger(
    None, wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING)
)
"""A simulated day scales thousands of times: its scaler keeps warnings only. Its own logger,
not a global setting, so the process's other threads keep logging as configured."""


class NoCpu:
    """A simulation spends no CPU on handlers: the CPU guard never caps scaling."""

    def cores_used(self) -> float:
        return 0.0


class WatchedListener:
    """What ``Watchdog.check`` reads of a listener: the queue's name and the billed count."""

    def __init__(self, queue: SimulatedQueue) -> None:
        self.queue_name = SIMULATED_QUEUE
        self.storage = self
        self._queue = queue

    def approximate_message_count(self, queue_name: str) -> int:
        return self._queue.approximate_count()
