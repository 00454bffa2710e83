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

import importlib
from typing import TYPE_CHECKING, Any

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

_HOMES = {
    "BatchFailed": "cloudqueue.listener.errors",
    "CallNext": "cloudqueue.listener.consumer.middleware",
    "CloudQueueError": "cloudqueue.listener.errors",
    "CloudQueueSettings": "cloudqueue.workers.settings.model",
    "ConfigurationError": "cloudqueue.listener.errors",
    "Decision": "cloudqueue.listener.consumer.middleware",
    "GroupDone": "cloudqueue.listener.workflows.group_done",
    "MessageContext": "cloudqueue.listener.consumer.middleware",
    "MessageEnvelope": "cloudqueue.listener.consumer.current",
    "Middleware": "cloudqueue.listener.consumer.middleware",
    "Outcome": "cloudqueue.listener.consumer.middleware",
    "PeriodicJob": "cloudqueue.workers.api.periodic_job",
    "PermanentFailure": "cloudqueue.listener.errors",
    "Publisher": "cloudqueue.listener.producer.publisher",
    "QueueWorker": "cloudqueue.workers.api.worker",
    "Retry": "cloudqueue.listener.policies.retry",
    "RetryLater": "cloudqueue.listener.errors",
    "TimeLimitExceeded": "cloudqueue.listener.errors",
    "current_envelope": "cloudqueue.listener.consumer.current",
    "load_settings": "cloudqueue.workers.settings.model",
}
"""Each public name and the module that defines it."""

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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'cloudqueue' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next look-up is an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
