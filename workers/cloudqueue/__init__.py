"""cloudqueue: auto-scaling queue listeners for long-lived Python workers on Azure Storage Queues.

What a worker author and a producer need imports from here::

    from cloudqueue import QueueWorker, Retry, PermanentFailure

    class SendEmail(QueueWorker[Email]):
        queue_name = "emails"
        retry = Retry(attempts=5)

        def handle(self, item: Email) -> None: ...

Test helpers are in ``cloudqueue.testing``. Everything else has one home below:
``cloudqueue.listener`` (the listener, stores, policies, middleware that ship) and
``cloudqueue.workers`` (the host process, settings sections, logging).

This folder is the import root ``cloudqueue``: ``pyproject.toml`` maps it to that name, and the
repository's ``listener/`` and ``workers/`` folders to ``cloudqueue.listener`` and
``cloudqueue.workers``; nothing else installs at the top level, so a project's own ``workers``
or ``listener`` package never collides with ours. Each name is imported on first use (as
pydantic does), so ``import cloudqueue`` costs nothing until a name is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cloudqueue._version import __version__ as __version__
from cloudqueue.listener.exports import lazy_exports

if TYPE_CHECKING:
    from cloudqueue.listener.consumer.current import MessageEnvelope, current_envelope
    from cloudqueue.listener.consumer.middleware import (
        CallNext,
        Decision,
        MessageContext,
        Middleware,
        Outcome,
    )
    from cloudqueue.listener.errors import (
        BatchFailed,
        CloudQueueError,
        ConfigurationError,
        PermanentFailure,
        RetryLater,
        TimeLimitExceeded,
    )
    from cloudqueue.listener.policies.retry import Retry
    from cloudqueue.listener.producer.publisher import Publisher
    from cloudqueue.listener.workflows.group_done import GroupDone
    from cloudqueue.workers.api.periodic_job import PeriodicJob
    from cloudqueue.workers.api.worker import QueueWorker
    from cloudqueue.workers.settings.model import CloudQueueSettings, load_settings

__all__ = [
    "BatchFailed",
    "CallNext",
    "CloudQueueError",
    "CloudQueueSettings",
    "ConfigurationError",
    "Decision",
    "GroupDone",
    "MessageContext",
    "MessageEnvelope",
    "Middleware",
    "Outcome",
    "PeriodicJob",
    "PermanentFailure",
    "Publisher",
    "QueueWorker",
    "Retry",
    "RetryLater",
    "TimeLimitExceeded",
    "current_envelope",
    "load_settings",
]


if not TYPE_CHECKING:  # mypy reads the imports above; a missing name stays an error
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "cloudqueue.listener.consumer.current": ("MessageEnvelope", "current_envelope"),
            "cloudqueue.listener.consumer.middleware": (
                "CallNext",
                "Decision",
                "MessageContext",
                "Middleware",
                "Outcome",
            ),
            "cloudqueue.listener.errors": (
                "BatchFailed",
                "CloudQueueError",
                "ConfigurationError",
                "PermanentFailure",
                "RetryLater",
                "TimeLimitExceeded",
            ),
            "cloudqueue.listener.policies.retry": ("Retry",),
            "cloudqueue.listener.producer.publisher": ("Publisher",),
            "cloudqueue.listener.workflows.group_done": ("GroupDone",),
            "cloudqueue.workers.api.periodic_job": ("PeriodicJob",),
            "cloudqueue.workers.api.worker": ("QueueWorker",),
            "cloudqueue.workers.settings.model": ("CloudQueueSettings", "load_settings"),
        },
    )
