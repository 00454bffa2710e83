"""cloudqueue's worker side: the entry points users subclass (queue workers, periodic jobs), their
host process and settings."""

from workers.host import WorkerHost
from workers.periodic_job import PeriodicJob
from workers.settings import CloudQueueSettings, ListenerSettings, LoggingSettings
from workers.worker import QueueWorker, load_worker

__all__ = [
    "CloudQueueSettings",
    "ListenerSettings",
    "LoggingSettings",
    "PeriodicJob",
    "QueueWorker",
    "WorkerHost",
    "load_worker",
]
