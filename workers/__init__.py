"""cloudqueue's worker side: the entry point users subclass, its host process and settings."""

from workers.host import WorkerHost
from workers.settings import CloudQueueSettings, ListenerSettings, LoggingSettings
from workers.worker import QueueWorker, load_worker

__all__ = [
    "CloudQueueSettings",
    "ListenerSettings",
    "LoggingSettings",
    "QueueWorker",
    "WorkerHost",
    "load_worker",
]
