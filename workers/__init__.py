"""cloudqueue's worker side: the entry points users subclass (queue workers, periodic jobs), their
host process and settings, and what ``cloudqueue run`` sets up around a host (logging, the live
status line) for running workers in your own process.

The public surface is what ``__all__`` names, with ``cloudqueue.workers.testing``; everything else
is internal. Importing this root imports none of them: each name's module is imported on the
name's first use (``cloudqueue.listener.exports``), so that every ``cloudqueue`` command, whose
package this is, starts without the host, Redis and the Azure SDK.
"""

from typing import TYPE_CHECKING

from cloudqueue.listener.exports import lazy_exports

if TYPE_CHECKING:
    from cloudqueue.workers.api.periodic_job import PeriodicJob
    from cloudqueue.workers.api.sending import close_senders
    from cloudqueue.workers.api.worker import QueueWorker, load_worker
    from cloudqueue.workers.host.host import WorkerHost
    from cloudqueue.workers.host.live_progress import group_progress_source, running_progress
    from cloudqueue.workers.logging import configure_logging
    from cloudqueue.workers.progress import ConsoleStream, LiveProgress
    from cloudqueue.workers.settings import (
        CloudQueueSettings,
        ListenerSettings,
        LoggingSettings,
        ScalingSettings,
        load_settings,
    )
    from cloudqueue.workers.settings.connections import open_storage_from_settings

__all__ = [
    "CloudQueueSettings",
    "ConsoleStream",
    "ListenerSettings",
    "LiveProgress",
    "LoggingSettings",
    "PeriodicJob",
    "QueueWorker",
    "ScalingSettings",
    "WorkerHost",
    "close_senders",
    "configure_logging",
    "group_progress_source",
    "load_settings",
    "load_worker",
    "open_storage_from_settings",
    "running_progress",
]

if not TYPE_CHECKING:  # mypy reads the imports above; a missing name stays an error
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "cloudqueue.workers.api.periodic_job": ("PeriodicJob",),
            "cloudqueue.workers.api.worker": ("QueueWorker", "load_worker"),
            "cloudqueue.workers.host.host": ("WorkerHost",),
            "cloudqueue.workers.host.live_progress": ("group_progress_source", "running_progress"),
            "cloudqueue.workers.api.sending": ("close_senders",),
            "cloudqueue.workers.logging": ("configure_logging",),
            "cloudqueue.workers.progress": ("ConsoleStream", "LiveProgress"),
            "cloudqueue.workers.settings": (
                "CloudQueueSettings",
                "ListenerSettings",
                "LoggingSettings",
                "ScalingSettings",
                "load_settings",
            ),
            "cloudqueue.workers.settings.connections": ("open_storage_from_settings",),
        },
    )
