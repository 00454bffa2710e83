"""cloudqueue's worker side: the entry points users subclass (queue workers, periodic jobs), their
host process and settings, and what ``cloudqueue run`` sets up around a host (logging, the live
status line) for running workers in your own process.

The public surface is what ``__all__`` names, with ``workers.testing``; everything else is
internal."""

from listener.errors import BatchFailed
from listener.policies.retry import Retry
from workers.host import WorkerHost
from workers.logging import configure_logging
from workers.periodic_job import PeriodicJob
from workers.progress import ConsoleStream, LiveProgress
from workers.settings import (
    CloudQueueSettings,
    ListenerSettings,
    LoggingSettings,
    ScalingSettings,
    load_settings,
)
from workers.worker import QueueWorker, load_worker

__all__ = [
    "BatchFailed",
    "CloudQueueSettings",
    "ConsoleStream",
    "ListenerSettings",
    "LiveProgress",
    "LoggingSettings",
    "PeriodicJob",
    "QueueWorker",
    "Retry",
    "ScalingSettings",
    "WorkerHost",
    "configure_logging",
    "load_settings",
    "load_worker",
]
